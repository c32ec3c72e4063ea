"""What a training run keeps between steps and across a restart: the optimizer's parameter groups, the learning
rate as a pure function of the step, and the trainer state of a checkpoint (optimizer tensors and RNG in
safetensors, the rest in JSON: no pickles)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import torch

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


def load_trainer_state(directory: Path, optimizer: torch.optim.Optimizer) -> dict:
    from safetensors.torch import load_file

    tensors = load_file(str(directory / "trainer_state.safetensors"))
    meta = json.loads((directory / "trainer_state.json").read_text())
    state: dict = {}
    for key, v in tensors.items():
        if key.startswith("optimizer."):
            _, pid, k = key.split(".", 2)
            state.setdefault(int(pid), {})[k] = v
    for key, v in meta["optimizer_scalars"].items():
        pid, k = key.split(".", 1)
        state.setdefault(int(pid), {})[k] = v
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    torch.set_rng_state(tensors["rng.torch"])
    cuda = [tensors[k] for k in sorted(t for t in tensors if t.startswith("rng.cuda."))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    v, s, g = meta["rng_python"]
    random.setstate((v, tuple(s), g))
    return meta["position"]
