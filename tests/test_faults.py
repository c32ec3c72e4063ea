"""Injected faults: a full disk, a damaged dataset, kill -9 at random moments. Nothing is lost or duplicated,
nothing damaged is read, and the same command afterwards gives what an uninterrupted run gives."""

import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from concrete_jungle.cli import main
from plant_fixtures import dataset_fingerprint, make_dataset, plant_args


def cli(args, limit_bytes=None, timeout=300):
    """`concrete-jungle ARGS` in a real process; ``limit_bytes`` caps every file it writes (RLIMIT_FSIZE): a
    write past it fails as on a full disk (Python ignores SIGXFSZ, so the write raises EFBIG)."""
    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, "-m", "concrete_jungle.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, preexec_fn=cap if limit_bytes else None)


@pytest.mark.processes
def test_a_full_disk_stops_plant_with_the_file_named_and_the_rerun_finishes_identically(tmp_path):
    captions, images = make_dataset(tmp_path, 300, image_size=48)
    extra = ["--samples-per-shard", 100, "--batch-size", 20]
    reference = tmp_path / "reference"
    assert main(plant_args(captions, images, reference, *extra)) == 0
    out = tmp_path / "out"
    args = plant_args(captions, images, out, *extra)
    largest_shard = max(p.stat().st_size for p in reference.glob("shard-*.tar"))
    keywords_file = (reference / "keywords-00000-of-00001.jsonl").stat().st_size
    # first the keywords file, then a shard hits the limit half-way through
    for limit, where in ((keywords_file // 3, "keywords-00000-of-00001.jsonl"),
                         ((keywords_file + largest_shard) // 2, ".shard-")):
        assert keywords_file < largest_shard
        failed = cli(args, limit_bytes=limit)
        assert failed.returncode == 2, failed.stderr[-2000:]
        message = " ".join(failed.stderr.split())
        assert "could not write" in message and where in message and "File too large" in message, message
        assert not (out / "manifest.jsonl").exists()
    assert main(args) == 0  # the limit lifted: the same command
    assert dataset_fingerprint(out) == dataset_fingerprint(reference)


@pytest.fixture
def planted(tmp_path):
    captions, images = make_dataset(tmp_path, 60, image_size=24)
    args = plant_args(captions, images, tmp_path / "cb", "--samples-per-shard", 20)
    assert main(args) == 0
    return tmp_path / "cb", args


@pytest.mark.processes
@pytest.mark.parametrize("damage", ["truncate", "flip a byte", "delete"])
def test_a_damaged_shard_is_refused_by_train_and_gallery_and_redone_by_plant(planted, damage, capsys, tmp_path):
    out, args = planted
    reference = dataset_fingerprint(out)
    shard = out / "shard-000001.tar"
    if damage == "truncate":
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    elif damage == "flip a byte":
        data = bytearray(shard.read_bytes())
        data[len(data) // 3] ^= 0x01  # inside an image: the tar still parses
        shard.write_bytes(bytes(data))
    else:
        shard.unlink()  # the manifest still names it
    capsys.readouterr()
    train = ["train", "--set", "model.name=cj-tiny", "--set", "model.pretrained=none", "--set", "data.workers=0",
             "--data", str(out), "--out", str(tmp_path / "run"), "--batch-size", "8", "--steps", "2", "--no-progress"]
    for command in (train, ["gallery", str(out), "--out", str(tmp_path / "g")]):
        assert main(command) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "shard-000001.tar" in err and ("damaged" in err or "missing" in err), err
    assert not (tmp_path / "run" / "checkpoints").exists() and not (tmp_path / "g" / "index.html").exists()
    assert main(args) == 0  # plant finds the damaged shard and makes it again
    assert "shard-000001.tar" in capsys.readouterr().err
    assert dataset_fingerprint(out) == reference


def kill_at(args, seconds):
    """Start `concrete-jungle ARGS`, kill -9 it after ``seconds`` (if still running); True if it was killed."""
    proc = subprocess.Popen([sys.executable, "-m", "concrete_jungle.cli", *map(str, args)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=seconds)
        return False
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return True


@pytest.mark.slow
def test_twenty_kills_of_plant_at_random_moments_lose_and_duplicate_nothing(tmp_path):
    captions, images = make_dataset(tmp_path, 400, image_size=16)
    extra = ["--samples-per-shard", 25, "--batch-size", 8]
    reference = tmp_path / "reference"
    assert main(plant_args(captions, images, reference, *extra)) == 0
    expected = dataset_fingerprint(reference)
    rng = random.Random(0)
    killed = 0
    for trial in range(20):
        out = tmp_path / f"trial{trial}"
        args = plant_args(captions, images, out, *extra)
        killed += kill_at(args, rng.uniform(1.0, 6.0))
        assert cli(args).returncode == 0
        assert dataset_fingerprint(out) == expected, f"trial {trial}"
        shutil.rmtree(out)
    assert killed >= 15  # the kills landed while the run was working


@pytest.mark.slow
def test_ten_kills_of_training_resume_from_the_last_complete_checkpoint_to_the_same_weights(tmp_path):
    captions, images = make_dataset(tmp_path, 48, image_size=32)
    data = tmp_path / "cb"
    assert main(["plant", "--captions", str(captions), "--images", str(images), "--out", str(data), "--mode", "hc",
                 "--no-progress"]) == 0

    def args(out):  # a checkpoint every step: most kills land in or near a checkpoint write
        return ["train", "--set", "model.name=cj-tiny", "--set", "model.pretrained=none", "--set",
                "model.precision=fp32", "--set", "data.workers=0", "--set", "optim.lr=0.002", "--set",
                "optim.warmup=2", "--set", "save_every=1", "--data", data, "--batch-size", 8, "--steps", 24,
                "--out", out, "--no-progress"]

    assert main([str(a) for a in args(tmp_path / "reference")]) == 0
    final = "checkpoints/step-0000024/open_clip_model.safetensors"
    expected = load_file(tmp_path / "reference" / final)
    rng = random.Random(1)
    killed = 0
    for trial in range(10):
        out = tmp_path / f"trial{trial}"
        killed += kill_at(args(out), rng.uniform(2.5, 6.0))
        resume = ["--resume", "latest"] if (out / "checkpoints" / "latest.json").exists() else []
        resumed = cli(args(out) + resume)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        weights = load_file(out / final)
        assert weights.keys() == expected.keys() and all(torch.equal(weights[k], expected[k]) for k in weights)
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == list(range(1, 25)), f"trial {trial}: every step logged once"
        assert not list((out / "checkpoints").glob(".*"))  # no half-written checkpoint left
        shutil.rmtree(out)
    assert killed >= 7
