"""Training regimes (`train.regime`, `train.lora`): LoRA adapters merged into plain open_clip weights, frozen parts
left bitwise as they were, an optimizer that holds the trained parameters alone, resume and data parallel."""

import json
import os
import socket
import subprocess
import sys

import open_clip
import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from concrete_jungle.configs import ConfigError
from concrete_jungle.errors import TrainingError
from concrete_jungle.models import load_model, save_checkpoint
from concrete_jungle.train import lora
from concrete_jungle.train.config import RegimeConfig, load_config
from concrete_jungle.train.loop import Run, train
from concrete_jungle.train.regime import ADAPTERS_FILE, Regime

LORA = ["regime.lora.rank=4", "regime.lora.alpha=8", "regime.lora.dropout=0.1"]


def config(out, data, *overrides):
    return load_config(None, [f"out={out}", "model.name=cj-tiny", "model.pretrained=none", "model.precision=fp32",
                              f"data.concretebatch=['{data}']", "data.workers=0", "optim.lr=0.01",
                              "optim.warmup=1", "batch_size=8", "steps=4", "save_every=2", *overrides])


def trained(cfg, resume=None, stop_at=None) -> Run:
    steps = Run(cfg, progress=False)
    steps.set_up()
    steps.resume(resume)
    steps.prepare()
    steps.open_logs()
    steps.loop(stop_at)
    return steps


def start_weights() -> dict[str, torch.Tensor]:
    """The weights every run here starts from (cj-tiny, random init, seed 0)."""
    return {k: v.clone() for k, v in load_model("cj-tiny", "none", seed=0).model.state_dict().items()}


def checkpoint(out, step: int):
    return out / "checkpoints" / f"step-{step:07d}"


def optimizer_holds_only(steps: Run, names: set[str]) -> None:
    params = dict(steps.model.named_parameters())
    held = {id(p) for g in steps.optimizer.param_groups for p in g["params"]}
    assert held == {id(params[n]) for n in names}
    assert {id(p) for p in steps.optimizer.state} == held  # every trained parameter has its Adam moments
    saved = load_file(checkpoint(steps.out, 2) / "trainer_state.safetensors")
    assert {k.split(".")[1] for k in saved if k.startswith("optimizer.")} == {str(i) for i in range(len(names))}


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("mask", ["causal", "boolean", None])
def test_lora_attention_and_mlp_equal_their_merged_open_clip_modules(batch_first, mask):
    torch.manual_seed(0)
    block = open_clip.transformer.ResidualAttentionBlock(32, 4, batch_first=batch_first).eval()
    x = torch.randn(3, 5, 32) if batch_first else torch.randn(5, 3, 32)
    causal = torch.full((5, 5), float("-inf")).triu(1)
    attn_mask = {"causal": causal, "boolean": causal.isinf(), None: None}[mask]
    with torch.no_grad():
        before = block(x, attn_mask=attn_mask)
        lora.adapt_block(block, ["attn", "mlp"], rank=2, alpha=4.0, dropout=0.5)
        torch.testing.assert_close(block(x, attn_mask=attn_mask), before, atol=1e-6, rtol=0)  # B = 0: the base
        for name, p in block.named_parameters():
            if name.endswith(".up"):  # trained adapters: B is zero only at the start
                p.normal_(0, 0.3)
        plain = lora.merged(block)
        adapted, merged = block(x, attn_mask=attn_mask), plain(x, attn_mask=attn_mask)
    assert type(plain.attn) is nn.MultiheadAttention and type(plain.mlp.c_fc) is nn.Linear
    assert set(plain.state_dict()) == set(open_clip.transformer.ResidualAttentionBlock(32, 4).state_dict())
    torch.testing.assert_close(adapted, merged, atol=1e-5, rtol=0)
    assert (merged - before).abs().max() > 0.1
    block.train()  # dropout on the adapters' inputs: two passes differ
    assert not torch.equal(block(x, attn_mask=attn_mask), block(x, attn_mask=attn_mask))


@pytest.fixture(scope="module")
def lora_run(planted, tmp_path_factory) -> Run:
    return trained(config(tmp_path_factory.mktemp("lora") / "run", planted, *LORA))


def test_lora_trains_the_adapters_alone_and_its_checkpoint_loads_as_the_merged_model(lora_run):
    start = start_weights()
    base = lora.base_state(lora_run.model)
    assert base.keys() == start.keys() and all(torch.equal(base[k], start[k]) for k in start)
    adapters = lora.adapter_state(lora_run.model)
    assert adapters and all(not k.endswith(".up") or v.abs().max() > 0 for k, v in adapters.items())
    optimizer_holds_only(lora_run, {n for n, p in lora_run.model.named_parameters() if ".lora_" in n})

    final = checkpoint(lora_run.out, 4)
    saved = load_file(final / ADAPTERS_FILE)
    assert saved.keys() == adapters.keys() and all(torch.equal(saved[k], adapters[k]) for k in saved)
    plain, _, _ = open_clip.create_model_and_transforms(f"local-dir:{final}")  # plain open_clip: no adapters
    ours = load_model(checkpoint=final).model
    images, texts = torch.randn(4, 3, 64, 64), torch.randint(1, 49000, (4, 77))
    lora_run.model.eval()
    with torch.no_grad():
        want = lora_run.model.encode_image(images, normalize=True), lora_run.model.encode_text(texts, normalize=True)
        for model in (plain.eval(), ours):
            got = model.encode_image(images, normalize=True), model.encode_text(texts, normalize=True)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, atol=1e-5, rtol=0)
        start_model = load_model("cj-tiny", "none", seed=0).model
        assert (start_model.encode_image(images, normalize=True) - want[0]).abs().max() > 1e-3  # it did train


def test_lora_resumes_bitwise_and_refuses_adapters_of_other_weights(lora_run, tmp_path, planted):
    trained(config(tmp_path / "b", planted, *LORA), stop_at=2)
    trained(config(tmp_path / "b", planted, *LORA), resume="latest")
    for name in ("open_clip_model.safetensors", ADAPTERS_FILE):
        a, b = (load_file(checkpoint(out, 4) / name) for out in (lora_run.out, tmp_path / "b"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    other = load_model("cj-tiny", "none", seed=1).model
    regime = Regime(other, config(tmp_path / "c", planted, *LORA).regime)
    with pytest.raises(TrainingError, match=r"adapts other weights \(sha256 [0-9a-f]{64}\) than this run's model"):
        regime.load(checkpoint(lora_run.out, 2), "start over")
    assert all(v.abs().max() == 0 for k, v in lora.adapter_state(other).items() if k.endswith(".up"))
    with pytest.raises(ConfigError, match=r"regime.lora.rank 4 -> 8"):
        train(config(tmp_path / "b", planted, "regime.lora.rank=8", "steps=6"), resume="latest", progress=False)


@pytest.mark.parametrize("freeze, frozen", [
    (["regime.freeze.image=true"], lambda n: n.startswith("visual.")),
    (["regime.freeze.text=true", "regime.freeze.logit_scale=true"], lambda n: not n.startswith("visual.")),
    (["regime.freeze.image_blocks=1", "regime.freeze.text_blocks=2"],
     lambda n: n.split(".")[0] in ("token_embedding", "positional_embedding")
     or n.startswith(("visual.conv1.", "visual.class_embedding", "visual.positional_embedding", "visual.ln_pre.",
                      "visual.transformer.resblocks.0.", "transformer.resblocks."))),
])
def test_frozen_parts_stay_bitwise_and_the_optimizer_holds_the_trained_parameters_alone(tmp_path, planted, freeze,
                                                                                         frozen):
    # the start has OpenAI's logit scale, 4.6052: above log(100) in float32, where training clamps a trained one
    start = start_weights()
    start["logit_scale"].fill_(4.6052)
    model = load_model("cj-tiny", "none").model
    model.load_state_dict(start)
    save_checkpoint(tmp_path / "start", model, load_model("cj-tiny", "none").config)
    steps = trained(config(tmp_path / "run", planted, f"model.checkpoint={tmp_path / 'start'}", *freeze))
    now = steps.model.state_dict()
    names = {n for n, _ in steps.model.named_parameters()}
    assert {n for n in names if frozen(n)} == {n for n, p in steps.model.named_parameters() if not p.requires_grad}
    assert all(torch.equal(now[n], start[n]) for n in names if frozen(n))
    assert all(not torch.equal(now[n], start[n]) for n in names if not frozen(n) and now[n].ndim >= 2)
    optimizer_holds_only(steps, {n for n in names if not frozen(n)})


@pytest.mark.parametrize("overrides, match", [
    (["regime.freeze.image_blocks=3"], "regime.freeze.image_blocks 3 is more than the 2 blocks of the image tower"),
    ([*LORA, "regime.freeze.text=true"], "regime.freeze has nothing to add"),
    (["regime.lora.rank=2", "regime.lora.modules=[qkv]"], "regime.lora.modules 'qkv' is not one of attn, mlp"),
])
def test_a_regime_that_cannot_be_is_refused_before_any_step(tmp_path, planted, overrides, match):
    with pytest.raises(ConfigError, match=match):
        train(config(tmp_path / "run", planted, *overrides), progress=False)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_the_default_regime_trains_every_weight():
    model = load_model("cj-tiny", "none").model
    assert Regime(model, RegimeConfig()).describe() == "" and all(p.requires_grad for p in model.parameters())


@pytest.mark.slow  # ~60 s: two runs under torchrun
@pytest.mark.parametrize("regime", [LORA[:2],  # without dropout: each process draws its own masks
                                    ["regime.freeze.image_blocks=1", "regime.freeze.logit_scale=true"]])
def test_two_process_torchrun_trains_a_regime_as_one_process(tmp_path, planted, regime):
    args = ["train", "--no-progress", "--data", str(planted), "--batch-size", "8", "--steps", "3"]
    # the learning rate of tests/test_train.py's torchrun test: Adam's steps on near-zero gradients amplify the
    # rounding differences of the gradients' all-reduce
    sets = ["model.name=cj-tiny", "model.pretrained=none", "model.precision=fp32", "data.workers=0", "optim.lr=0.002",
            "optim.warmup=1", "save_every=0", *regime]
    args += [x for s in sets for x in ("--set", s)]
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path / "tmp")}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launchers = {"one": [sys.executable, "-m", "concrete_jungle.cli"],
                 "two": [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
                         "127.0.0.1", "--master_port", str(port), "-m", "concrete_jungle.cli"]}
    for name, launcher in launchers.items():
        done = subprocess.run([*launcher, *args, "--out", str(tmp_path / name)], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "regime: " in done.stderr
    a, b = (load_file(checkpoint(tmp_path / name, 3) / "open_clip_model.safetensors") for name in ("one", "two"))
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=2e-5, rtol=1e-4)
    assert json.loads((tmp_path / "two" / "config.json").read_text())["regime"] == \
        json.loads((tmp_path / "one" / "config.json").read_text())["regime"]
