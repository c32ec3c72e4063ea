"""An exponential-moving-average teacher: a frozen copy of the model that follows it slowly (DeGLA's
self-distillation, `concrete_jungle.loss.degla`).

After each optimizer step, every parameter of the teacher becomes ``d * teacher + (1 - d) * model`` (DeGLA:
``src/training/train.py``, ``update_teacher_ema``, d = 0.9996); d = 1 keeps the starting model. Parameters only,
as DeGLA: buffers (a CLIP's causal mask) stay as copied. The teacher never trains (no gradient, eval mode), and
its state is the teacher's tensors in one safetensors file, so that a resumed run continues the same average.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from ..errors import TrainingError
from ..records import atomic_write_safetensors


class EmaTeacher:
    """``EmaTeacher(model, decay)``: a deep copy of ``model``, frozen; ``update(model)`` after each step;
    ``teacher.model(...)`` gives its features; ``save(path)`` / ``load(path)`` for checkpoints."""

    def __init__(self, model: nn.Module, decay: float):
        if not 0 <= decay <= 1:
            raise ValueError(f"EMA decay must be in [0, 1] (1: a frozen teacher), got {decay}")
        self.decay = decay
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        self.updates = 0

    def _pairs(self, model: nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The teacher's parameters and the model's, matched by name (the model unwrapped from DDP or compile)."""
        student = dict(model.named_parameters())
        teacher = dict(self.model.named_parameters())
        if student.keys() != teacher.keys():
            missing, extra = sorted(teacher.keys() - student.keys()), sorted(student.keys() - teacher.keys())
            raise ValueError(f"the model's parameters are not the teacher's (missing {missing[:3]}, extra "
                             f"{extra[:3]}); pass the module the teacher was copied from, unwrapped from DDP and "
                             "torch.compile (model.module, model._orig_mod)")
        return [teacher[k] for k in teacher], [student[k].detach() for k in teacher]

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """teacher <- decay * teacher + (1 - decay) * model, for every parameter."""
        teacher, student = self._pairs(model)
        torch._foreach_mul_(teacher, self.decay)
        torch._foreach_add_(teacher, student, alpha=1 - self.decay)
        self.updates += 1

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The teacher's tensors (its ``state_dict``) and the number of updates made."""
        return dict(self.model.state_dict()) | {"ema.updates": torch.tensor(self.updates, dtype=torch.long)}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        state = dict(state)
        updates = state.pop("ema.updates", None)
        if updates is None:
            raise ValueError("an EMA teacher state holds ema.updates; this one does not (is it a model checkpoint?)")
        own = self.model.state_dict()
        differing = sorted(k for k in own.keys() | state.keys() if k not in own or k not in state
                           or own[k].shape != state[k].shape)
        if differing:  # checked before anything is copied: a foreign state leaves the teacher as it was
            raise ValueError(f"the state's tensors are not the teacher's: {differing[:3]} differ")
        self.model.load_state_dict(state)
        self.updates = int(updates)

    def save(self, path: str | Path) -> None:
        """The state as a safetensors file, written atomically."""
        atomic_write_safetensors(path, {k: v.detach().cpu() for k, v in self.state_dict().items()})

    def load(self, path: str | Path) -> None:
        """The state saved by `save`; a damaged or foreign file is a `TrainingError` naming it, before any change."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            state = load_file(str(path))
        except (SafetensorError, OSError) as e:
            raise TrainingError(f"{path} is damaged ({e}); resume from an earlier checkpoint") from None
        device = next(self.model.parameters()).device
        try:
            self.load_state_dict({k: v.to(device) for k, v in state.items()})
        except (RuntimeError, ValueError) as e:
            raise TrainingError(f"{path} is not the EMA teacher of this model ({e}); resume from a checkpoint of "
                                "this run") from None
