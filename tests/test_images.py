"""Hostile and broken image files (images.py): plant skips them with the reason, training pairs skip and count
them, also when one fails only at its step, and a broken picture inside a ConcreteBatch stops a command naming it."""

import json
import os
import sys
from pathlib import Path

import pytest

from concrete_jungle.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from conftest import TINY_TRAIN  # noqa: E402
from plant_fixtures import plant_args  # noqa: E402


def hostile_images(folder: Path) -> dict[str, str]:
    """Image files a data set can hold by accident or on purpose; name -> what must happen to it."""
    import struct
    import zlib

    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    buf = folder / "small.png"
    Image.new("L", (10, 10)).save(buf)
    data = bytearray(buf.read_bytes())
    data[16:24] = struct.pack(">II", 30000, 30000)  # a decompression bomb's header: 900 M pixels claimed
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    (folder / "bomb.png").write_bytes(bytes(data))
    buf.unlink()
    Image.new("L", (1, 60000)).save(folder / "needle.png")
    os.mkfifo(folder / "fifo.jpg")
    os.symlink("/dev/zero", folder / "zero.jpg")
    Image.fromarray(np.full((16, 16), 40000, np.uint16)).save(folder / "deep.png")  # 16-bit grey
    Image.new("RGB", (64, 64), (10, 200, 30)).save(folder / "whole.jpg", quality=90)
    (folder / "cut.jpg").write_bytes((folder / "whole.jpg").read_bytes()[:300])  # truncated
    return {"bomb.png": "image too large", "needle.png": "extreme aspect ratio", "fifo.jpg": "is a FIFO",
            "zero.jpg": "is a device", "cut.jpg": "unreadable image", "deep.png": "kept", "whole.jpg": "kept"}


def test_plant_skips_hostile_images_with_their_reason_and_scales_deep_ones(tmp_path):
    import numpy as np

    from concrete_jungle.concretebatch import iter_records

    expected = hostile_images(tmp_path / "img")
    captions = tmp_path / "c.jsonl"
    captions.write_text("".join(json.dumps({"id": name, "captions": ["a dog next to a red car"],
                                            "image": name}) + "\n" for i, name in enumerate(expected)))
    out = tmp_path / "cb"
    # no hang, no crash; the two kept anchors (16 and 64 px) share a batch: `none` returns them at their own sizes
    assert main(plant_args(captions, tmp_path / "img", out)) == 0
    rows = {r["id"]: r for r in map(json.loads, (out / "manifest.jsonl").read_text().splitlines())}
    for name, what in expected.items():
        if what == "kept":
            assert rows[name]["status"] == "ok", rows[name]
        else:
            assert rows[name]["status"] == "rejected" and what in rows[name]["reason"], rows[name]
    deep = next(r for r in iter_records(out) if r["meta"]["id"] == "deep.png")
    assert abs(int(np.asarray(deep["image"]).mean()) - round(40000 * 255 / 65535)) <= 3  # scaled, not white


def test_training_pairs_skip_hostile_images_and_count_them(tmp_path, capsys):
    expected = hostile_images(tmp_path / "img")
    del expected["cut.jpg"]  # decodes only at its step: tested below
    captions = tmp_path / "pairs.jsonl"
    names = list(expected) * 3
    captions.write_text("".join(json.dumps({"id": f"{n}-{i}", "caption": f"a thing {i}", "image": n}) + "\n"
                                for i, n in enumerate(names)))
    out = tmp_path / "run"
    assert main(["train", "--set", f"data.pairs=['{captions}']", "--set", f"data.pairs_images={tmp_path / 'img'}",
                 "--out", str(out), "--steps", "2", "--batch-size", "4", "--set", "model.name=cj-tiny", "--set",
                 "model.pretrained=none", "--set", "data.workers=0", "--no-progress"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "data.pairs: 12 of 18 pairs skipped (4 images)" in err and "is a FIFO" in err


@pytest.mark.parametrize("workers", [0, 1])
def test_a_training_pair_that_fails_to_decode_at_its_step_is_skipped_logged_and_the_same_after_resume(
        tmp_path, capfd, workers):
    import numpy as np
    from PIL import Image

    folder = tmp_path / "img"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(8):  # noise: most of the file is scan data, after the header
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(folder / f"{i}.jpg", quality=95)
    whole = (folder / "3.jpg").read_bytes()
    (folder / "3.jpg").write_bytes(whole[:len(whole) // 2])  # its header reads: only decoding finds it
    captions = tmp_path / "pairs.jsonl"
    captions.write_text("".join(json.dumps({"id": str(i), "caption": f"a thing {i}", "image": f"{i}.jpg"}) + "\n"
                                for i in range(8)))
    out = tmp_path / "run"
    base = ["train", "--set", f"data.pairs=['{captions}']", "--set", f"data.pairs_images={folder}", "--out",
            str(out), "--batch-size", "4", "--set", "model.name=cj-tiny", "--set", "model.pretrained=none", "--set",
            f"data.workers={workers}", "--set", "data.preload_mib=0", "--set", "save_every=1", "--no-progress"]
    assert main(base + ["--steps", "4"]) == 0  # two epochs: the broken pair's batch comes twice
    err = " ".join(capfd.readouterr().err.split())  # from the DataLoader worker's process too
    assert f"data.pairs: skipped: unreadable image: {folder / '3.jpg'}" in err
    skips = [json.loads(line) for line in (out / "skipped_pairs.jsonl").read_text().splitlines()]
    assert skips == [{"pair": 3, "instead": 4, "reason": skips[0]["reason"]}] * 2
    straight = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    resumed = [a if a != str(out) else str(tmp_path / "resumed") for a in base] + ["--steps", "4"]
    assert main(resumed + ["--stop-at", "2"]) == 0  # the broken batch once, then stopped and resumed
    assert main(resumed + ["--resume", "latest"]) == 0
    log = tmp_path / "resumed"
    assert [json.loads(line)["loss"] for line in (log / "metrics.jsonl").read_text().splitlines()] == straight
    assert (log / "skipped_pairs.jsonl").read_text() == (out / "skipped_pairs.jsonl").read_text()


@pytest.mark.parametrize("command", ["train", "cache", "gallery", "analyze"])
def test_a_broken_picture_in_a_concretebatch_of_other_tools_stops_naming_the_record(planted, tmp_path, capsys,
                                                                                     command):
    import io
    import shutil
    import tarfile

    data = tmp_path / "cb"
    shutil.copytree(planted, data, ignore=shutil.ignore_patterns("cache", ".*.lock"))
    shard = data / "shard-000001.tar"
    with tarfile.open(shard) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar]
    victim = next(m for m, _ in members if m.name.endswith(".neg.jpg"))
    with tarfile.open(shard, "w") as tar:  # one negative cut short: its header reads, its pixels do not
        for member, content in members:
            content = content[:len(content) // 2] if member is victim else content
            member.size = len(content)
            tar.addfile(member, io.BytesIO(content))
    (data / "manifests" / "shard-000001.sha256").unlink()  # as other tools write it: no recorded digest
    model = ["--model", "cj-tiny", "--pretrained", "none"]
    args = {"train": ["train", "--data", str(data), "--out", str(tmp_path / "run"), *TINY_TRAIN, "--steps", "6",
                      "--set", "data.preload_mib=0"],
            "cache": ["cache", str(data), *model, "--workers", "0", "--no-progress"],
            "gallery": ["gallery", str(data), "--out", str(tmp_path / "g")],
            "analyze": ["analyze", "datasets", str(data), *model, "--out", str(tmp_path / "a")]}[command]
    capsys.readouterr()
    assert main(args) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "unreadable image:" in err and str(shard) in err and "the dataset is damaged" in err, err
    assert "Traceback" not in err


def test_a_npy_frame_reads_as_eqben_s_loader_reads_it_without_numpy_and_crafted_ones_are_refused(tmp_path):
    """EqBen's YouCook2 frames (.npy, BGR): the same picture as ``Image.fromarray(np.load(p)[:, :, [2, 1, 0]])``,
    decoded from the header and the raw bytes; an object array (a pickle), Fortran order, a cut file, another
    shape or a header claiming a bomb are refused naming the file, and no pickle is run."""
    import numpy as np
    from PIL import Image

    from concrete_jungle.images import ImageRejected, npy_frame

    bgr = np.random.default_rng(0).integers(0, 255, (7, 5, 3), dtype=np.uint8)
    np.save(tmp_path / "frame.npy", bgr)
    official = Image.fromarray(np.load(tmp_path / "frame.npy")[:, :, [2, 1, 0]], "RGB")
    assert np.array_equal(np.asarray(npy_frame(tmp_path / "frame.npy")), np.asarray(official))
    marker = tmp_path / "ran"
    crafted = {"pickle.npy": lambda p: np.save(p, np.array([{"a": 1}], dtype=object), allow_pickle=True),
               "fortran.npy": lambda p: np.save(p, np.asfortranarray(bgr)),
               "grey.npy": lambda p: np.save(p, bgr[:, :, 0]),
               "float.npy": lambda p: np.save(p, bgr.astype(np.float32)),
               "cut.npy": lambda p: p.write_bytes((tmp_path / "frame.npy").read_bytes()[:-10]),
               "bomb.npy": lambda p: p.write_bytes(b"\x93NUMPY\x01\x00" + (lambda h: len(h).to_bytes(2, "little")
                                                   + h)(b"{'descr': '|u1', 'fortran_order': False, "
                                                        b"'shape': (100000, 100000, 3), }\n")),
               "not.npy": lambda p: p.write_bytes(b"GIF89a" + bytes(40)),
               "os.npy": lambda p: p.write_bytes(b"\x93NUMPY\x01\x00" + (lambda h: len(h).to_bytes(2, "little")
                                                 + h)(f"__import__('os').system('touch {marker}')".encode()))}
    for name, make in crafted.items():
        make(tmp_path / name)
        with pytest.raises(ImageRejected, match=f"{name}"):
            npy_frame(tmp_path / name)
    assert not marker.exists()
