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


# ------------------------------------------------------------------------------------------------ 2. plugins


@pytest.fixture
def small(tmp_path):
    return make_dataset(tmp_path, 12, image_size=16)


@pytest.mark.parametrize("flags, message", [
    (["--editor", "plugin_example:ShortEditor"], "editor 'short' returned 5 images for 6 anchors"),
    (["--captioner", "plugin_example:StrCaptioner"], "captioner 'purple:teapot' returned a str where a Reply belongs"),
    (["--captioner", "plugin_example:RaisingCaptioner"],
     "captioner 'raising' failed in rewrite(): ConnectionError: the server went away"),
])
def test_a_plugin_that_breaks_its_contract_stops_the_run_naming_it_and_claims_nothing(small, tmp_path, capsys, flags,
                                                                                       message):
    captions, images = small
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out, "--samples-per-shard", 6, "--batch-size", 12, *flags)) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert message in err
    assert not (out / "manifest.jsonl").exists() and not (out / "summary.json").exists()
    assert not list(out.glob("shard-*.tar"))  # no shard holds fewer records than its manifest would say


def test_a_captioner_without_close_as_the_readme_describes_finishes(small, tmp_path):
    captions, images = small
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out, "--captioner", "plugin_example:NoCloseCaptioner")) == 0
    assert json.loads((out / "summary.json").read_text())["ok"] == 12


def test_an_editor_that_draws_on_its_input_cannot_change_the_stored_anchors(tmp_path):
    import numpy as np
    from PIL import Image

    from concrete_jungle.concretebatch import iter_records

    images = tmp_path / "png"
    images.mkdir()
    rows = []
    for i in range(6):  # PNG sources: the anchor is encoded to JPEG by plant, not copied as bytes
        Image.fromarray(np.full((16, 16, 3), 40 * i, np.uint8)).save(images / f"{i}.png")
        rows.append({"id": f"s{i}", "captions": [f"a small dog next to a red ball number {i}"], "image": f"{i}.png"})
    captions = tmp_path / "c.jsonl"
    captions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for editor in ("MirrorEditor", "DrawingEditor"):
        assert main(plant_args(captions, images, tmp_path / editor, "--editor", f"plugin_example:{editor}")) == 0
    anchors = {name: {r["meta"]["id"]: np.asarray(r["image"]) for r in iter_records(tmp_path / name)}
               for name in ("MirrorEditor", "DrawingEditor")}
    assert anchors["MirrorEditor"].keys() == anchors["DrawingEditor"].keys()
    for key, pixels in anchors["MirrorEditor"].items():
        assert np.array_equal(pixels, anchors["DrawingEditor"][key])  # not red
    negative = next(iter_records(tmp_path / "DrawingEditor"))["neg_image"]
    assert np.asarray(negative)[..., 0].mean() > 200  # the editor's own output is kept as its negative


def test_a_plugin_that_does_not_import_or_is_no_class_is_one_line_before_any_file(small, tmp_path, monkeypatch,
                                                                                 capsys):
    captions, images = small
    plugins = tmp_path / "mine"
    plugins.mkdir()
    (plugins / "broken_plugin.py").write_text("class Editor(:\n    pass\n")
    monkeypatch.syspath_prepend(str(plugins))
    for flags, message in [
        (["--editor", "broken_plugin:Editor"],
         "editor 'broken_plugin:Editor': cannot import broken_plugin: SyntaxError"),
        (["--captioner", "plugin_example:a_function_not_a_class"],
         "plugin_example:a_function_not_a_class is a function, not a class"),
        (["--editor", "plugin_example:PurpleCaptioner"], "has no edit() method"),
    ]:
        out = tmp_path / "cb"
        assert main(plant_args(captions, images, out, *flags)) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert message in err and "Traceback" not in err
        assert not out.exists()  # checked before anything is written


def test_two_packages_registering_one_name_is_an_error_naming_both(tmp_path, small):
    site = tmp_path / "site"
    for package, target in (("one", "PurpleCaptioner"), ("two", "NoCloseCaptioner")):
        info = site / f"cj_{package}-0.1.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: cj-{package}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[concrete_jungle.captioners]\nmine = plugin_example:{target}\n")
    captions, images = small
    done = subprocess.run([sys.executable, "-m", "concrete_jungle.cli",
                           *map(str, plant_args(captions, images, tmp_path / "cb", "--captioner", "mine"))],
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": f"{site}:{Path(__file__).parent}", "PATH": "/usr/bin:/bin",
                               "HOME": str(tmp_path)})
    assert done.returncode == 2
    err = " ".join(done.stderr.split())
    assert "captioner 'mine' is registered by more than one installed package" in err
    assert "(package cj-one)" in err and "(package cj-two)" in err


# ------------------------------------------------------------------------------------------------ 6. merges


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


def test_train_cache_and_analyze_refuse_an_unmerged_dataset_unless_partial(two_parts, tmp_path, capsys):
    _, _, out = two_parts
    train = ["train", "--data", str(out), "--out", str(tmp_path / "run"), "--steps", "1", *TINY_TRAIN]
    for command in (train, ["cache", str(out), "--model", "cj-tiny", "--pretrained", "none", "--workers", "0"],
                    ["analyze", "datasets", str(out), "--model", "cj-tiny", "--pretrained", "none",
                     "--out", str(tmp_path / "a")]):
        assert main(command) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"{out} is a split run whose parts are not merged" in err and "plant merge" in err, command[0]
    assert main(train + ["--set", "data.partial=true"]) == 0
    assert main(["analyze", "datasets", str(out), "--model", "cj-tiny", "--pretrained", "none", "--partial",
                 "--out", str(tmp_path / "a")]) == 0
    assert main(["plant", "merge", str(out)]) == 0
    assert main(train[:4] + [str(tmp_path / "run2")] + train[5:]) == 0  # merged: a dataset like any other


# ------------------------------------------------------------------------------------------------ 3. caches


def test_the_image_cache_key_covers_the_tokenizer_s_options():
    from open_clip.tokenizer import SimpleTokenizer

    from concrete_jungle.image_cache import cache_key
    from concrete_jungle.models import ClipModel, load_model

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


def test_the_embedding_cache_follows_the_weights_file_s_content_and_the_precision(tmp_path):
    from safetensors.torch import save_file

    from concrete_jungle.models import load_model

    weights = tmp_path / "w.safetensors"
    save_file(load_model("cj-tiny", "none", seed=1).model.state_dict(), str(weights))
    first = load_model("cj-tiny", str(weights))
    save_file(load_model("cj-tiny", "none", seed=2).model.state_dict(), str(weights))  # overwritten in place
    assert load_model("cj-tiny", str(weights)).hash != first.hash
    assert load_model("cj-tiny", "none", precision="bf16").hash != load_model("cj-tiny", "none").hash


def test_analyze_features_are_keyed_by_the_shards_not_the_manifest(tmp_path):
    import shutil

    from concrete_jungle.analysis import feature_cache_path
    from concrete_jungle.models import load_model

    captions, images = make_dataset(tmp_path, 10, image_size=16)
    out, clip = tmp_path / "cb", load_model("cj-tiny", "none")
    assert main(plant_args(captions, images, out)) == 0
    before, manifest = feature_cache_path(clip, out, None, None, tmp_path), (out / "manifest.jsonl").read_bytes()
    shutil.rmtree(out)  # planted again with another editor: the same manifest, other negative images
    assert main(plant_args(captions, images, out, "--editor", "plugin_example:MirrorEditor")) == 0
    assert (out / "manifest.jsonl").read_bytes() == manifest
    assert feature_cache_path(clip, out, None, None, tmp_path) != before


# ------------------------------------------------------------------------------------------------ 4. images


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


def test_eval_check_decodes_every_image_and_the_run_skips_what_it_counted(data_root, tmp_path, capsys):
    root = copy_root(data_root, tmp_path)
    victim = sorted((root / "coco" / "val2017").glob("*.jpg"))[0]
    victim.write_bytes(victim.read_bytes()[:200])  # a truncated JPEG: its header still reads
    assert main(["eval", "--data-root", str(root), "--check"]) == 2
    assert f"image {victim} is unreadable" in " ".join(capsys.readouterr().err.split())
    assert main(["eval", "--data-root", str(root), "--check", "--skip-missing"]) == 0
    assert main(["eval", "--data-root", str(root), "--model", "cj-tiny", "--pretrained", "none", "--skip-missing",
                 "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    result = json.loads((tmp_path / "r" / "sugarcrepe.json").read_text())
    assert sum(result["skipped"].values()) >= 1


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


def test_eval_in_bf16_on_the_cpu_runs_and_keeps_its_own_cache(data_root, tmp_path):
    runs = {}
    for precision in ("bf16", "fp32"):
        out = tmp_path / precision
        assert main(["eval", "--data-root", str(data_root), "--model", "cj-tiny", "--pretrained", "none",
                     "--precision", precision, "--cache-dir", str(tmp_path / "cache"), "--out", str(out),
                     "--no-progress"]) == 0
        runs[precision] = json.loads((out / "sugarcrepe.json").read_text())
    assert runs["bf16"]["model_hash"] != runs["fp32"]["model_hash"]
    assert len(list((tmp_path / "cache").iterdir())) == 2  # one embedding cache per precision
