"""What a step optimises: the configured loss (Cement with a margin schedule, or one of the field's, `loss.LOSSES`)
and the inputs beyond the pooled features that it reads (its ``needs``): patch and token features from a forward
that returns them (FSC-CLIP's local loss, `token_features`), and an EMA teacher's features (DeGLA, `ema`), the
teacher kept beside each checkpoint so that a resumed run continues the same average.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ..loss import LOSSES, CementLoss
from ..loss.options import LOSS_SCHEDULES
from .config import LossConfig, reads_negative_images
from .ema import EmaTeacher

TOKEN_EXTRAS = frozenset({"image_tokens", "text_tokens", "text_token_mask"})
TEACHER_EXTRAS = frozenset({"teacher_image_features", "teacher_text_features"})
# the picture's other positive captions (`data.Batch`): encoded, in the same forward as the batch's captions, only
# for a loss that reads them
POSITIVE_EXTRAS = frozenset({"positive_text_features", "has_positive"})
TEACHER_FILE = "ema_teacher.safetensors"  # in a checkpoint's folder, beside the trainer state
LOSS_STATE_FILE = "loss_state.safetensors"  # a loss's own running state (CE-CLIP's adaptive thresholds)


def make_loss(loss: LossConfig, rank: int = 0, world_size: int = 1) -> nn.Module:
    """The loss module a config names, set up for data parallelism like open_clip's ClipLoss."""
    parallel = {"local_loss": loss.local_loss, "gather_with_grad": loss.gather_with_grad, "rank": rank,
                "world_size": world_size, "mask_entailed": loss.mask_entailed}
    if loss.name in LOSS_SCHEDULES:
        schedule = LOSS_SCHEDULES[loss.name]
        params = {"none": {}, "static": {"value": loss.static_margin}}.get(
            schedule, {"m_min": loss.m_min, "m_max": loss.m_max, "center": loss.center, "tau": loss.tau})
        return CementLoss(schedule, **parallel, **params)
    cls, _ = LOSSES[loss.name]
    return cls(getattr(loss, loss.name), **parallel)


def unused_data(loss: LossConfig, stored) -> list[str]:
    """One line per part of a training set the loss does not read (and the run therefore neither decodes nor
    encodes): negative pictures, a picture's positive captions beyond the first."""
    notes = []
    if stored.negative_pictures and not reads_negative_images(loss):
        notes.append(f"data: loss {loss.name} reads no negative picture: the set's are neither decoded nor encoded")
    if getattr(stored, "p", 1) > 1 and not (loss.name in LOSSES and POSITIVE_EXTRAS <= LOSSES[loss.name][0].needs):
        notes.append(f"data: loss {loss.name} reads one caption per picture: the set's other positives (up to "
                     f"{stored.p - 1} a picture) are not encoded")
    return notes


class TokenCLIP(nn.Module):
    """open_clip's forward (normalised pooled features, exp(logit_scale)) with the patch and token features a loss
    reads, from the same pass (`token_features`); DDP wraps it as it wraps the model."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor, texts: torch.Tensor):
        from ..models.token_features import token_features

        features = token_features(self.model, images, texts)
        tokens = {k: features[k] for k in TOKEN_EXTRAS}
        return features["image_features"], features["text_features"], self.model.logit_scale.exp(), tokens


class Objective:
    """The loss and what it needs: ``forward(model)`` wraps the model when the loss reads token features,
    ``teacher`` is the EMA teacher when it reads a teacher's features (None otherwise)."""

    def __init__(self, loss: LossConfig, model: nn.Module, rank: int = 0, world_size: int = 1):
        self.loss_fn = make_loss(loss, rank, world_size)
        self.needs = frozenset(getattr(self.loss_fn, "needs", frozenset()))
        decay = getattr(getattr(loss, loss.name, None), "ema_decay", 1.0)
        self.teacher = EmaTeacher(model, decay) if self.needs & TEACHER_EXTRAS else None

    @property
    def reads_tokens(self) -> bool:
        return bool(self.needs & TOKEN_EXTRAS)

    def forward(self, model: nn.Module) -> nn.Module:
        return TokenCLIP(model) if self.reads_tokens else model

    def save(self, directory: Path) -> None:
        from ..records import atomic_write_safetensors

        if self.teacher is not None:
            self.teacher.save(directory / TEACHER_FILE)
        state = self.loss_fn.state_dict()
        if state:
            atomic_write_safetensors(directory / LOSS_STATE_FILE, {k: v.detach().cpu() for k, v in state.items()})

    def load(self, directory: Path) -> None:
        """The loss state and the teacher a checkpoint kept; a run resumed from one without a teacher (another
        loss) starts its teacher from the checkpoint's weights, and says so."""
        if self.loss_fn.state_dict():
            from safetensors import SafetensorError
            from safetensors.torch import load_file

            from ..errors import TrainingError

            path = directory / LOSS_STATE_FILE
            try:
                self.loss_fn.load_state_dict(load_file(str(path)))
            except (OSError, RuntimeError, ValueError, SafetensorError) as e:
                raise TrainingError(f"{path} cannot be read into the run's loss ({' '.join(str(e).split())[:200]}); "
                                    "resume from an earlier checkpoint or start over with --overwrite") from None
        if self.teacher is None:
            return
        path = directory / TEACHER_FILE
        if path.is_file():
            self.teacher.load(path)
        else:
            import sys

            print(f"note: {directory} keeps no EMA teacher ({TEACHER_FILE}); the teacher starts from its weights",
                  file=sys.stderr)


def placed(values: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The values of the rows that exist, put at their places among all ``len(rows)`` rows (zeros elsewhere,
    which the losses mask); the values themselves when every row exists."""
    if bool(rows.all()):
        return values
    return values.new_zeros(len(rows), *values.shape[1:]).index_copy(0, torch.nonzero(rows).squeeze(1), values)


def extras(needs: frozenset, outputs: tuple, teacher: EmaTeacher | None, images: torch.Tensor, texts: torch.Tensor,
           image_rows: torch.Tensor, text_rows: torch.Tensor) -> dict[str, torch.Tensor]:
    """The inputs beyond the pooled features a loss ``needs``, at the layout's rows: the token features the forward
    returned (`TokenCLIP`), the teacher's features of the same pictures and captions (no gradient)."""
    out = {}
    if needs & TOKEN_EXTRAS:
        tokens = outputs[3]
        out["image_tokens"] = placed(tokens["image_tokens"].float(), image_rows)
        out["text_tokens"] = placed(tokens["text_tokens"].float(), text_rows)
        out["text_token_mask"] = placed(tokens["text_token_mask"], text_rows)
    if needs & TEACHER_EXTRAS:
        with torch.no_grad():
            out["teacher_image_features"] = placed(teacher.model.encode_image(images, normalize=True).float(),
                                                   image_rows)
            out["teacher_text_features"] = placed(teacher.model.encode_text(texts, normalize=True).float(), text_rows)
    return out


class Positives:
    """The other positive captions of a batch (`data.Batch`'s last two fields) for a loss that reads them
    (``needs`` holds `POSITIVE_EXTRAS`): `tokens` appends those that exist to the step's captions, `extras` takes
    their features back off the encoded rows and puts them at their places (n x (P - 1) x D, zeros where a record
    has fewer, which ``has_positive`` masks). No loss reads both them and token or teacher features (`extras`)."""

    def __init__(self, needs: frozenset, batch: tuple, device):
        self.reads = bool(needs & POSITIVE_EXTRAS)
        self.has = batch[9].to(device) if self.reads else None
        self.tokens_present = batch[8].to(device, non_blocking=True)[self.has] if self.reads else None

    def tokens(self, texts: torch.Tensor) -> torch.Tensor:
        return torch.cat([texts, self.tokens_present]) if self.reads else texts

    def extras(self, text_features: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(the batch's own caption features, the positives' extras)."""
        if not self.reads:
            return text_features, {}
        count = len(self.tokens_present)
        own, features = text_features[: len(text_features) - count], text_features[len(text_features) - count:]
        flat = placed(features.float(), self.has.flatten()) if count else \
            features.new_zeros(self.has.numel(), features.shape[1]).float()
        return own, {"positive_text_features": flat.reshape(*self.has.shape, -1), "has_positive": self.has}
