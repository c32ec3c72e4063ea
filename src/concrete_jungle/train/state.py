"""What a training run keeps between steps and across a restart: the optimizer's parameter groups, the learning
rate as a pure function of the step, and the trainer state of a checkpoint (optimizer tensors and RNG in
safetensors, the rest in JSON: no pickles)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import torch

from ..errors import TrainingError
from ..records import atomic_write_safetensors, atomic_write_text
from .config import OptimConfig


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """open_clip's rule: no weight decay on gains, biases, norms and the logit scale."""
    exclude = lambda n, p: p.ndim < 2 or "bn" in n or "ln" in n or "bias" in n or "logit_scale" in n  # noqa: E731
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [{"params": [p for n, p in named if exclude(n, p)], "weight_decay": 0.0},
            {"params": [p for n, p in named if not exclude(n, p)], "weight_decay": weight_decay}]


def lr_at(step: int, total: int, config: OptimConfig) -> float:
    """Linear warmup then cosine decay to 0 (open_clip's cosine_lr), as a pure function of the step."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, total - config.warmup)
    return 0.5 * (1 + math.cos(math.pi * progress)) * config.lr


def save_trainer_state(directory: Path, optimizer: torch.optim.Optimizer, position: dict) -> None:
    """Optimizer tensors and RNG state as safetensors, everything else as JSON: no pickles."""
    tensors, scalars = {}, {}
    state = optimizer.state_dict()
    for pid, values in state["state"].items():
        for k, v in values.items():
            if torch.is_tensor(v):
                tensors[f"optimizer.{pid}.{k}"] = v.contiguous()
            else:
                scalars[f"{pid}.{k}"] = v
    tensors["rng.torch"] = torch.get_rng_state()
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    atomic_write_safetensors(directory / "trainer_state.safetensors", tensors)
    py_state = random.getstate()
    atomic_write_text(directory / "trainer_state.json", json.dumps({
        "position": position, "param_groups": state["param_groups"], "optimizer_scalars": scalars,
        "rng_python": [py_state[0], list(py_state[1]), py_state[2]],
    }, indent=1))


def load_trainer_state(directory: Path, optimizer: torch.optim.Optimizer, fix: str) -> dict:
    """Restore the optimizer and the RNGs saved in ``directory``; the data position. A file cut short or damaged
    is a `TrainingError` naming it, with ``fix`` (what to do instead), before any state is changed."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    tensors_file, meta_file = directory / "trainer_state.safetensors", directory / "trainer_state.json"
    try:
        tensors = load_file(str(tensors_file))
    except (SafetensorError, OSError) as e:
        raise TrainingError(f"{tensors_file} is damaged ({e}); {fix}") from None
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        position = {k: int(meta["position"][k]) for k in ("step", "epoch", "step_in_epoch")}
        state: dict = {}
        for key, v in meta["optimizer_scalars"].items():
            pid, k = key.split(".", 1)
            state.setdefault(int(pid), {})[k] = v
        v, s, g = meta["rng_python"]
        python_rng = (v, tuple(s), g)
        random.Random().setstate(python_rng)  # a state Python refuses is refused here, before any is restored
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as e:
        raise TrainingError(f"{meta_file} is damaged ({type(e).__name__}: {e}); {fix}") from None
    for key, v in tensors.items():
        if key.startswith("optimizer."):
            _, pid, k = key.split(".", 2)
            state.setdefault(int(pid), {})[k] = v
    if "rng.torch" not in tensors:
        raise TrainingError(f"{tensors_file} holds no RNG state (rng.torch); {fix}")
    try:
        optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    except (KeyError, TypeError, ValueError) as e:
        raise TrainingError(f"{meta_file} does not match the optimizer of this model ({e}); {fix}") from None
    torch.set_rng_state(tensors["rng.torch"])
    cuda = [tensors[k] for k in sorted(t for t in tensors if t.startswith("rng.cuda."))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    random.setstate(python_rng)
    return position


def how_to_continue(ckpt_root: Path) -> str:
    """What a user can do next with the run whose checkpoints are in ``ckpt_root``, in words: an unfinished run
    resumes; a finished one has no optimizer state in its final checkpoint (unless ``keep_final_state``), so
    `--resume latest` would fail there and the ways to train further are named instead."""
    try:
        latest = json.loads((ckpt_root / "latest.json").read_text(encoding="utf-8"))
        name, reason = latest["name"], latest.get("reason")
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        return "continue it with --resume latest, start it over with --overwrite, or choose another --out"
    if reason != "final":
        return "continue it with --resume latest, start it over with --overwrite, or choose another --out"
    final = ckpt_root / name
    if (final / "trainer_state.json").is_file():  # kept by keep_final_state: the run can go on
        return (f"the run is complete ({name}, kept with its optimizer state); train further with a larger --steps "
                "and --resume latest, start it over with --overwrite, or choose another --out")
    earlier = sorted(p.name for p in ckpt_root.glob("step-*") if (p / "trainer_state.json").is_file())
    return (f"the run is complete ({name} holds its final weights, without the optimizer state a resume needs); "
            f"to train further, start a new run from its weights (--checkpoint {final} and another --out), "
            + (f"resume an earlier checkpoint with a larger --steps (--resume {ckpt_root / earlier[-1]}), "
               if earlier else "")
            + "or run it again with keep_final_state: true (--set keep_final_state=true --overwrite) to keep a "
            "finished run resumable")
