"""Nothing lost, round two: one job per output, a used training folder kept, configs that say what they mean, and
benchmark files that cannot drop an item unseen."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from concrete_jungle.cli import main
from concrete_jungle.configs import ConfigError
from concrete_jungle.train_config import load_config

sys.path.insert(0, str(Path(__file__).parent))
from conftest import TINY_TRAIN  # noqa: E402
from test_plant import dataset_fingerprint, make_dataset, plant_args  # noqa: E402




def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def hold(lock: Path, pid: int, command: str = "concrete-jungle other") -> None:
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "command": command, "started": 0}))


# ------------------------------------------------------------------------------------------------ 1. locks


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
        from concrete_jungle.image_cache import cache_key as key
        from concrete_jungle.models import load_model

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


# ------------------------------------------------------------------------------------------------ train --out


def test_train_into_a_used_folder_needs_resume_or_overwrite(planted, tmp_path, capsys):
    out = tmp_path / "run"
    base = ["train", "--data", str(planted), "--out", str(out), *TINY_TRAIN, "--set", "save_every=1"]
    assert main(base + ["--steps", "3"]) == 0
    assert main(base + ["--steps", "2"]) == 2
    assert "holds a training run (3 checkpoint(s), metrics.jsonl); continue it with --resume latest" in " ".join(
        capsys.readouterr().err.split())
    assert len(list((out / "checkpoints").glob("step-*"))) == 3  # nothing touched
    assert main(base + ["--steps", "2", "--overwrite"]) == 0
    assert sorted(p.name for p in (out / "checkpoints").glob("step-*")) == ["step-0000001", "step-0000002"]
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]


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


# ------------------------------------------------------------------------------------------------ 5. configs


def test_numbers_in_flags_and_yaml_are_numbers(tmp_path, planted):
    config = tmp_path / "c.yaml"
    config.write_text("out: x\noptim:\n  lr: 1e-5\n  eps: 1E-8\n")
    assert load_config(str(config), []).optim.lr == 1e-5
    assert load_config(None, ["out=x", "optim.lr=1e-05"]).optim.lr == 1e-5  # what `--lr 1e-5` becomes
    assert main(["train", "--data", str(planted), "--out", str(tmp_path / "run"), "--lr", "1e-5", "--steps", "1",
                 *TINY_TRAIN]) == 0
    assert json.loads((tmp_path / "run" / "config.json").read_text())["optim"]["lr"] == 1e-5


@pytest.mark.parametrize("overrides, message", [
    (["optim.grad_clip=-1"], "optim.grad_clip must be > 0, or null for no clipping, got -1.0"),
    (["optim.weight_decay=-0.1"], "optim.weight_decay must be >= 0"),
    (["loss.m_min=3"], "loss.m_min 3.0 is above loss.m_max 2.0"),
    (["optim.warmup=-5"], "optim.warmup must be >= 0"),
    (["model.precision=fp64"], "model.precision 'fp64' is not one of fp32, amp_bf16"),
    (["out=''"], "out is empty"),
    (["eval.subset=-1"], "eval.subset must be >= 0"),
    (["loss.center=.nan"], "loss.center must be a finite number, got nan"),
    (["optim.lr=.inf"], "optim.lr must be a finite number, got inf"),
    (["optim.beta2=1.5"], "optim.beta2 must be in [0, 1)"),
])
def test_numbers_out_of_range_are_refused_where_they_are_read(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, ["out=x", *overrides])


def test_yaml_twice_given_keys_and_alias_bombs_are_refused_with_short_messages(tmp_path):
    twice = tmp_path / "twice.yaml"
    twice.write_text("out: x\nsteps: 10\nsteps: 20\n")
    with pytest.raises(ConfigError, match=r"key 'steps' is given twice \(line 3\)"):
        load_config(str(twice), [])
    bomb = tmp_path / "bomb.yaml"  # 414 bytes that expand to 9^7 strings
    lines = ["out: x", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdef", "bcdefg"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    bomb.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(bomb), [])
    assert "expands to more than 100,000 values" in str(e.value) and len(str(e.value)) < 300
    long = tmp_path / "long.yaml"
    long.write_text("out: x\nbatch_size: [" + ",".join(["1"] * 10000) + "]\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(long), [])
    assert "batch_size: expected int, got [1, 1," in str(e.value) and "(30,000 characters)" in str(e.value)
    assert len(str(e.value)) < 300


# ------------------------------------------------------------------------------------------------ 7. eval inputs


def copy_root(data_root, tmp_path):
    import shutil

    root = tmp_path / "root"
    shutil.copytree(data_root, root)
    return root


def test_a_duplicate_key_in_a_sugarcrepe_file_is_an_error_not_a_lost_item(data_root, tmp_path, capsys):
    root = copy_root(data_root, tmp_path)
    path = root / "sugarcrepe" / "add_att.json"
    items = json.loads(path.read_text())
    key, item = next(iter(items.items()))
    text = path.read_text().rstrip()[:-1] + f', "{key}": ' + json.dumps(item) + "}"
    path.write_text(text)
    assert main(["eval", "--data-root", str(root), "--check"]) == 2
    assert f"add_att.json: key '{key}' appears twice" in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("content, message", [
    ({"0": {"filename": "a.jpg", "caption": "x"}}, "item '0' has no text in negative_caption"),
    ({"0": "not an item"}, "item '0' has no text in filename, caption, negative_caption"),
    ({}, "holds no items"),
    ([{"filename": "a.jpg"}], "SugarCrepe files are a dict keyed by item index"),
])
def test_malformed_and_empty_subset_files_are_clear_errors(data_root, tmp_path, capsys, content, message):
    root = copy_root(data_root, tmp_path)
    (root / "sugarcrepe" / "swap_obj.json").write_text(json.dumps(content))
    assert main(["eval", "--data-root", str(root), "--check"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "swap_obj.json" in err and message in err and "Traceback" not in err


def test_a_subset_whose_every_image_is_missing_is_null_in_json_never_nan(data_root, tmp_path):
    root = copy_root(data_root, tmp_path)
    (root / "sugarcrepe" / "mine.json").write_text(json.dumps({"0": {"filename": "gone.jpg", "caption": "a dog",
                                                                     "negative_caption": "a cat"}}))
    out = tmp_path / "r"
    assert main(["eval", "--data-root", str(root), "--model", "cj-tiny", "--pretrained", "none", "--skip-missing",
                 "--out", str(out), "--no-progress"]) == 0
    text = (out / "sugarcrepe.json").read_text()
    assert "NaN" not in text
    result = json.loads(text)
    assert result["n"]["mine"] == 0 and result["skipped"]["mine"] == 1 and result["metrics"]["mine"] is None
    official = [result["metrics"][s] for s in result["n"] if s != "mine"]
    assert result["metrics"]["M.Avg"] == pytest.approx(sum(official) / len(official))
