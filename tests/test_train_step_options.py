"""One training step of every loss (`train.loop.Run.step`, the trainer's own) under each precision, memory and speed
option the trainer has: bf16 autocast (``model.precision: amp_bf16``), gradient checkpointing
(``model.grad_checkpointing``: open_clip's ``set_grad_checkpointing``) and ``model.compile`` (torch.compile). Each
is checked to be in effect, finite, and the eager fp32 step's loss and gradients within a stated tolerance."""

import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from concrete_jungle.train.config import load_config
from concrete_jungle.train.data import EpochBatches, epoch_batches
from concrete_jungle.train.loop import Run

sys.path.insert(0, str(Path(__file__).parent))
from test_train import write_k_negative_set  # noqa: E402

LOSSES = ("negclip", "tripletclip", "ce_clip", "fsc_clip", "degla", "cement")
# (loss, gradients) relative to the eager step's, |a - b| / |b| over every parameter's gradient at once. Measured on
# this set (cj-tiny, 4 anchors with 1-2 negatives, some with pictures): bf16 0.20-0.52 % on the loss and 1.5-1.9 % on
# the gradients; gradient checkpointing recomputes the same operations (0 measured); compile 0-1.1e-7 on the loss
# and 0.8-1.35e-6 on the gradients (inductor's fused kernels sum in another order)
TOLERANCES = {"bf16": (2e-2, 5e-2), "grad_checkpointing": (1e-6, 1e-6), "compile": (1e-5, 1e-5)}
OVERRIDES = {"grad_checkpointing": ["model.grad_checkpointing=true"], "compile": ["model.compile=true"]}


@dataclass
class Step:
    loss: float
    grads: dict[str, torch.Tensor]
    block_calls: int  # forwards of the image tower's first block, backward's recomputation included
    block_dtype: torch.dtype | None
    warnings: list[str]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_k_negative_set(tmp_path_factory.mktemp("k") / "k2")


def first_step(out: Path, data: Path, loss: str, option: str | None = None) -> Step:
    """The run's first step on its first batch, as `Run.loop` takes it."""
    from torch._dynamo.utils import counters

    config = load_config(None, [f"out={out}", "model.name=cj-tiny", "model.pretrained=none", "model.precision=fp32",
                                f"data.concretebatch=['{data}']", "data.workers=0", "optim.lr=0.002",
                                "optim.warmup=1", "batch_size=4", "steps=1", "save_every=0", f"loss.name={loss}",
                                *OVERRIDES.get(option, [])])
    run = Run(config, progress=False)
    run.set_up()
    run.prepare()
    if option == "bf16":  # what prepare sets on CUDA under amp_bf16; on the CPU the same region runs in bf16
        run.autocast = True
    calls, dtypes = [], []
    block = run.model.visual.transformer.resblocks[0]
    # hooks inside a compiled forward would be traced into its graph: compile shows itself by its graphs instead.
    # Calls are counted as they begin: the backward's recomputation stops at the block's last saved activation
    hooks = [] if option == "compile" else [block.register_forward_pre_hook(lambda m, i: calls.append(1)),
                                            block.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))]
    if option == "compile":  # forget the graphs an earlier run's forward made, so that this one is compiled
        torch._dynamo.reset()
    counters.clear()
    batch = next(iter(epoch_batches(run.dataset, EpochBatches(len(run.dataset), 4, 0, 1, config.seed, 0, 0), 0,
                                    pin_memory=False)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        row = run.step(batch, time.perf_counter())
    for hook in hooks:
        hook.remove()
    if option == "compile":
        assert counters["stats"]["unique_graphs"] > 0, "model.compile compiled nothing"
    grads = {n: p.grad.clone() for n, p in run.model.named_parameters() if p.grad is not None}
    return Step(row["loss"], grads, len(calls), dtypes[0] if dtypes else None, [str(w.message) for w in caught])


@pytest.fixture(scope="module")
def eager(data, tmp_path_factory):
    """The eager fp32 step of each loss, made once."""
    made = {}

    def step(loss: str) -> Step:
        if loss not in made:
            made[loss] = first_step(tmp_path_factory.mktemp(f"eager-{loss}"), data, loss)
        return made[loss]
    return step


def relative(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    difference = sum(float((a[k].double() - b[k].double()).pow(2).sum()) for k in b)
    return math.sqrt(difference / sum(float(b[k].double().pow(2).sum()) for k in b))


@pytest.mark.parametrize("option", ["bf16", "grad_checkpointing",
                                    pytest.param("compile", marks=pytest.mark.slow)])  # compile: 40-330 s a loss
@pytest.mark.parametrize("loss", LOSSES)
def test_one_step_of_each_loss_under_an_option_is_in_effect_finite_and_the_eager_step_s(tmp_path, data, eager, loss,
                                                                                       option):
    reference, step = eager(loss), first_step(tmp_path, data, loss, option)
    assert reference.block_dtype == torch.float32 and reference.block_calls == 1
    if option == "bf16":
        assert step.block_dtype == torch.bfloat16  # the towers ran under autocast
    if option == "grad_checkpointing":
        assert step.block_calls == 2  # the block ran again in the backward: its activations were not kept
    assert math.isfinite(step.loss) and all(bool(torch.isfinite(g).all()) for g in step.grads.values())
    # features rounded to bf16 are unit vectors to 5e-3: no loss may take them for unnormalised ones
    assert not [w for w in step.warnings if "not L2-normalised" in w]
    loss_tolerance, grad_tolerance = TOLERANCES[option]
    assert abs(step.loss - reference.loss) <= loss_tolerance * abs(reference.loss)
    assert relative(step.grads, reference.grads) <= grad_tolerance
