"""The training image cache (train/image_cache.py): a key that covers the tokenizer, and a torn or overwritten
cache found, named and rebuilt to the same bytes."""

import sys
from pathlib import Path

import pytest

from concrete_jungle.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from conftest import TINY_TRAIN  # noqa: E402


def test_the_image_cache_key_covers_the_tokenizer_s_options():
    from open_clip.tokenizer import SimpleTokenizer

    from concrete_jungle.models import ClipModel, load_model
    from concrete_jungle.train.image_cache import cache_key

    clip = load_model("cj-tiny", "none")
    other = SimpleTokenizer(context_length=77, clean="whitespace")  # same class and context: "A" -> 288, not 320
    assert other(["A"])[0, 1] != clip.tokenizer(["A"])[0, 1]
    assert cache_key(ClipModel(clip.model, clip.preprocess, other, clip.config)) != cache_key(clip)
    assert cache_key(load_model("cj-tiny", "none", seed=1)) == cache_key(clip)  # weights do not change the bytes


@pytest.mark.parametrize("damage, message", [
    ("truncate images.u8", "images.u8 has {size} bytes where its build wrote {full} (truncated or overwritten)"),
    ("zero tokens.i32", "the content of {path} is not what its build wrote"),
    ("remove values.f32", "{path} is missing"),
])
def test_a_torn_or_overwritten_image_cache_is_an_error_naming_the_file_and_cache_rebuilds_it(
        planted, tmp_path, capsys, damage, message):
    import shutil

    data = tmp_path / "cb"
    shutil.copytree(planted, data, ignore=shutil.ignore_patterns("cache", ".*.lock"))
    cache = ["cache", str(data), "--model", "cj-tiny", "--pretrained", "none", "--workers", "0", "--no-progress"]
    assert main(cache) == 0
    folder = next((data / "cache").iterdir())
    originals = {name: (folder / name).read_bytes() for name in ("images.u8", "tokens.i32", "values.f32")}
    action, name = damage.split()
    path = folder / name
    if action == "truncate":
        with open(path, "r+b") as f:
            f.truncate(len(originals[name]) // 2)
    elif action == "zero":  # same size, every token id 0: only the digest can tell
        path.write_bytes(bytes(len(originals[name])))
    else:
        path.unlink()
    train = ["train", "--data", str(data), "--out", str(tmp_path / "run"), *TINY_TRAIN, "--steps", "2"]
    capsys.readouterr()
    assert main(train) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert message.format(size=len(originals[name]) // 2, full=len(originals[name]), path=path) in err
    assert f"rebuild it with `concrete-jungle cache {data}`" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no step read the damaged cache
    assert main(cache) == 0  # rebuilt, with a note, to the same bytes
    assert "note: rebuilding a damaged cache" in capsys.readouterr().err
    assert {n: (folder / n).read_bytes() for n in originals} == originals
    assert main(train) == 0


def test_cache_starts_no_more_workers_than_the_cpus_and_says_so_once(planted, tmp_path, capsys):
    import shutil
    import warnings

    from concrete_jungle.train.workers import usable_cpus

    data = tmp_path / "cb"
    shutil.copytree(planted, data, ignore=shutil.ignore_patterns("cache", ".*.lock"))
    asked = usable_cpus() + 6
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["cache", str(data), "--model", "cj-tiny", "--pretrained", "none", "--workers", str(asked),
                     "--no-progress"]) == 0
    assert not [w for w in caught if "worker" in str(w.message)]  # torch's "suggested max number of worker"
    notes = [line for line in capsys.readouterr().err.splitlines() if "--workers" in line]
    assert notes == [f"note: --workers {asked} is more than the {usable_cpus()} CPU(s) this process may use: "
                     f"{usable_cpus()} worker process(es)"]


def test_a_cache_of_format_3_without_positives_is_still_read_as_one_positive_per_picture(planted, tmp_path):
    """Format 4 added the other positives' tokens (positives.i32); a format-3 cache, which lacks them, serves the
    same batch as before: its records have one positive each."""
    import json
    import shutil

    import torch

    from concrete_jungle.models import load_model
    from concrete_jungle.train.image_cache import CachedSet, build_cache, cache_is_current, source_digest

    data = tmp_path / "cb"
    shutil.copytree(planted, data, ignore=shutil.ignore_patterns("cache", ".*.lock"))
    folder = build_cache(data, load_model("cj-tiny", "none"), progress=False)
    current = CachedSet([folder]).batch([0, 1, 2])
    meta = json.loads((folder / "cache.json").read_text())
    assert meta["format"] == 4 and meta["positives"] == 1
    (folder / "positives.i32").unlink()
    del meta["files"]["positives.i32"], meta["positives"]
    (folder / "cache.json").write_text(json.dumps(meta | {"format": 3}))
    assert cache_is_current(folder, source_digest(data))
    old = CachedSet([folder])
    assert old.p == 1 and all(torch.equal(a, b) for a, b in zip(old.batch([0, 1, 2]), current, strict=True))
