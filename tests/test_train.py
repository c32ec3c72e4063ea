"""Slipform training on the CPU: a tiny open_clip model on a small ConcreteBatch made here; a used output folder,
and Ctrl-C then resume."""

import importlib.util
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import open_clip
import pytest
import torch
from safetensors.torch import load_file

from concrete_jungle.cli import main
from concrete_jungle.configs import ConfigError
from concrete_jungle.errors import TrainingError
from concrete_jungle.models import load_model, uses_quick_gelu
from concrete_jungle.train.config import load_config
from concrete_jungle.train.loop import train

sys.path.insert(0, str(Path(__file__).parent))
from conftest import TINY_TRAIN, cli  # noqa: E402
from plant_fixtures import make_dataset, wait_for  # noqa: E402

FIELDS = {"step", "epoch", "loss", "lr", "logit_scale", "hn_grad_share", "p_pos", "logit_gap", "margin",
          "samples_per_s"}


@pytest.fixture(scope="module")
def concretebatch(tmp_path_factory):
    root = tmp_path_factory.mktemp("cb")
    captions, images = make_dataset(root, 48, image_size=64)
    assert main(["plant", "--captions", str(captions), "--images", str(images), "--out", str(root / "cb"),
                 "--mode", "hc", "--no-progress", "--samples-per-shard", "16"]) == 0
    return root / "cb"


def config(tmp_path, data, *overrides, model="cj-tiny"):
    base = [f"out={tmp_path / 'run'}", f"model.name={model}", "model.pretrained=none", "model.precision=fp32",
            f"data.concretebatch=['{data}']", "data.workers=0", "optim.lr=0.002", "optim.warmup=2",
            "batch_size=8", "steps=20", "save_every=10"]
    return load_config(None, base + list(overrides))


def metrics(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_training_lowers_the_loss_and_logs_every_field(tmp_path, concretebatch):
    cfg = config(tmp_path, concretebatch, "steps=30")
    train(cfg, progress=False)
    rows = metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == list(range(1, 31))
    assert all(FIELDS <= r.keys() and 0 < r["samples_per_s"] < float("inf") for r in rows)
    first, last = sum(r["loss"] for r in rows[:5]) / 5, sum(r["loss"] for r in rows[-5:]) / 5
    assert last < first, (first, last)
    latest = json.loads((tmp_path / "run" / "checkpoints" / "latest.json").read_text())
    assert latest["step"] == 30


def test_resume_is_bitwise_identical(tmp_path, concretebatch):
    straight = config(tmp_path / "a", concretebatch)
    train(straight, progress=False)
    resumed = config(tmp_path / "b", concretebatch)
    train(resumed, progress=False, stop_at=10)
    assert json.loads((tmp_path / "b" / "run" / "checkpoints" / "latest.json").read_text())["step"] == 10
    train(resumed, progress=False, resume="latest")
    a = load_file(tmp_path / "a" / "run" / "checkpoints" / "step-0000020" / "open_clip_model.safetensors")
    b = load_file(tmp_path / "b" / "run" / "checkpoints" / "step-0000020" / "open_clip_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [r["loss"] for r in metrics(tmp_path / "a" / "run")] == [r["loss"] for r in metrics(tmp_path / "b" / "run")]


@pytest.mark.processes
def test_two_process_torchrun_equals_one_process(tmp_path, concretebatch):
    args = ["train", "--no-progress", "--set", "model.name=cj-tiny", "--set", "model.pretrained=none",
            "--set", "model.precision=fp32", "--set", "data.workers=0", "--set", "optim.lr=0.002",
            "--set", "optim.warmup=2", "--set", "save_every=0", "--batch-size", "8", "--steps", "4",
            "--data", str(concretebatch)]
    # torchrun's elastic agent leaves a torchelastic_* folder in the temporary directory: keep it in tmp_path
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path / "tmp")}
    one = subprocess.run([sys.executable, "-m", "concrete_jungle.cli", *args, "--out", str(tmp_path / "one")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-2000:]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
                          "127.0.0.1", "--master_port", str(port), "-m", "concrete_jungle.cli", *args, "--out",
                          str(tmp_path / "two")], env=env, capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    a = load_file(tmp_path / "one" / "checkpoints" / "step-0000004" / "open_clip_model.safetensors")
    b = load_file(tmp_path / "two" / "checkpoints" / "step-0000004" / "open_clip_model.safetensors")
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=2e-5, rtol=1e-4)
    la, lb = [r["loss"] for r in metrics(tmp_path / "one")], [r["loss"] for r in metrics(tmp_path / "two")]
    assert la == pytest.approx(lb, abs=1e-5)


def test_checkpoint_reopens_with_quickgelu_and_the_same_embeddings(tmp_path, concretebatch):
    train(config(tmp_path, concretebatch, "steps=3", model="cj-tiny-quickgelu"), progress=False)
    path = tmp_path / "run" / "checkpoints" / "step-0000003"
    ours = load_model(checkpoint=path)
    plain, _, _ = open_clip.create_model_and_transforms(f"local-dir:{path}")
    gelu = open_clip.create_model("cj-tiny")  # what a load that forgets the activation would build
    gelu.load_state_dict(load_file(path / "open_clip_model.safetensors"))
    assert uses_quick_gelu(ours.model) and uses_quick_gelu(plain) and not uses_quick_gelu(gelu)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        e = ours.model.encode_image(x)
        torch.testing.assert_close(plain.eval().encode_image(x), e)
        assert (gelu.eval().encode_image(x) - e).abs().max() > 1e-4


@pytest.mark.parametrize("option", ["model.grad_checkpointing=true",
                                    pytest.param("model.compile=true", marks=pytest.mark.slow)])
def test_memory_and_speed_options_take_effect_and_train_the_same_weights(tmp_path, concretebatch, option,
                                                                          monkeypatch):
    import open_clip.transformer
    from torch._dynamo.utils import counters

    checkpointed = []  # a spy on open_clip's activation checkpointing; the real function still runs
    real = open_clip.transformer.checkpoint
    monkeypatch.setattr(open_clip.transformer, "checkpoint", lambda *a, **k: checkpointed.append(1) or real(*a, **k))
    counters.clear()
    train(config(tmp_path / "plain", concretebatch, "steps=4", "save_every=0"), progress=False)
    assert not checkpointed and not counters["stats"]["unique_graphs"]
    train(config(tmp_path / "option", concretebatch, "steps=4", "save_every=0", option), progress=False)
    assert checkpointed if "grad_checkpointing" in option else counters["stats"]["unique_graphs"] > 0
    a, b = (load_file(tmp_path / name / "run" / "checkpoints" / "step-0000004" / "open_clip_model.safetensors")
            for name in ("plain", "option"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=1e-5, rtol=1e-4)
    la, lb = ([r["loss"] for r in metrics(tmp_path / name / "run")] for name in ("plain", "option"))
    assert lb == pytest.approx(la, abs=1e-5)

@pytest.mark.parametrize("overrides, match", [
    (["colour=red"], r"--set colour=red: 'colour' is not a key of the config; valid keys are \['batch_size'"),
    (["optim.learning_rate=1"], r"--set optim.learning_rate=1: 'learning_rate' is not a key of optim"),
    (["batch_size=many"], "--set batch_size=many: expected int"),
    (["data.concretebatch=['/no/such/dir']"], "data.concretebatch /no/such/dir does not exist"),
    (["batch_size=4096"], r"batch_size 4096 is larger than the dataset \(48 records\)"),
    (["model.name=ViT-B-32", "model.pretrained=not-a-tag"], "model.pretrained 'not-a-tag' does not exist for ViT-B-32"),
    (["loss.name=triplet"], "loss.name 'triplet' is not one of"),
])
def test_config_errors_are_clear_and_come_before_any_data(tmp_path, concretebatch, overrides, match):
    with pytest.raises(ConfigError, match=match):
        train(config(tmp_path, concretebatch, *overrides), progress=False)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory, concretebatch):
    """A run stopped after step 2 of 20 (lr 0.002, cement, batch 8, seed 0), to be resumed."""
    root = tmp_path_factory.mktemp("stopped")
    train(config(root, concretebatch), progress=False, stop_at=2)
    return root


@pytest.mark.parametrize("override, setting, before, after", [
    ("loss.name=infonce", "loss.name", '"cement"', '"infonce"'),
    ("optim.lr=0.01", "optim.lr", "0.002", "0.01"),
    ("batch_size=16", "batch_size", "8", "16"),
    ("seed=1", "seed", "0", "1"),
    ("loss.tau=0.3", "loss.tau", "0.15", "0.3"),
    ("data.concretebatch=['{other}']", "data.concretebatch", '["{data}"]', '["{other}"]'),
])
def test_a_resume_with_other_settings_is_refused_naming_each_and_config_json_keeps_the_run_s(
        stopped_run, concretebatch, planted, override, setting, before, after):
    run = stopped_run / "run"
    recorded = (run / "config.json").read_bytes()
    names = {"data": concretebatch, "other": planted}
    changed = f"{setting} {before.format(**names)} -> {after.format(**names)}"
    with pytest.raises(ConfigError, match=re.escape(f"--resume latest continues a run made with other settings: "
                                                    f"{changed} (recorded in {run / 'config.json'})")):
        train(config(stopped_run, concretebatch, override.format(**names)), progress=False, resume="latest")
    assert (run / "config.json").read_bytes() == recorded
    assert json.loads((run / "checkpoints" / "latest.json").read_text())["step"] == 2


def test_a_resume_may_change_how_long_the_run_goes_and_what_it_logs(tmp_path, concretebatch):
    train(config(tmp_path, concretebatch, "steps=4"), progress=False, stop_at=2)
    train(config(tmp_path, concretebatch, "steps=6", "log_every=2", "save_every=3"), progress=False, resume="latest")
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (recorded["steps"], recorded["optim"]["lr"], recorded["loss"]["name"]) == (6, 0.002, "cement")
    assert json.loads((tmp_path / "run" / "checkpoints" / "latest.json").read_text())["step"] == 6


@pytest.mark.parametrize("damaged", ["trainer_state.json", "trainer_state.safetensors",
                                     "open_clip_model.safetensors"])
def test_a_checkpoint_cut_short_is_refused_on_resume_naming_the_file(stopped_run, concretebatch, damaged, tmp_path):
    import shutil

    shutil.copytree(stopped_run / "run", tmp_path / "run")
    path = tmp_path / "run" / "checkpoints" / "step-0000002" / damaged
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(TrainingError, match=re.escape(str(path)) + r"[: ].*resume from an earlier checkpoint of the "
                       "run .* or start over with --overwrite") as refused:
        train(config(tmp_path, concretebatch), progress=False, resume="latest")
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "run" / "checkpoints" / "step-0000003").exists()


def test_non_finite_training_stops_and_keeps_the_last_good_checkpoint(tmp_path, concretebatch):
    # the first update leaves weights near 1e30, still finite (saved); the next step's loss is not
    exploding = config(tmp_path, concretebatch, "optim.lr=1.0e+30", "save_every=1", "optim.grad_clip=null")
    with pytest.raises(TrainingError, match="no longer finite|loss is nan|loss is inf") as failure:
        train(exploding, progress=False)
    failed_at = int(re.search(r"(?:at|after) step (\d+)", str(failure.value)).group(1))
    ckpts = tmp_path / "run" / "checkpoints"
    latest = json.loads((ckpts / "latest.json").read_text())
    assert 1 <= latest["step"] < failed_at  # the last checkpoint is from before the failure
    weights = load_file(ckpts / latest["name"] / "open_clip_model.safetensors")
    assert all(torch.isfinite(v).all() for v in weights.values())


def test_train_command_from_the_config_file(tmp_path, concretebatch):
    assert main(["train", "--config", "configs/tiny_cpu.yaml", "--data", str(concretebatch), "--out",
                 str(tmp_path / "run"), "--steps", "2", "--no-progress"]) == 0
    assert len(metrics(tmp_path / "run")) == 2
    assert main(["train", "--config", "configs/tiny_cpu.yaml", "--set", "nope=1", "--out", str(tmp_path)]) == 2


def test_evaluation_hook_scores_in_fp32_and_tensorboard_gets_the_scalars(tmp_path, concretebatch, data_root,
                                                                         monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import concrete_jungle.evaluation as evaluation

    seen = []
    real_run = evaluation.run

    def recording_run(*args, **kwargs):  # records the matmul precision the hook evaluates under
        seen.append(torch.get_float32_matmul_precision())
        return real_run(*args, **kwargs)

    monkeypatch.setattr(evaluation, "run", recording_run)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # what training on CUDA sets (TF32)
    try:
        cfg = config(tmp_path, concretebatch, "steps=6", "save_every=0", "tensorboard=true", "eval.every=3",
                     "eval.benchmarks=[sugarcrepe]", f"eval.data_root={data_root}", "eval.subset=3")
        train(cfg, progress=False)
        assert torch.get_float32_matmul_precision() == "high"  # restored after each evaluation
    finally:
        torch.set_float32_matmul_precision(before)
    assert seen == ["highest", "highest"]
    rows = metrics(tmp_path / "run")
    scores = [r for r in rows if "eval/sugarcrepe/M.Avg" in r]
    assert [r["step"] for r in scores] == [3, 6] and all(0 <= r["eval/sugarcrepe/M.Avg"] <= 1 for r in scores)
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard")).Reload()
    assert [e.step for e in events.Scalars("loss")] == [1, 2, 3, 4, 5, 6]
    assert [e.value for e in events.Scalars("loss")] == pytest.approx([r["loss"] for r in rows if "loss" in r])


def test_the_image_cache_trains_the_same_weights_as_decoding_and_goes_stale_with_its_dataset(tmp_path,
                                                                                             concretebatch):
    import shutil

    from concrete_jungle.train.config import DataConfig
    from concrete_jungle.train.data import training_set
    from concrete_jungle.train.image_cache import CachedSet, current_cache

    data = tmp_path / "cb"
    shutil.copytree(concretebatch, data)
    decoded = config(tmp_path / "decoded", data, "data.preload_mib=0")  # the PIL path: decode every step
    train(decoded, progress=False)
    assert main(["cache", str(data), "--model", "cj-tiny", "--pretrained", "none", "--workers", "0",
                 "--no-progress"]) == 0
    clip = load_model("cj-tiny", "none")
    assert isinstance(training_set(DataConfig(concretebatch=[str(data)]), clip, progress=False), CachedSet)
    cached = config(tmp_path / "cached", data)
    train(cached, progress=False)
    final = "checkpoints/step-0000020/open_clip_model.safetensors"
    a, b = load_file(tmp_path / "decoded" / "run" / final), load_file(tmp_path / "cached" / "run" / final)
    # the same PIL resize and crop, the same float operations: bitwise the same inputs, so the same weights
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [r["loss"] for r in metrics(tmp_path / "decoded" / "run")] == \
        [r["loss"] for r in metrics(tmp_path / "cached" / "run")]
    # the dataset made again, other bytes (here: the same members in another order) with their true digest
    import tarfile

    from concrete_jungle.records import file_digest

    shard = data / "shard-000000.tar"
    with tarfile.open(shard) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar]
    with tarfile.open(shard, "w") as tar:
        for member, content in reversed(members):
            tar.addfile(member, io.BytesIO(content))
    (data / "manifests" / "shard-000000.sha256").write_text(f"{file_digest(shard)}  shard-000000.tar\n")
    assert current_cache(data, clip) is None


def test_negatives_apart_pairs_each_anchor_batch_with_the_next_batch_s_negatives(tmp_path, concretebatch):
    """The augmentation control: a batch holds the anchors the hard-negative runs see at that step and, as ordinary
    pairs, the negatives of the next batch's anchors; no anchor's own negative is beside it, every negative is
    used once an epoch, and InfoNCE on the batch is open_clip's ClipLoss over its 2N pairs."""
    from concrete_jungle.loss import CementLoss
    from concrete_jungle.train.config import DataConfig
    from concrete_jungle.train.data import EpochBatches, epoch_batches, training_set

    batches = EpochBatches(48, 8, rank=0, world=1, seed=3, epoch=1)
    anchors, partners = list(batches), list(batches.next_batches())
    assert partners == anchors[1:] + anchors[:1]
    assert all(not set(a) & set(p) for a, p in zip(anchors, partners))
    clip = load_model("cj-tiny", "none", device="cpu", seed=0)
    dataset = training_set(DataConfig(concretebatch=[str(concretebatch)], workers=0), clip, progress=False)
    plain = list(epoch_batches(dataset, batches, 0, False))
    apart = list(epoch_batches(dataset, batches, 0, False, apart=True))
    for k, batch in enumerate(apart):
        later = plain[(k + 1) % len(plain)]
        assert torch.equal(batch[0], plain[k][0]) and torch.equal(batch[2], plain[k][2])  # the step's anchors
        assert all(torch.equal(batch[i], later[i]) for i in (1, 3, 4, 5, 6, 7))  # the next batch's negatives
    # decoded per step, each batch is fetched once an epoch, and once more for the last step of a resumed epoch
    decoded = training_set(DataConfig(concretebatch=[str(concretebatch)], workers=0, preload_mib=0), clip,
                           progress=False)
    fetched = []

    class CountingSet(type(decoded)):
        def __getitem__(self, index):
            fetched.append(index)
            return super().__getitem__(index)

    decoded.__class__ = CountingSet
    for start in (0, 4):
        fetched.clear()
        resumed = EpochBatches(48, 8, rank=0, world=1, seed=3, epoch=1, start_step=start)
        got = list(epoch_batches(decoded, resumed, 0, False, apart=True))
        assert len(got) == len(apart) - start and len(fetched) == 8 * (len(got) + (start > 0))
        for mine, reference in zip(got, apart[start:]):
            assert all(torch.equal(a, b) for a, b in zip(mine, reference))
    image, neg_image, text, neg_text, c, has_negative, *_ = apart[0]
    with torch.no_grad():
        i, t, scale = clip.model(torch.cat([image, neg_image[:, 0]]), torch.cat([text, neg_text[:, 0]]))[:3]
        ours = CementLoss(margin="infonce")(i, t, scale, c, has_negative)
        reference = open_clip.loss.ClipLoss()(i, t, scale)
    assert bool(has_negative.all()) and torch.allclose(ours, reference, atol=1e-6)
    cfg = config(tmp_path, concretebatch, "loss.name=infonce", "data.negatives_apart=true", "steps=8")
    train(cfg, progress=False)
    assert [r["step"] for r in metrics(tmp_path / "run")] == list(range(1, 9))
    with pytest.raises(ConfigError, match="data.negatives_apart takes loss.name infonce"):
        config(tmp_path, concretebatch, "loss.name=cement", "data.negatives_apart=true")
    with pytest.raises(TrainingError, match="needs at least 2 batches an epoch"):
        EpochBatches(12, 8, 0, 1, 0, 0).next_batches()


def test_train_into_a_used_folder_needs_resume_or_overwrite(planted, tmp_path, capsys):
    out = tmp_path / "run"
    base = ["train", "--data", str(planted), "--out", str(out), *TINY_TRAIN, "--set", "save_every=1"]
    assert main(base + ["--steps", "3"]) == 0
    assert main(base + ["--steps", "2"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "holds a training run (3 checkpoint(s), metrics.jsonl); the run is complete (step-0000003 holds its final " \
           "weights, without the optimizer state a resume needs); to train further, start a new run from its weights " \
           f"(--checkpoint {out / 'checkpoints' / 'step-0000003'} and another --out), resume an earlier checkpoint " \
           f"with a larger --steps (--resume {out / 'checkpoints' / 'step-0000002'}), or run it again with " \
           "keep_final_state: true" in err
    # following the advice of a finished run works; `--resume latest` is refused with the same advice
    assert main(base + ["--steps", "5", "--resume", "latest"]) == 2
    assert "no trainer_state.json there; the run is complete (step-0000003" in " ".join(capsys.readouterr().err.split())
    assert len(list((out / "checkpoints").glob("step-*"))) == 3  # nothing touched
    further = tmp_path / "further"
    assert main(base[:4] + [str(further)] + base[5:] + ["--steps", "1", "--checkpoint",
                                                        str(out / "checkpoints" / "step-0000003")]) == 0
    assert main(base + ["--steps", "2", "--overwrite"]) == 0
    assert sorted(p.name for p in (out / "checkpoints").glob("step-*")) == ["step-0000001", "step-0000002"]
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]


@pytest.mark.processes
def test_ctrl_c_in_training_saves_a_checkpoint_of_the_last_step_and_resume_continues(planted, tmp_path):
    out = tmp_path / "run"
    args = ["train", "--data", planted, "--out", out, "--steps", "2000", "--set", "log_every=1", *TINY_TRAIN]
    proc = subprocess.Popen([sys.executable, "-m", "concrete_jungle.cli", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    metrics = out / "metrics.jsonl"
    assert wait_for(lambda: metrics.is_file() and len(metrics.read_text().splitlines()) >= 5)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr and "--resume latest" in " ".join(stderr.split())
    latest = json.loads((out / "checkpoints" / "latest.json").read_text())
    logged = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert latest["reason"] == "interrupted" and latest["step"] == logged[-1] >= 5  # no step lost
    assert (out / "checkpoints" / latest["name"] / "trainer_state.json").is_file()
    resumed = cli(*args[:5], "--steps", latest["step"] + 2, *args[7:], "--resume", "latest")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((out / "checkpoints" / "latest.json").read_text())["step"] == latest["step"] + 2


@pytest.mark.processes
def test_ctrl_c_before_the_first_step_says_to_run_the_same_command_again(planted, tmp_path):
    """`train` interrupted while it set up (the lock is taken, the model and data not yet loaded) told its user to
    `--resume latest`, which then failed: no checkpoint was there to resume."""
    out = tmp_path / "run"
    args = ["train", "--data", planted, "--out", out, "--steps", "1", *TINY_TRAIN]
    proc = subprocess.Popen([sys.executable, "-m", "concrete_jungle.cli", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: (out / ".train.lock").exists(), timeout=60)  # open_clip is imported after it
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    # 130, or killed by SIGINT when the interrupt landed in an import that runs code through CPython's own runner
    # (it then ends the process by the signal after our message)
    assert proc.returncode in (130, -signal.SIGINT), stderr[-2000:]
    assert " ".join(stderr.split()) == ("interrupted: stopped before the first step: no step was taken, so nothing "
                                        "needs resuming; run the same command again")
    assert not (out / "checkpoints").exists()
    assert main([str(a) for a in args]) == 0  # the same command again


def test_a_run_says_its_data_path_warns_of_a_warmup_longer_than_the_run_and_uses_no_more_workers_than_cores(
        planted, tmp_path, capsys):
    """`train --steps 6` kept the default warmup 50 (the learning rate never passed 1.2e-6 of 1e-5) in silence,
    started 4 DataLoader workers on 2 cores (torch warned of it at every run), and said nothing of whether its batches
    came from the image cache, memory or decoding."""
    cores = len(os.sched_getaffinity(0))
    assert load_config(None, ["out=x"]).data.workers == min(4, cores)
    out = tmp_path / "run"
    args = ["train", "--data", str(planted), "--out", str(out), "--steps", "6", "--set", "model.name=cj-tiny",
            "--set", "model.pretrained=none", "--batch-size", "8", "--no-progress"]
    assert main(args) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "warning: the run has 6 steps, fewer than optim.warmup 50: the learning rate only climbs, to 1.2e-06 of " \
           "optim.lr 1e-05; set optim.warmup below 6 (--set optim.warmup=0)" in err
    assert "data: decoded once into memory (it fits data.preload_mib)" in err and "worker processes" not in err
    recorded = json.loads((out / "config.json").read_text())
    assert recorded["data_path"] == "preload" and recorded["data"]["workers"] == min(4, cores)
    assert [r["lr"] for r in metrics(out)][-1] == pytest.approx(1.2e-6)
    assert main(["train", "--data", str(planted), "--out", str(tmp_path / "decoded"), "--steps", "1", *TINY_TRAIN,
                 "--set", "data.preload_mib=0", "--set", "optim.warmup=0"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "data: decoded every step by the main process (data.workers 0) (larger than data.preload_mib" in err
    assert "warning" not in err
    # a config asking for more workers than the CPUs (the peers' recipes ask for 8) gets the CPUs, said once
    assert main(["train", "--data", str(planted), "--out", str(tmp_path / "capped"), "--steps", "1", *TINY_TRAIN,
                 "--set", "data.preload_mib=0", "--set", "optim.warmup=0", "--set", f"data.workers={cores + 6}"]) == 0
    err = capsys.readouterr().err
    assert err.count(f"note: data.workers {cores + 6} is more than the {cores} CPU(s) this process may use: {cores} "
                     "worker process(es)") == 1
    assert f"data: decoded every step by {cores} worker process(es)" in " ".join(err.split())


def test_a_missing_data_path_says_it_does_not_exist_and_what_it_was_resolved_against(tmp_path, monkeypatch, capsys):
    """A relative path in a config that did not exist was "not a ConcreteBatch directory (no shard-*.tar in it)",
    with no word that it resolves against the current directory rather than the config file's."""
    (tmp_path / "configs").mkdir()
    config = tmp_path / "configs" / "c.yaml"
    config.write_text("out: run\ndata: {concretebatch: [runs/D_hc]}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", str(config)]) == 2
    assert (f"data.concretebatch runs/D_hc does not exist (relative to the current directory {tmp_path}: paths in a "
            "config file resolve against the directory the command runs in, not the file's)") in " ".join(
        capsys.readouterr().err.split())
    assert main(["train", "--out", "run", "--data", "cb"]) == 2
    assert f"data.concretebatch cb does not exist (relative to the current directory {tmp_path}" in " ".join(
        capsys.readouterr().err.split())


def test_seeds_train_one_resumable_run_per_seed_in_seed_folders(planted, tmp_path, capsys):
    """A config over several seeds took one command per seed, each with its own --out and --seed."""
    out = tmp_path / "cement"
    base = ["train", "--data", str(planted), "--out", str(out), "--steps", "1", *TINY_TRAIN]
    assert main(base + ["--seeds", "0"]) == 0
    capsys.readouterr()
    assert main(base + ["--seeds", "0", "1", "--resume", "latest"]) == 0  # the complete seed kept, a new one runs
    assert f"seed 0: {out / 'seed-0'} holds a complete run; kept" in " ".join(capsys.readouterr().out.split())
    assert [json.loads((out / f"seed-{s}" / "config.json").read_text())["seed"] for s in (0, 1)] == [0, 1]
    weights = [load_file(str(out / f"seed-{s}" / "checkpoints" / "step-0000001" / "open_clip_model.safetensors"))
               for s in (0, 1)]
    assert any(not torch.equal(weights[0][k], weights[1][k]) for k in weights[0])  # two seeds, two models
    assert main(base + ["--seeds", "0", "--seed", "3"]) == 2
    assert "--seeds runs one seed per folder: leave out --seed" in capsys.readouterr().err


def test_seeds_resumed_under_other_settings_are_refused_before_any_seed_trains(planted, tmp_path, capsys):
    """`train --seeds ... --resume latest` kept finished seeds without comparing their settings and trained the new
    seeds under the new ones (two recipes in one series)."""
    out = tmp_path / "series"
    base = ["train", "--data", str(planted), "--out", str(out), "--steps", "1", *TINY_TRAIN]
    assert main(base + ["--seeds", "0"]) == 0
    capsys.readouterr()
    assert main(base + ["--lr", "0.05", "--seeds", "0", "1", "--resume", "latest"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "continues a run made with other settings: optim.lr" in err and f"{out / 'seed-0' / 'config.json'}" in err
    assert not (out / "seed-1").exists()


def test_training_pairs_from_stores_print_count_and_log_every_sample_skipped_when_read(tmp_path, capsys):
    """`train` with data.pairs dropped a store's skips (a damaged shard's report, its cut sample, a failed download)
    without printing or counting them."""
    from test_stores import TEN, header_offsets, img2dataset_shard

    wds = tmp_path / "wds"
    wds.mkdir()
    img2dataset_shard(wds / "00000.tar", TEN, failed=["000000099"])
    cut = img2dataset_shard(wds / "00001.tar", [f"{i:09d}" for i in range(10, 20)])
    cut.write_bytes(cut.read_bytes()[: header_offsets(cut)["000000017.jpg"] + 1536 + 100])  # inside a picture
    out = tmp_path / "run"
    assert main(["train", "--set", f"data.pairs=['{wds / '00000.tar'}', '{cut}']", "--out", str(out), "--steps", "1",
                 "--batch-size", "4", "--set", "model.name=cj-tiny", "--set", "model.pretrained=none", "--set",
                 "data.workers=0", "--no-progress"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "data.pairs: skipped 00001.tar#damaged: the shard 00001.tar is damaged" in err
    assert "data.pairs: skipped 000000017: the shard 00001.tar is cut inside its member '000000017.jpg'" in err
    assert "data.pairs: skipped 000000099: no image: img2dataset could not download it (HTTP 404)" in err
    logged = [json.loads(line) for line in (out / "skipped_pairs.jsonl").read_text().splitlines()]
    skipped = {"000000017", "000000018", "000000019", "00001.tar#damaged", "000000099"}
    assert {r["id"] for r in logged} == skipped and all(r["reason"] for r in logged)
    assert "data.pairs: 5 of 22 samples skipped when read" in err  # 20 keys, a failed download, the damage report


@pytest.mark.processes
@pytest.mark.parametrize("flags, hidden, message", [
    (["--wandb", "cj-runs"], "wandb",
     "wandb.project cj-runs needs the wandb package: pip install 'concrete-jungle[wandb]' (or turn it off)"),
    (["--set", "tensorboard=true"], "tensorboard",
     "tensorboard: true needs the tensorboard package: pip install 'concrete-jungle[tensorboard]' (or turn it off)"),
])
def test_a_logger_whose_package_is_missing_is_one_line_naming_its_extra(planted, tmp_path, flags, hidden, message):
    """TensorBoard came only with the dev extras, and a config asking for it failed inside the run with an
    ImportError; Weights & Biases could not be asked for at all."""
    probe = (f"import sys; sys.modules[{hidden!r}] = None  # the package is not installed\n"
             "from concrete_jungle.cli import main; sys.exit(main(sys.argv[1:]))")
    args = ["train", "--data", str(planted), "--out", str(tmp_path / "run"), "--steps", "1", *TINY_TRAIN, *flags]
    result = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and " ".join(result.stderr.split()) == f"error: {message}", result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # ~25 s: wandb starts its own service process
@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is not installed (the wandb extra)")
def test_wandb_offline_logs_the_rows_of_metrics_jsonl(planted, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "run"
    assert main(["train", "--data", str(planted), "--out", str(out), "--steps", "2", *TINY_TRAIN, "--wandb",
                 "cj-test"]) == 0
    run_id = json.loads((out / "wandb_run.json").read_text())["id"]
    assert list((out / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))


def anchor_truths(i: int) -> list[bool | None]:
    """``anchor_true_of_negative`` of record i's two negative slots in `write_k_negative_set`."""
    return [{0: True, 1: False}.get(i % 4), {0: True, 2: False}.get(i % 5)]


def entailed_in_set(i: int, k: int) -> bool:
    """Whether slot k of record i's batch row says its anchor's caption is true of that negative (unknown: no)."""
    return k < (1 if i % 3 == 0 else 2) and anchor_truths(i)[k] is True


def write_k_negative_set(root: Path, n: int = 16, pictures: bool = True) -> Path:
    """A ConcreteBatch whose records hold one or two negatives, some of them captions without a picture (all of
    them without ``pictures``), with ``anchor_true_of_negative`` true, false or unknown (`entailed_in_set`)."""
    from PIL import Image

    from concrete_jungle.concretebatch import ShardWriter, encode_jpeg, sample_key, shard_name

    root.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    colours = (torch.rand(n, 3, 3, generator=g) * 255).int().tolist()
    writer = ShardWriter(root / shard_name(0))
    for i in range(n):
        anchor, negative, other = (encode_jpeg(Image.new("RGB", (40, 40), tuple(c))) for c in colours[i])
        k = 1 if i % 3 == 0 else 2
        ratings = [1.5 + i / n, 4.5 - i / n][:k]
        meta = {"id": f"s{i}", "concreteness": ratings[0],
                "negatives": [{"concreteness": r, "anchor_true_of_negative": truth}
                              for r, truth in zip(ratings, anchor_truths(i))]}
        more = [(other if pictures and i % 4 == 1 else None, f"a photo of thing {i} beside a box")] if k == 2 else []
        first = negative if pictures and i % 2 == 0 else None
        writer.write(sample_key(f"s{i}"), anchor, f"a photo of thing {i}", first, f"a drawing of thing {i}", meta, more)
    writer.commit()
    return root


def test_a_record_rated_infinitely_concrete_is_a_damaged_dataset_not_a_margin(tmp_path):
    """A record whose concreteness was inf trained (the margin schedule's end, without a word)."""
    from PIL import Image

    from concrete_jungle.concretebatch import IndexedConcreteBatch, ShardWriter, encode_jpeg, sample_key, shard_name
    from concrete_jungle.errors import DatasetError

    root = tmp_path / "cb"
    root.mkdir()
    writer = ShardWriter(root / shard_name(0))
    picture = encode_jpeg(Image.new("RGB", (40, 40), (10, 20, 30)))
    for i, rating in enumerate([3.5, float("inf"), None]):
        writer.write(sample_key(f"s{i}"), picture, f"a photo of thing {i}", picture, f"a drawing of thing {i}",
                     {"id": f"s{i}", "concreteness": rating})
    writer.commit()
    records = IndexedConcreteBatch([root])
    assert records[0]["concreteness"] == 3.5 and records[2]["concreteness"] != records[2]["concreteness"]  # NaN
    with pytest.raises(DatasetError, match=r"record 's1' has the concreteness rating inf in its json; a rating is a "
                                           r"finite number \(or null: not rated\): re-make the dataset"):
        records[1]


def test_k_negatives_with_missing_pictures_batch_alike_decoded_preloaded_and_cached_and_train(tmp_path):
    from concrete_jungle.concretebatch import IndexedConcreteBatch
    from concrete_jungle.train.data import PreloadedSet, TrainingSet
    from concrete_jungle.train.image_cache import CachedSet, build_cache

    data = write_k_negative_set(tmp_path / "k2")
    clip = load_model("cj-tiny", "none")
    decoded = TrainingSet([IndexedConcreteBatch([data])], clip.preprocess, clip.tokenizer)
    assert (decoded.k, decoded.pictures) == (2, 2)
    indices = [3, 0, 7, 10, 5, 12]
    reference = torch.utils.data.default_collate([decoded[i] for i in indices])
    image, neg_image, text, neg_text, c, has_negative, has_image, entailed, positives, has_positive = reference
    assert positives.shape[1] == has_positive.shape[1] == 0  # one positive per picture: P - 1 = 0
    assert has_negative.tolist() == [[True, i % 3 != 0] for i in indices]
    assert has_image.tolist() == [[i % 2 == 0, i % 4 == 1 and i % 3 != 0] for i in indices]
    assert entailed.tolist() == [[entailed_in_set(i, 0), entailed_in_set(i, 1)] for i in indices]
    assert entailed.any() and (entailed & ~has_image).any()  # a caption-only negative's truth is carried too
    assert c[~has_negative].eq(0).all() and neg_text[~has_negative].eq(0).all()
    assert neg_image[~has_image].eq(0).all() and not neg_image[has_image].eq(0).all()
    preloaded = PreloadedSet(decoded, progress=False).batch(indices)
    assert all(torch.equal(a, b) for a, b in zip(preloaded, reference))
    cached = CachedSet([build_cache(data, clip, progress=False)])
    got = cached.batch(indices)
    assert torch.equal(cached.normalize(got[0]), image)
    assert torch.equal(cached.normalize(got[1][has_image]), neg_image[has_image])
    assert all(torch.equal(a, b) for a, b in zip(got[2:], reference[2:]))  # anchor_true_of_negative included
    cfg = config(tmp_path, data, "steps=4", "batch_size=4", "loss.mask_entailed=true")
    train(cfg, progress=False)
    rows = metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and all(r["loss"] > 0 for r in rows)


@pytest.fixture(scope="module")
def k_negative_set(tmp_path_factory):
    return write_k_negative_set(tmp_path_factory.mktemp("k") / "k2")


@pytest.mark.parametrize("loss", ["negclip", "tripletclip", "ce_clip", "fsc_clip", "degla"])
def test_each_peer_loss_trains_on_k_negatives_and_resumes_bitwise(tmp_path, k_negative_set, loss):
    """Three steps straight, and two steps then a resume for the third: the same weights bit for bit (DeGLA's EMA
    teacher is kept with the checkpoint, FSC-CLIP's token features come from the same forward)."""
    straight = config(tmp_path / "straight", k_negative_set, f"loss.name={loss}", "steps=3", "batch_size=4")
    train(straight, progress=False)
    resumed = config(tmp_path / "resumed", k_negative_set, f"loss.name={loss}", "steps=3", "batch_size=4")
    train(resumed, progress=False, stop_at=2)
    train(resumed, resume="latest", progress=False)
    final = "checkpoints/step-0000003/open_clip_model.safetensors"
    a, b = load_file(tmp_path / "straight" / "run" / final), load_file(tmp_path / "resumed" / "run" / final)
    assert all(torch.equal(a[k], b[k]) for k in a)
    rows = metrics(tmp_path / "straight" / "run")
    assert [r["step"] for r in rows] == [1, 2, 3] and any(k.startswith(f"{loss}/") for k in rows[0])
    # the loss's own running state (CE-CLIP's thresholds) resumes too: the third step logs the same terms
    again = metrics(tmp_path / "resumed" / "run")
    assert [{k: v for k, v in r.items() if k != "samples_per_s"} for r in again] == \
        [{k: v for k, v in r.items() if k != "samples_per_s"} for r in rows]


@pytest.mark.parametrize("loss, reads", [("ce_clip", False), ("fsc_clip", False), ("degla", False),
                                         ("negclip", True), ("tripletclip", True), ("cement", True)])
def test_a_loss_that_reads_no_negative_picture_gets_none_decoded_or_cached(tmp_path, loss, reads):
    """CE-CLIP, FSC-CLIP and DeGLA read no negative picture: a set that has them serves none (P = 0), decoded or
    from its cache, so none is decoded, gathered or encoded; the other losses get them."""
    from concrete_jungle.train.config import reads_negative_images
    from concrete_jungle.train.data import source_set
    from concrete_jungle.train.image_cache import CachedSet, build_cache

    data = write_k_negative_set(tmp_path / "k2")  # its own: the cache built here would serve other tests
    config_ = config(tmp_path, data, f"loss.name={loss}")
    assert reads_negative_images(config_.loss) is reads
    clip = load_model("cj-tiny", "none")
    decoded = source_set(config_.data, clip, negative_images=reads)
    assert decoded.negative_pictures and decoded.pictures == (2 if reads else 0)
    batch = torch.utils.data.default_collate([decoded[i] for i in range(8)])
    assert batch[1].shape[1] == decoded.pictures and bool(batch[6].any()) is reads
    cached = CachedSet([build_cache(data, clip, progress=False)], negative_images=reads)
    got = cached.batch(list(range(8)))
    assert got[1].shape[1] == cached.pictures == decoded.pictures and torch.equal(got[6], batch[6])
    assert torch.equal(got[5], batch[5])


def test_tripletclip_on_captions_only_data_is_refused_unless_allowed(tmp_path, capsys):
    """Without a single negative picture TripletCLIP's negative-pairs half is empty: NegCLIP's first version under
    TripletCLIP's name, refused before any step unless allow_caption_only says it is meant."""
    data = write_k_negative_set(tmp_path / "captions", pictures=False)
    with pytest.raises(ConfigError, match="loss.name tripletclip on data whose negatives have no picture"):
        train(config(tmp_path, data, "loss.name=tripletclip", "steps=1", "batch_size=4"), progress=False)
    assert not (tmp_path / "run" / "checkpoints").exists()
    train(config(tmp_path, data, "loss.name=tripletclip", "loss.tripletclip.allow_caption_only=true", "steps=1",
                 "batch_size=4"), progress=False)
    assert [r["step"] for r in metrics(tmp_path / "run")] == [1]
