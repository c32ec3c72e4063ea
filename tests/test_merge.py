"""Split plant runs (plant/merge.py): `plant merge` refuses foreign, damaged, unfinished and mismatched parts, and
the commands that read a dataset refuse an unmerged one unless told it is partial."""

import sys
from pathlib import Path

import pytest

from concrete_jungle.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from conftest import TINY_TRAIN  # noqa: E402
from plant_fixtures import make_dataset, plant_args  # noqa: E402


@pytest.fixture
def two_parts(tmp_path):
    captions, images = make_dataset(tmp_path, 40, image_size=16)
    out = tmp_path / "cb"
    for i in (0, 1):
        assert main(plant_args(captions, images, out, "--num-shards", 2, "--shard-index", i,
                               "--samples-per-shard", 10)) == 0
    return captions, images, out


def test_merge_refuses_foreign_damaged_unfinished_and_mismatched_parts(two_parts, tmp_path, capsys):
    import shutil

    captions, images, out = two_parts
    part0, part1 = out / "manifest-00000-of-00002.jsonl", out / "manifest-00001-of-00002.jsonl"
    saved = part1.read_text()

    def refused(message):
        assert main(["plant", "merge", str(out)]) == 2
        assert message in " ".join(capsys.readouterr().err.split())
        assert not (out / "manifest.jsonl").exists()

    shutil.copy(part0, out / "manifest-00002-of-00002.jsonl")
    refused("holds part(s) [2] of a run of 2 parts")
    (out / "manifest-00002-of-00002.jsonl").unlink()
    part1.write_text(part0.read_text())
    refused("manifest-00001-of-00002.jsonl holds ids that belong to other parts")
    part1.write_text(saved[: len(saved) // 2])  # cut inside a row
    refused("manifest-00001-of-00002.jsonl is damaged")
    part1.write_text(saved)
    (out / "summary-00001-of-00002.json").rename(tmp_path / "summary")
    refused("parts [1] of 2 have not finished")
    (tmp_path / "summary").rename(out / "summary-00001-of-00002.json")
    other = tmp_path / "lc"  # part 1 made with another mode elsewhere, copied in
    assert main(plant_args(captions, images, other, "--num-shards", 2, "--shard-index", 1, "--samples-per-shard", 10,
                           "--mode", "lc")) == 0
    for f in other.glob("*-00001-of-00002*"):
        shutil.copy(f, out / f.name)
    refused("the parts were made with different settings (sampler differs")


def test_train_cache_analyze_and_gallery_refuse_an_unmerged_dataset_unless_partial(two_parts, tmp_path, capsys):
    _, _, out = two_parts
    train = ["train", "--data", str(out), "--out", str(tmp_path / "run"), "--steps", "1", *TINY_TRAIN]
    for command in (train, ["cache", str(out), "--model", "cj-tiny", "--pretrained", "none", "--workers", "0"],
                    ["analyze", "datasets", str(out), "--model", "cj-tiny", "--pretrained", "none",
                     "--out", str(tmp_path / "a")],
                    ["gallery", str(out), "--out", str(tmp_path / "g")]):
        assert main(command) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"{out} is a split run whose parts are not merged" in err and "plant merge" in err, command[0]
        assert "--partial" in err, command[0]  # advice each of these commands takes
    assert main(train + ["--set", "data.partial=true"]) == 0
    assert main(["analyze", "datasets", str(out), "--model", "cj-tiny", "--pretrained", "none", "--partial",
                 "--out", str(tmp_path / "a")]) == 0
    assert main(["gallery", str(out), "--partial", "--out", str(tmp_path / "g")]) == 0
    assert main(["plant", "merge", str(out)]) == 0
    assert main(train[:4] + [str(tmp_path / "run2")] + train[5:]) == 0  # merged: a dataset like any other
