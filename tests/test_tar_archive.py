"""The member index of a tar archive (`tar_archive`): a whole archive of any common format is indexed as
`tarfile` reads it, and an archive that ends early is never read as whole."""

import io
import shutil
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from concrete_jungle.files.tar_archive import scan_tar
from concrete_jungle.sources import read_samples

sys.path.insert(0, str(Path(__file__).parent))
from test_stores import exact_or_named, img2dataset_shard  # noqa: E402


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_a_whole_archive_is_indexed_as_tarfile_reads_it(tmp_path, fmt):
    path = tmp_path / "a.tar"
    long = "a/" + "long-folder-name/" * 8 + "0001.txt"  # past a plain header's 100 characters
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, data in (("0000.jpg", b"\xff\xd8" * 700), ("empty.txt", b""), (long, b"a dog"),
                           ("café/0002.txt", b"x" * 512)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        folder, link = tarfile.TarInfo("café"), tarfile.TarInfo("link.jpg")
        folder.type, link.type, link.linkname = tarfile.DIRTYPE, tarfile.SYMTYPE, "0000.jpg"
        tar.addfile(folder)
        tar.addfile(link)
    with tarfile.open(path) as tar:
        expected = {m.name: (m.offset_data, m.size) for m in tar if m.isfile()}
    scan = scan_tar(path)
    assert scan.members == expected and len(expected) == 4
    assert (scan.damage, scan.repeated, scan.end_blocks) == (None, {}, True)


def test_an_archive_cut_inside_its_end_of_archive_blocks_is_damaged_and_after_them_is_whole(tmp_path):
    path = img2dataset_shard(tmp_path / "00000.tar", ["000000001"])
    with tarfile.open(path) as tar:
        last = tar.getmembers()[-1]
    end = last.offset_data + (last.size + 511) // 512 * 512
    data = path.read_bytes()
    for cut, damage in ((end, None), (end + 512, "it ends inside its end-of-archive blocks (after '000000001.txt')"),
                        (end + 1024, None), (len(data), None)):
        path.write_bytes(data[:cut])
        assert scan_tar(path).damage == damage, cut
        assert scan_tar(path).end_blocks == (cut >= end + 1024)


@pytest.mark.slow
def test_300_random_cuts_of_img2dataset_shards_are_all_reported(tmp_path):
    """Shards written with webdataset.TarWriter (10 samples each, img2dataset's metadata beside them), each cut at
    random byte offsets (seeded) anywhere before its end-of-archive blocks end: no cut shard reads as complete; each
    yields exact records and rejects or a damage report naming it."""
    rng = np.random.default_rng(20240611)
    shards = []
    for s in range(3):
        whole = img2dataset_shard((tmp_path / f"whole{s}").mkdir() or tmp_path / f"whole{s}" / "00000.tar",
                                  [f"{10 * s + i:09d}" for i in range(10)])
        with tarfile.open(whole) as tar:
            last = tar.getmembers()[-1]
        shards.append((whole, last.offset_data + (last.size + 511) // 512 * 512))  # where the end-of-archive begins
    read_as_complete = 0
    for trial in range(300):
        whole, end = shards[trial % 3]
        cut = int(rng.integers(0, end + 1023))
        cut += cut >= end  # a cut exactly at the end-of-archive loses nothing
        folder = shutil.copytree(whole.parent, tmp_path / f"cut{trial}")  # the metadata beside it too
        (folder / "00000.tar").write_bytes(whole.read_bytes()[:cut])
        keys = [f"{10 * (trial % 3) + i:09d}" for i in range(10)]
        ok, errors = exact_or_named(list(read_samples([folder / "00000.tar"])), folder / "00000.tar", keys, folder)
        read_as_complete += not errors
        shutil.rmtree(folder)
    assert read_as_complete == 0
