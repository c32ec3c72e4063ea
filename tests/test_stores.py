"""Plant from the stores web-scale sets come in (WebDataset shards as img2dataset writes them, Parquet with the
image bytes inside, a Hugging Face save_to_disk folder): the same records as from the same images in a folder."""

import io
import json
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image

from concrete_jungle.cli import main
from concrete_jungle.concretebatch import iter_records, read_manifest
from concrete_jungle.sources import read_samples
from plant_fixtures import make_dataset, plant_args

N = 30


def jpeg(i: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(i).integers(0, 255, (24, 32, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def caption(i: int) -> str:
    return f"A {['red', 'green', 'small'][i % 3]} {['dog', 'cat', 'car', 'chair', 'tree'][i % 5]} near the {i}th house"


def add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """The same N samples as a folder (JSONL + JPEGs), as img2dataset WebDataset shards (with failed downloads in
    their metadata Parquet), as Parquet with image bytes in row groups, and as a save_to_disk dataset."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("stores")
    keys = [f"{i:09d}" for i in range(N)]
    (root / "folder" / "images").mkdir(parents=True)
    with open(root / "folder" / "captions.jsonl", "w") as f:
        for i, key in enumerate(keys):
            (root / "folder" / "images" / f"{key}.jpg").write_bytes(jpeg(i))
            f.write(json.dumps({"id": key, "caption": caption(i), "image": f"{key}.jpg"}) + "\n")
    (root / "wds").mkdir()
    for shard, part in enumerate((keys[:20], keys[20:])):
        with tarfile.open(root / "wds" / f"{shard:05d}.tar", "w") as tar:
            for key in part:
                i = int(key)
                add(tar, f"{key}.jpg", jpeg(i))
                add(tar, f"{key}.txt", caption(i).encode())
                add(tar, f"{key}.json", json.dumps({"key": key, "caption": caption(i), "status": "success"}).encode())
        failed = [f"{900000 + shard:09d}"]  # img2dataset keeps a failed download in the Parquet only
        pq.write_table(pa.table({"key": part + failed, "status": ["success"] * len(part) + ["failed_to_download"],
                                 "error_message": [None] * len(part) + ["HTTP 404"]}),
                       root / "wds" / f"{shard:05d}.parquet")
    (root / "parquet").mkdir()
    table = pa.table({"key": keys, "caption": [caption(i) for i in range(N)],
                      "image": [{"bytes": jpeg(i), "path": f"{k}.jpg"} for i, k in enumerate(keys)]})
    pq.write_table(table, root / "parquet" / "train.parquet", row_group_size=7)
    ds = datasets.Dataset.from_dict({"id": keys, "text": [caption(i) for i in range(N)],
                                     "image": [{"bytes": jpeg(i), "path": None} for i in range(N)]},
                                    features=datasets.Features({"id": datasets.Value("string"),
                                                                "text": datasets.Value("string"),
                                                                "image": datasets.Image()}))
    ds.save_to_disk(str(root / "hf"))
    return root


def records(out):
    """Every record as the bytes and text that define it (the source locator aside)."""
    out_records = []
    for r in iter_records(out):
        meta = {k: v for k, v in r["meta"].items() if k != "source"}
        out_records.append((r["caption"], r["neg_caption"], r["image"].tobytes(), r["neg_image"].tobytes(),
                            json.dumps(meta, sort_keys=True)))
    return out_records


def plant(captions, out, *extra):
    return main(["plant", "--captions", *map(str, captions), "--out", str(out), "--mode", "hc", "--no-progress",
                 "--samples-per-shard", "8", "--batch-size", "5", *map(str, extra)])


@pytest.mark.parametrize("store", ["wds", "wds_braces", "parquet", "hf"])
def test_plant_from_a_store_gives_the_records_of_the_same_images_in_a_folder(stores, tmp_path, store):
    reference = tmp_path / "reference"
    assert plant([stores / "folder" / "captions.jsonl"], reference, "--images", stores / "folder" / "images") == 0
    inputs = {"wds": [stores / "wds"], "wds_braces": [stores / "wds" / "{00000..00001}.tar"],
              "parquet": [stores / "parquet" / "train.parquet"], "hf": [stores / "hf"]}[store]
    out = tmp_path / "out"
    assert plant(inputs, out) == 0  # no --images: the images are inside the store
    assert records(out) == records(reference)
    manifest = {r["id"]: r for r in read_manifest(out)}
    if store.startswith("wds"):  # img2dataset's failed downloads: skips with its reason
        assert manifest["000900000"]["status"] == "rejected"
        assert "img2dataset could not download it (HTTP 404)" in manifest["000900000"]["reason"]
    assert sum(r["status"] == "ok" for r in manifest.values()) == N


def test_the_anchor_s_jpeg_bytes_go_into_the_concretebatch_unchanged(stores, tmp_path):
    out = tmp_path / "out"
    assert plant([stores / "parquet" / "train.parquet"], out) == 0
    with tarfile.open(sorted(out.glob("shard-*.tar"))[0]) as tar:
        anchors = {m.name.split(".")[0]: tar.extractfile(m).read() for m in tar if m.name.endswith(".jpg")
                   and not m.name.endswith(".neg.jpg")}
    by_id = {json.loads(line)["id"]: json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()}
    for key, data in anchors.items():
        sample = next(i for i in by_id if key.startswith(i))
        assert data == jpeg(int(sample))


def test_a_damaged_shard_and_keys_repeated_across_shards(stores, tmp_path):
    import shutil

    wds = tmp_path / "wds"
    shutil.copytree(stores / "wds", wds)
    shutil.copy(wds / "00000.tar", wds / "00002.tar")  # the same keys again in another shard
    data = (wds / "00001.tar").read_bytes()
    (wds / "00001.tar").write_bytes(data[: len(data) // 2 + 100])  # cut in the middle of a member
    samples = list(read_samples([wds]))
    ids = [s.id for s in samples if s.error is None]
    assert "00002/000000000" in ids and "000000000" in ids  # a repeated key gets its shard's name
    damaged = [s for s in samples if s.id == "00001.tar#damaged"]
    assert damaged and "the shard 00001.tar is damaged: it ends inside '000000026.jpg'" in damaged[0].error
    out = tmp_path / "out"
    assert plant([wds], out) == 0  # the run goes on: what the damaged shard held before the damage is planted
    manifest = read_manifest(out)
    assert any(r["id"] == "00001.tar#damaged" and r["status"] != "ok" for r in manifest)
    assert sum(r["status"] == "ok" for r in manifest) >= 40


def test_columns_name_a_store_s_fields_and_a_wrong_name_is_one_line(stores, tmp_path, capsys):
    samples = list(read_samples([stores / "parquet" / "train.parquet"], columns={"caption": "caption", "id": "key"}))
    assert [s.id for s in samples] == [f"{i:09d}" for i in range(N)]
    assert samples[0].image == "train.parquet::0" and samples[8].image == "train.parquet::8"
    assert main(["keywords", "--captions", str(stores / "parquet" / "train.parquet"), "--columns", "caption=nope",
                 "--mode", "hc", "--out", str(tmp_path / "kw.jsonl")]) == 2
    assert "has no column 'nope' (--columns caption=...)" in " ".join(capsys.readouterr().err.split())
    wds = list(read_samples([stores / "wds" / "00000.tar"], columns={"caption": "caption"}))  # from KEY.json
    assert wds[0].captions == [caption(0)]


@pytest.mark.parametrize("store", ["wds", "parquet", "hf"])
def test_training_pairs_from_a_store_train_as_the_same_pairs_from_a_folder(stores, tmp_path, store):
    def train(out, *pairs):
        return main(["train", "--out", str(out), "--steps", "3", "--batch-size", "8", "--set", "model.name=cj-tiny",
                     "--set", "model.pretrained=none", "--set", "data.workers=0", "--no-progress", *pairs])

    folder = ["--set", f"data.pairs=['{stores / 'folder' / 'captions.jsonl'}']", "--set",
              f"data.pairs_images={stores / 'folder' / 'images'}"]
    inputs = {"wds": stores / "wds", "parquet": stores / "parquet" / "train.parquet", "hf": stores / "hf"}
    assert train(tmp_path / "a", *folder) == 0
    assert train(tmp_path / "b", "--set", f"data.pairs=['{inputs[store]}']") == 0  # no pairs_images: in the store
    losses = [[json.loads(line)["loss"] for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
              for run in "ab"]
    assert losses[0] == losses[1]


def test_a_store_of_pairs_cached_for_the_model_trains_as_decoding_it_and_goes_stale(stores, tmp_path):
    """`concrete-jungle cache` on a folder of WebDataset shards: `train` then gathers its pairs from the cache
    (bitwise the batches decoding gives, a picture that fails to decode replaced as `PairsDataset` replaces it) and
    trains the same losses; a changed store makes the cache stale."""
    import shutil

    from concrete_jungle.models import load_model
    from concrete_jungle.train.config import DataConfig
    from concrete_jungle.train.data import EpochBatches, epoch_batches, training_set
    from concrete_jungle.train.image_cache import CachedSet, current_cache

    wds = tmp_path / "wds"
    shutil.copytree(stores / "wds", wds)
    with tarfile.open(wds / "00002.tar", "w") as tar:  # a picture whose header reads and whose pixels do not
        add(tar, "000000777.jpg", jpeg(7)[:200])
        add(tar, "000000777.txt", b"a broken picture")
    clip = load_model("cj-tiny", "none")
    data = DataConfig(pairs=[str(wds)], workers=0, preload_mib=0)
    decoded = training_set(data, clip, progress=False)
    assert main(["cache", str(wds), "--model", "cj-tiny", "--pretrained", "none", "--workers", "0",
                 "--no-progress"]) == 0
    cached = training_set(data, clip, progress=False)
    assert isinstance(cached, CachedSet) and len(cached) == len(decoded) == N + 1
    skipped = (current_cache(wds, clip) / "skipped_pairs.jsonl").read_text()
    assert "000000777.jpg" in skipped
    meta = json.loads((current_cache(wds, clip) / "cache.json").read_text())
    assert meta["images"][:2] == [N + 1, 1]  # each picture stored once: a pair has no negative picture
    assert (current_cache(wds, clip) / "images.u8").stat().st_size == (N + 1) * 3 * 64 * 64  # cj-tiny's input
    batches = EpochBatches(len(decoded), 8, 0, 1, seed=0, epoch=0)
    for a, b in zip(epoch_batches(decoded, batches, 0, False), epoch_batches(cached, batches, 0, False)):
        assert torch.equal(cached.normalize(b[0]), a[0]) and torch.equal(cached.normalize(b[1]), a[1])
        assert all(torch.equal(x, y) for x, y in zip(a[2:], b[2:])) and not b[5].any()

    def losses(out):
        assert main(["train", "--out", str(out), "--steps", "3", "--batch-size", "8", "--set", "model.name=cj-tiny",
                     "--set", "model.pretrained=none", "--set", "data.workers=0", "--set", "data.preload_mib=0",
                     "--no-progress", "--set", f"data.pairs=['{wds}']"]) == 0
        return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]

    with_cache = losses(tmp_path / "cached")
    (wds / "00001.tar").write_bytes((wds / "00001.tar").read_bytes() + b"\0" * 1024)  # the store changed
    assert current_cache(wds, clip) is None
    assert losses(tmp_path / "decoded") == with_cache


@pytest.mark.parametrize("to", ["parquet", "hf"])
def test_export_round_trips_through_datasets(planted, tmp_path, to):
    import datasets

    out = tmp_path / "export"
    assert main(["export", str(planted), "--to", to, str(out), "--no-progress"]) == 0
    if to == "hf":
        assert (out / "README.md").is_file()
        loaded = datasets.load_dataset(str(out), split="train")
    else:
        loaded = datasets.load_dataset("parquet", data_files=sorted(map(str, out.glob("*.parquet"))), split="train")
    expected = list(iter_records(planted))
    assert len(loaded) == len(expected)
    for row, record in zip(loaded, expected):
        assert isinstance(row["image"], Image.Image)  # read back as images, by the feature description
        assert row["image"].tobytes() == record["image"].tobytes()
        assert row["neg_image"].tobytes() == record["neg_image"].tobytes()
        assert (row["caption"], row["neg_caption"], row["concreteness"]) == (
            record["caption"], record["neg_caption"], record["concreteness"])
        assert json.loads(row["meta"]) == record["meta"]
    if to == "hf":  # another ConcreteBatch exported under the same folder name loads as itself, not from the cache
        captions, images = make_dataset(tmp_path / "other", 8, image_size=32)
        assert main(plant_args(captions, images, tmp_path / "other" / "cb")) == 0
        again = tmp_path / "again" / "export"
        assert main(["export", str(tmp_path / "other" / "cb"), "--to", "hf", str(again), "--no-progress"]) == 0
        assert len(datasets.load_dataset(str(again), split="train")) == 8 < len(loaded)
    # a second export into the same folder keeps the finished files (a stopped export resumes)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.parquet")}
    assert main(["export", str(planted), "--to", to, str(out), "--no-progress"]) == 0
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.parquet")} == before


def test_hostile_images_inside_a_store_are_rejects_with_their_reason(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from test_images import hostile_images

    expected = hostile_images(tmp_path / "files")
    names = [n for n in expected if n not in ("fifo.jpg", "zero.jpg")]  # a store holds bytes, not special files
    pq.write_table(pa.table({"key": names, "caption": ["a red dog sitting on the wooden table"] * len(names),
                             "image": [{"bytes": (tmp_path / "files" / n).read_bytes(), "path": n} for n in names]}),
                   tmp_path / "hostile.parquet")
    out = tmp_path / "out"
    assert plant([tmp_path / "hostile.parquet"], out) == 0
    rows = {r["id"]: r for r in read_manifest(out)}
    for name in names:
        if expected[name] == "kept":
            assert rows[name]["status"] == "ok", rows[name]
        else:
            assert rows[name]["status"] == "rejected" and expected[name] in rows[name]["reason"], rows[name]


def test_an_image_column_named_by_the_user_is_the_one_read(stores, tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = [f"{i:09d}" for i in range(N)]  # the default columns hold nothing usable: only the named ones count
    pq.write_table(pa.table({"uid": keys, "text": [caption(i) for i in range(N)],
                             "picture": [{"bytes": jpeg(i), "path": None} for i in range(N)],
                             "image": [{"bytes": b"not an image", "path": None}] * N}),
                   tmp_path / "named.parquet", row_group_size=7)
    columns = "caption=text,image=picture,id=uid"
    samples = list(read_samples([tmp_path / "named.parquet"], columns=dict(c.split("=") for c in columns.split(","))))
    assert samples[3].image == "named.parquet::3::picture"
    reference = tmp_path / "reference"
    assert plant([stores / "folder" / "captions.jsonl"], reference, "--images", stores / "folder" / "images") == 0
    out = tmp_path / "out"
    assert plant([tmp_path / "named.parquet"], out, "--columns", columns) == 0
    assert records(out) == records(reference)
    assert main(["keywords", "--captions", str(tmp_path / "named.parquet"), "--columns", "caption=text,image=nope",
                 "--mode", "hc", "--out", str(tmp_path / "kw.jsonl")]) == 2
    assert "has no column 'nope' (--columns image=...)" in " ".join(capsys.readouterr().err.split())


def img2dataset_shard(path, keys, captions=None, failed=(), shift=0):
    """A shard as img2dataset writes it (`webdataset.TarWriter`: a pax header before each member), with its metadata
    Parquet and ``<stem>_stats.json`` beside it listing ``keys`` as downloaded, except those in ``failed``. Key ``k``
    holds picture and caption number ``k + shift``."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import webdataset

    with webdataset.TarWriter(str(path)) as sink:
        for k, key in enumerate(keys):
            text = captions[k] if captions else caption(int(key) + shift)
            sink.write({"__key__": key, "jpg": jpeg(int(key) + shift), "txt": text,
                        "json": json.dumps({"key": key, "status": "success"}).encode()})
    listed = list(keys) + [key for key in failed if key not in keys]
    status = ["failed_to_download" if key in failed else "success" for key in listed]
    pq.write_table(pa.table({"key": listed, "status": status,
                             "error_message": [None if s == "success" else "HTTP 404" for s in status]}),
                   path.with_suffix(".parquet"))
    path.with_name(f"{path.stem}_stats.json").write_text(json.dumps(
        {"count": len(listed), "successes": status.count("success"), "failed_to_download": len(failed)}))
    return path


def hf_dataset(n: int, image: str = "image"):
    """A Hugging Face dataset of ``n`` captions and pictures, its pictures in the column ``image``."""
    import datasets

    return datasets.Dataset.from_dict({"text": [caption(i) for i in range(n)],
                                       image: [{"bytes": jpeg(i), "path": None} for i in range(n)]},
                                      features=datasets.Features({"text": datasets.Value("string"),
                                                                  image: datasets.Image()}))


def plain_tar(path, keys, mode="w", first=()):
    """A tar with ustar headers: the members ``first`` ((name, bytes) pairs), then ``KEY.jpg``, ``KEY.txt`` per key."""
    with tarfile.open(path, mode, format=tarfile.USTAR_FORMAT) as tar:
        for name, data in [*first, *((f"{k}.{e}", jpeg(int(k)) if e == "jpg" else caption(int(k)).encode())
                                     for k in keys for e in ("jpg", "txt"))]:
            add(tar, name, data)
    return path


def header_offsets(path) -> dict[str, int]:
    """Member name -> where its headers begin (its pax header, when it has one)."""
    with tarfile.open(path) as tar:
        return {m.name: m.offset for m in tar}


def exact_or_named(samples, shard, keys, root):
    """Every ok sample is the shard's exact caption and image bytes; every key is there, ok or rejected; and the
    rejects and damage reports name the shard. The ok keys are returned."""
    from concrete_jungle.sources.stores import read_located

    ok = {s.id: s for s in samples if s.error is None}
    for key, s in ok.items():
        assert s.captions == [caption(int(key))] and read_located(root, s.image) == jpeg(int(key))
    errors = [s for s in samples if s.error]
    assert all(shard.name in s.error or shard.name in s.id for s in errors), [s.error for s in errors]
    assert set(keys) <= set(ok) | {s.id for s in errors}
    return set(ok), errors


TEN = [f"{i:09d}" for i in range(10)]


@pytest.mark.parametrize("damage", ["cut_where_a_sample_begins", "flipped_header_byte", "plain_tar_cut_at_a_member",
                                    "empty_file"])
def test_a_shard_that_ends_early_is_never_read_as_complete(tmp_path, damage):
    """img2dataset's shard cut where its sixth sample begins read as five samples and no reject (tarfile ends the
    archive at the first header it cannot read); so did a flipped header byte, a plain tar cut between two members
    and a 0-byte .tar."""
    shard = img2dataset_shard(tmp_path / "00000.tar", TEN)
    offsets = header_offsets(shard)
    data = bytearray(shard.read_bytes())
    if damage == "cut_where_a_sample_begins":
        data = data[: offsets[f"{TEN[5]}.jpg"]]
    elif damage == "flipped_header_byte":
        data[offsets[f"{TEN[5]}.jpg"] + 1024 + 10] ^= 0x20  # a byte of the member's own header, past its pax header
    elif damage == "plain_tar_cut_at_a_member":
        data = plain_tar(shard, TEN).read_bytes()[: header_offsets(shard)[f"{TEN[5]}.jpg"]]
    else:
        data = b""
    shard.write_bytes(bytes(data))
    samples = list(read_samples([shard]))
    ok, errors = exact_or_named(samples, shard, [] if damage == "empty_file" else TEN, tmp_path)
    assert len(ok) <= 5
    assert any(s.id == "00000.tar#damaged" and "the shard 00000.tar is damaged" in s.error for s in samples), \
        [(s.id, s.error) for s in errors]


def test_a_shard_cut_inside_a_caption_rejects_that_sample_naming_the_member(tmp_path):
    shard = img2dataset_shard(tmp_path / "00000.tar", TEN)
    offsets = header_offsets(shard)
    cut = offsets[f"{TEN[9]}.txt"] + 1536 + 12  # the last caption, "A small tree near the 9th house", 12 bytes in
    shard.write_bytes(shard.read_bytes()[:cut])
    samples = list(read_samples([shard]))
    ok, errors = exact_or_named(samples, shard, TEN, tmp_path)
    assert ok == set(TEN[:9])
    last = next(s for s in samples if s.id == TEN[9])
    assert f"00000.tar is cut inside its member '{TEN[9]}.txt'" in last.error


def test_a_caption_that_is_not_utf8_is_a_reject_naming_the_file_and_byte_offset(tmp_path):
    """Latin-1 and cp1252 captions became U+FFFD in a WebDataset .txt, in JSONL and in CSV."""
    latin = "A café by the old bridge".encode("latin-1")
    img2dataset_shard(tmp_path / "00000.tar", ["000000001", "000000002"], [caption(1).encode(), latin])
    (tmp_path / "c.jsonl").write_bytes(b'{"id": "a", "caption": "fine"}\n{"id": "b", "caption": "' + latin + b'"}\n')
    (tmp_path / "c.csv").write_bytes(b"id,caption\nx,fine\ny," + "a \u201cquoted\u201d dog".encode("cp1252") + b"\n")
    samples = {s.id: s for s in read_samples([tmp_path / "00000.tar", tmp_path / "c.jsonl", tmp_path / "c.csv"])}
    assert samples["000000001"].error is None and samples["a"].error is None and samples["x"].error is None
    bad = [s for s in samples.values() if s.error]
    assert sorted(s.id for s in bad) == ["000000002", "c.csv:3", "c.jsonl:2"]
    assert "000000002.txt in 00000.tar is not UTF-8" in samples["000000002"].error
    for sid, byte in (("c.jsonl:2", b"\xe9"), ("c.csv:3", b"\x93")):
        name, line = sid.split(":")
        offset = (tmp_path / name).read_bytes().index(byte)
        assert f"{name} is not UTF-8 text on line {line} (byte 0x{byte.hex()} at byte {offset} " in samples[sid].error


@pytest.mark.parametrize("how", ["appended", "concatenated"])
def test_a_member_twice_in_one_shard_is_a_reject_naming_both_copies(tmp_path, how):
    """An appended tar's second copy of a member won and the first was lost; a concatenated tar lost its second
    archive."""
    shard = plain_tar(tmp_path / "00000.tar", TEN[:3])
    again = [(f"{TEN[1]}.txt", b"another caption for the same picture")]
    if how == "appended":
        plain_tar(shard, [], "a", again)
    else:
        shard.write_bytes(shard.read_bytes() + plain_tar(tmp_path / "more.tar", [TEN[3]], first=again).read_bytes())
    samples = {s.id: s for s in read_samples([shard])}
    expected_ok = {TEN[0], TEN[2]} | ({TEN[3]} if how == "concatenated" else set())
    assert {i for i, s in samples.items() if s.error is None} == expected_ok
    assert samples[TEN[0]].captions == [caption(0)]
    with tarfile.open(shard, ignore_zeros=True) as tar:
        first, second = [m.offset for m in tar if m.name == f"{TEN[1]}.txt"]
    assert f"00000.tar holds its member '{TEN[1]}.txt' 2 times (headers at bytes {first} and {second})" in \
        samples[TEN[1]].error


def test_parquet_rows_without_image_bytes_share_one_reject_reason(tmp_path):
    """Each such row was a reject bucket of its own (its row number led the reason)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from concrete_jungle.plant.stages import load_image, reason_kind

    pq.write_table(pa.table({"caption": [caption(i) for i in range(3)], "image": [jpeg(0), None, None]}),
                   tmp_path / "train.parquet")
    samples = list(read_samples([tmp_path / "train.parquet"]))
    reasons = [load_image(tmp_path, s.image)[2] for s in samples]
    assert reasons[0] is None
    assert reasons[1] == f"no image bytes in column 'image' (row 1 of {tmp_path / 'train.parquet'})"
    assert reason_kind(reasons[1]) == reason_kind(reasons[2]) == "no image bytes in column"


@pytest.mark.parametrize("ext", ["TXT", "JPG"])
def test_members_whose_names_differ_only_in_case_are_a_reject_naming_both(tmp_path, ext):
    """``k.txt`` beside ``k.TXT`` (or ``.jpg`` beside ``.JPG``) kept whichever came last, the other lost."""
    other = jpeg(7) if ext == "JPG" else b"another caption for the same picture"
    shard = plain_tar(tmp_path / "00000.tar", TEN[:3], first=[(f"{TEN[1]}.{ext}", other)])
    samples = {s.id: s for s in read_samples([shard])}
    assert {i for i, s in samples.items() if s.error is None} == {TEN[0], TEN[2]}
    assert samples[TEN[1]].error == (f"00000.tar holds '{TEN[1]}.{ext}' and '{TEN[1]}.{ext.lower()}', whose names "
                                     "differ only in case: which is this sample's is not known; rename one")


def test_a_key_the_shard_holds_and_its_metadata_marks_failed_is_one_reject_naming_both(tmp_path):
    shard = img2dataset_shard(tmp_path / "00000.tar", TEN[:3], failed=[TEN[1]])
    samples = list(read_samples([shard]))
    assert sorted(s.id for s in samples) == TEN[:3]  # one sample per key
    conflict = next(s for s in samples if s.id == TEN[1])
    assert "00000.tar holds it" in conflict.error and "00000.parquet" in conflict.error
    assert [s.error for s in samples if s.id != TEN[1]] == [None, None]


def test_same_named_shards_in_two_folders_keep_their_own_images(tmp_path):
    """Same-named shards in two folders (two img2dataset runs: the same keys) needed --images; given one folder, the
    other folder's captions were paired with this folder's pictures."""
    img2dataset_shard((tmp_path / "a").mkdir() or tmp_path / "a" / "00000.tar", TEN[:4])
    img2dataset_shard((tmp_path / "b").mkdir() or tmp_path / "b" / "00000.tar", TEN[:4], shift=10)
    out = tmp_path / "out"
    assert plant([tmp_path / "a", tmp_path / "b"], out) == 0
    rows = [r for r in read_manifest(out) if r["status"] == "ok"]
    assert len(rows) == 8
    by_caption = {caption(i): jpeg(i) for i in [*range(4), *range(10, 14)]}
    for r in iter_records(out):
        assert r["image"].tobytes() == Image.open(io.BytesIO(by_caption[r["caption"]])).tobytes()
    assert plant([tmp_path / "a", tmp_path / "b"], tmp_path / "wrong", "--images", tmp_path / "a") == 2


def test_a_folder_and_a_shard_in_it_read_each_shard_once(stores):
    once = [s.id for s in read_samples([stores / "wds"])]
    assert [s.id for s in read_samples([stores / "wds", stores / "wds" / "00000.tar"])] == once
    assert [s.id for s in read_samples([stores / "wds" / "00001.tar", stores / "wds"])] == \
        [s.id for s in read_samples([stores / "wds" / "00001.tar", stores / "wds" / "00000.tar"])]


def test_a_damaged_image_column_chunk_is_one_reject_per_row_and_the_run_goes_on(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "train.parquet"
    pq.write_table(pa.table({"key": TEN, "caption": [caption(i) for i in range(10)],
                             "image": [{"bytes": jpeg(i), "path": None} for i in range(10)]}), path, row_group_size=5)
    chunk = pq.ParquetFile(path).metadata.row_group(1).column(2)  # the image column of rows 5-9
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset: chunk.data_page_offset + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    out = tmp_path / "out"
    assert plant([path], out) == 0
    rows = {r["id"]: r for r in read_manifest(out)}
    assert [rows[k]["status"] for k in TEN] == ["ok"] * 5 + ["rejected"] * 5
    assert all("train.parquet: row group 1 of column 'image' cannot be read" in rows[k]["reason"] for k in TEN[5:])


@pytest.mark.parametrize("store", ["parquet_image_column_renamed", "hf_image_column_renamed", "dataset_dict",
                                   "truncated_arrow"])
def test_a_store_that_cannot_be_read_as_given_is_an_error_naming_it_and_the_fix(tmp_path, capsys, store):
    """An image column under another name gave every row "no image file named" and exit 0; a DatasetDict folder
    was told "needs --images"; a truncated .arrow file was a traceback."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "store"
    if store == "parquet_image_column_renamed":
        path = tmp_path / "p.parquet"
        pq.write_table(pa.table({"key": TEN[:3], "caption": [caption(i) for i in range(3)],
                                 "picture": [{"bytes": jpeg(i), "path": None} for i in range(3)]}), path)
        expected = [f"{path} has no image column named image, jpg or img", "--columns image=picture"]
    elif store == "hf_image_column_renamed":
        hf_dataset(1, image="photo").save_to_disk(path)
        expected = [f"{path} has no image column named image, jpg or img", "--columns image=photo"]
    elif store == "dataset_dict":
        datasets.DatasetDict({"train": hf_dataset(1), "test": hf_dataset(1)}).save_to_disk(path)
        expected = [f"{path} holds a DatasetDict (splits train, test)", f"pass one split's folder: {path}/train"]
    else:
        hf_dataset(4).save_to_disk(path)
        arrow = next(path.glob("*.arrow"))
        arrow.write_bytes(arrow.read_bytes()[: arrow.stat().st_size // 2])
        expected = [f"{path}: its file {arrow.name} is truncated or damaged", "save_to_disk"]
    assert plant([path], tmp_path / "out") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert all(part in err for part in expected), err
