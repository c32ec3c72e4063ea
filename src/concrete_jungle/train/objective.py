"""What a step optimises: the configured loss (Cement with a margin schedule, or one of the field's, `loss.LOSSES`)
and the inputs beyond the pooled features that it reads (its ``needs``): patch and token features from a forward
that returns them (FSC-CLIP's local loss, `token_features`), and an EMA teacher's features (DeGLA, `ema`), the
teacher kept beside each checkpoint so that a resumed run continues the same average; and `training_step`, one
optimiser step on a batch with what a run's steps share (`StepContext`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..loss import LOSSES, CementLoss
from ..loss.options import CEMENT_LOSSES
from ..models.text_encoding import trim_tokens
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
    if loss.name in CEMENT_LOSSES:
        params = {"infonce": {}, "static": {"value": loss.static_margin}}.get(
            loss.name, {"m_min": loss.m_min, "m_max": loss.m_max, "center": loss.center, "tau": loss.tau})
        return CementLoss(loss.name, **parallel, **params)
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
           image_rows: torch.Tensor, text_rows: torch.Tensor, anchors: int) -> dict[str, torch.Tensor]:
    """The inputs beyond the pooled features a loss ``needs``, at the layout's rows: the token features the forward
    returned (`TokenCLIP`; patch features of the ``anchors`` pictures alone, the only ones the loss that reads them,
    FSC-CLIP, scores), the teacher's features of the same pictures and captions (no gradient)."""
    out = {}
    if needs & TOKEN_EXTRAS:
        tokens = outputs[3]
        # the encoded pictures begin with the anchors'; taken whole where they are all (a slice's backward would
        # copy the gradient into a new tensor of the same size)
        image_tokens = tokens["image_tokens"].float()
        out["image_tokens"] = image_tokens if len(image_tokens) == anchors else image_tokens[:anchors]
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


@dataclass(frozen=True)
class StepContext:
    """What every step of a run shares. ``forward``: open_clip's (DDP, compiled; with ``trim_text`` a `TrimmedTextCLIP`
    fed tokens cut to the batch's captions); ``normalize``: uint8 pictures (the image cache) to the model's input;
    ``clamp_logit_scale``: the temperature's bound (None: none); ``teacher`` follows the model after each step."""

    forward: Callable
    model: torch.nn.Module
    loss_fn: torch.nn.Module
    optimizer: torch.optim.Optimizer
    device: str
    grad_clip: float | None = None
    autocast: bool = False
    normalize: Callable | None = None
    trim_text: bool = False
    teacher: object | None = None
    clamp_logit_scale: float | None = 100.0


def training_step(step: StepContext, batch, lr: float) -> dict:
    """One step at learning rate ``lr`` on n anchors and their K negatives each (`data.Batch`); the loss's output
    dict. Only the pictures and captions that exist are encoded, then placed at their rows of the loss's layout
    (`loss.layout`), whose masks keep the empty rows out. A non-finite loss takes no step: ``non_finite`` is set."""
    model, loss_fn, optimizer, device = step.model, step.loss_fn, step.optimizer, step.device
    image, neg_image, text, neg_text, c, has_negative, has_negative_image, entailed = batch[:8]
    has_negative_image = has_negative_image & has_negative
    for g in optimizer.param_groups:
        g["lr"] = lr
    # each part goes over from the loader's pinned memory, then joins on the device: a join on the host would
    # copy 1.2 GB per ViT-B-32 step into memory that is not pinned, and the transfer would no longer be async
    image_rows = torch.cat([torch.ones(len(c), dtype=torch.bool), has_negative_image.flatten()]).to(device)
    text_rows = torch.cat([torch.ones(len(c), dtype=torch.bool), has_negative.flatten()]).to(device)
    images, texts = image.to(device, non_blocking=True), text.to(device, non_blocking=True)
    if bool(has_negative_image.any()):
        images = torch.cat([images, neg_image.to(device, non_blocking=True)[has_negative_image.to(device)]])
    texts = torch.cat([texts, neg_text.to(device, non_blocking=True)[has_negative.to(device)]])
    positives = Positives(getattr(loss_fn, "needs", frozenset()), batch, device)
    texts = positives.tokens(texts)  # the layout's captions, then the other positives a loss reads (cut alike)
    if step.normalize is not None:
        images = step.normalize(images)
    if step.trim_text:  # each rank cuts its own batch: the loss compares features, not tokens
        texts = trim_tokens(model, texts)
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=step.autocast):
        # open_clip's forward: normalised features and exp(logit_scale); through DDP for gradient sync
        outputs = step.forward(images, texts)
        image_features, (text_features, more), logit_scale = outputs[0], positives.extras(outputs[1]), outputs[2]
        if needs := getattr(loss_fn, "needs", frozenset()) - POSITIVE_EXTRAS:
            more |= extras(needs, outputs, step.teacher, images, texts, image_rows, text_rows, len(c))
        out = loss_fn(placed(image_features.float(), image_rows), placed(text_features.float(), text_rows),
                      logit_scale.float(), c.to(device), has_negative.to(device), has_negative_image.to(device),
                      output_dict=True, anchor_true_of_negative=entailed.to(device), **more)
    if not torch.isfinite(out["contrastive_loss"]):
        return out | {"non_finite": True}
    optimizer.zero_grad(set_to_none=True)
    out["contrastive_loss"].backward()
    if step.grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), step.grad_clip)
    optimizer.step()
    with torch.no_grad():
        # as open_clip: a temperature of at most 100 (the recipe's bound); a frozen one stays as it is
        if model.logit_scale.requires_grad and step.clamp_logit_scale is not None:
            model.logit_scale.clamp_(0, math.log(step.clamp_logit_scale))
    if step.teacher is not None:
        step.teacher.update(model)
    return out
