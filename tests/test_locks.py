"""One job per output (files/locks.py): a second job on a folder a live job holds is refused naming the holder, a dead
job's lock is taken over, for every command that writes."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from concrete_jungle.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from conftest import TINY_TRAIN  # noqa: E402
from plant_fixtures import dataset_fingerprint, make_dataset, plant_args  # noqa: E402


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def hold(lock: Path, pid: int, command: str = "concrete-jungle other") -> None:
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "command": command, "started": 0}))


@pytest.mark.processes
def test_two_plant_processes_on_one_folder_one_is_refused_and_nothing_is_mixed(tmp_path):
    captions, images = make_dataset(tmp_path, 1200, image_size=16)
    reference = tmp_path / "reference"
    extra = ["--samples-per-shard", 50, "--batch-size", 8]
    out = tmp_path / "cb"
    first = subprocess.Popen([sys.executable, "-m", "concrete_jungle.cli",
                              *map(str, plant_args(captions, images, out, *extra))],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lock = out / ".plant-00000-of-00001.lock"
    end = time.time() + 120
    while not lock.exists() and time.time() < end and first.poll() is None:
        time.sleep(0.02)
    assert lock.exists(), first.stderr.read() if first.poll() is not None else "no lock"
    second = subprocess.run([sys.executable, "-m", "concrete_jungle.cli",
                             *map(str, plant_args(captions, images, out, *extra))], capture_output=True, text=True)
    assert second.returncode == 2
    message = " ".join(second.stderr.split())
    assert (f"part 00000-of-00001 of {out} is in use by another job: concrete-jungle plant (pid {first.pid} on "
            in message)
    assert first.wait(timeout=300) == 0
    assert not lock.exists()  # released
    assert main(plant_args(captions, images, reference, *extra)) == 0
    assert dataset_fingerprint(out) == dataset_fingerprint(reference)


@pytest.mark.parametrize("command", ["train", "cache", "keywords", "eval", "gallery", "analyze"])
def test_every_command_refuses_an_output_a_live_job_holds_and_takes_over_a_dead_one(command, planted, data_root,
                                                                                    tmp_path, capsys):
    captions = planted.parent / "captions.jsonl"
    model = ["--model", "cj-tiny", "--pretrained", "none"]
    cache_key = None
    if command == "train":
        args, lock = ["train", "--data", str(planted), "--out", str(tmp_path / "run"), "--steps", "1",
                      *TINY_TRAIN], tmp_path / "run" / ".train.lock"
    elif command == "cache":
        from concrete_jungle.models import load_model
        from concrete_jungle.train.image_cache import cache_key as key

        cache_key = key(load_model("cj-tiny", "none"))
        args, lock = ["cache", str(planted), *model, "--workers", "0", "--no-progress"], \
            planted / "cache" / f".{cache_key}.lock"
    elif command == "keywords":
        args, lock = ["keywords", "--captions", str(captions), "--mode", "hc", "--out", str(tmp_path / "kw.jsonl"),
                      "--no-progress"], tmp_path / ".kw.jsonl.lock"
    elif command == "eval":
        args, lock = ["eval", "--data-root", str(data_root), *model, "--out", str(tmp_path / "r"), "--no-progress"], \
            tmp_path / "r" / ".eval.lock"
    elif command == "gallery":
        args, lock = ["gallery", str(planted), "--out", str(tmp_path / "g")], tmp_path / "g" / ".gallery.lock"
    else:
        args, lock = ["analyze", "datasets", str(planted), *model, "--out", str(tmp_path / "a")], \
            tmp_path / "a" / ".analyze.lock"
    hold(lock, os.getpid())  # this test process: alive
    assert main(args) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"is in use by another job: concrete-jungle other (pid {os.getpid()} on {socket.gethostname()}" in err
    assert f"remove {lock}" in err
    hold(lock, dead_pid())
    assert main(args) == 0
    assert "taking over the lock of a job that is gone" in capsys.readouterr().err
    assert not lock.exists()
    if cache_key:
        import shutil

        shutil.rmtree(planted / "cache")


@pytest.mark.processes
def test_sigterm_on_a_held_lock_leaves_it_to_be_taken_over(planted, tmp_path):
    out = tmp_path / "run"
    args = ["train", "--data", planted, "--out", out, "--steps", "5000", *TINY_TRAIN]
    proc = subprocess.Popen([sys.executable, "-m", "concrete_jungle.cli", *map(str, args)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.time() + 120
    while not (out / "metrics.jsonl").is_file() and time.time() < end:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # no chance to release the lock
    proc.wait()
    assert (out / ".train.lock").exists()
    done = subprocess.run([sys.executable, "-m", "concrete_jungle.cli", *map(str, args[:5]), "--steps", "2",
                           *TINY_TRAIN, "--overwrite"], capture_output=True, text=True)
    assert done.returncode == 0 and "taking over the lock" in done.stderr
