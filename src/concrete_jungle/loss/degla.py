"""DeGLA (Hu et al., 2025, "Decoupled Global-Local Alignment for Improving Compositional Understanding"):
NegCLIP's contrastive loss, two grounded contrasts that score an anchor against its own negatives only, and a
self-distillation to a frozen teacher that follows the model by an exponential moving average.

Written from the paper and its released code (github.com/xiaoxing2001/DeGLA, commit 1c5e960,
``src/open_clip/loss.py`` class ``CLIPloss_DeGLA``, ``src/training/train.py``, ``scripts/train_DeGLA.sh``);
docs/peers.md gives the formulas, the defaults and what differs. With image v_a, caption t_a, negatives t_ak
(m_ak: it exists), the teacher's features marked with a bar, scale s and the fixed text scale tau:

    L = NegCLIP + w_igc L_IGC + w_tgc L_TGC + w_d L_distill
    L_IGC  = mean over anchors with a negative of  -log softmax(s <v_a, t_a>, s <v_a, t_ak> : m_ak)_0
    L_TGC  = mean over anchors with a negative of  -log softmax(tau <t_a, t̄_a>, tau <t_a, t_ak> : m_ak)_0
    L_distill = sum over the batch's pictures and captions of ||f - f̄||^2

NegCLIP here is `CementLoss` without margin on captions-only data: images against every caption (anchors and
negatives), captions against the anchor images. The teacher comes from `concrete_jungle.train.ema.EmaTeacher`
with ``ema_decay``; the loss reads its features as the extras of `needs`. Negative pictures, where a batch has
them, are not used: DeGLA has none (so ``mask_entailed``, which masks logits against negative pictures, has
nothing to mask).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .cement import CementLoss
from .layout import HardNegativeLoss, at_least_float32
from .options import DeGLAOptions
from .sample_terms import check_batch, global_mean, own_choice_logits, split_negatives


def needed_extras(options: DeGLAOptions) -> frozenset:
    """The teacher features the switched-on terms read: the captions' for TGC, both towers' for distillation."""
    needs = set()
    if options.tgc_weight > 0:
        needs.add("teacher_text_features")
    if options.distill_weight > 0:
        needs |= {"teacher_image_features", "teacher_text_features"}
    return frozenset(needs)


class DeGLALoss(HardNegativeLoss):
    """DeGLA's loss on the `layout` batch (module docstring). ``forward(..., teacher_image_features=,
    teacher_text_features=)``: the teacher's normalised features of the same rows (no gradient; the teacher's
    pictures may be the n anchors only). ``concreteness`` gives the batch's shape only: DeGLA reads no ratings.

    Data parallel: NegCLIP is `CementLoss`'s gathered computation; the grounded contrasts and the distillation
    need no gathered features, their means and sums are over the global batch (`sample_terms.global_mean`)."""

    needs = frozenset({"teacher_image_features", "teacher_text_features"})  # narrowed per instance by its weights

    options_class = DeGLAOptions

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.negclip = CementLoss("infonce", local_loss=self.local_loss, gather_with_grad=self.gather_with_grad,
                                  cache_labels=self.cache_labels, rank=self.rank, world_size=self.world_size)
        self.negclip._warned_unnormalised = True  # its inputs are checked (and warned about once) here
        self.needs = needed_extras(self.options)

    def _mean(self, local_sum: torch.Tensor, count: torch.Tensor | None) -> torch.Tensor:
        return global_mean(local_sum, count, self.local_loss, self.gather_with_grad, self.rank, self.world_size)

    def _choice(self, logits: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of column 0 over the anchors with a negative (``rows``), over the global batch."""
        per_row = -F.log_softmax(logits, dim=1)[:, 0]
        return self._mean(torch.where(rows, per_row, torch.zeros((), dtype=per_row.dtype,
                                                                  device=per_row.device)).sum(), rows.sum())

    def forward(self, image_features: torch.Tensor, text_features: torch.Tensor, logit_scale,
                concreteness: torch.Tensor, has_negative: torch.Tensor | None = None,
                has_negative_image: torch.Tensor | None = None, output_dict: bool = False,
                anchor_true_of_negative: torch.Tensor | None = None,
                teacher_image_features: torch.Tensor | None = None,
                teacher_text_features: torch.Tensor | None = None):
        n, k, has_negative = check_batch(self, image_features, text_features, logit_scale, concreteness,
                                         has_negative, "DeGLALoss")
        o = self.options
        teacher_images, teacher_texts = self._teacher(n, k, teacher_image_features, teacher_text_features)
        images, captions = image_features[:n], text_features[:n]
        negatives = split_negatives(text_features, n, k, has_negative)
        # NegCLIP on rows whose missing entries are zeros (`split_negatives`): CementLoss masks them out of its
        # softmaxes, and whatever the trainer left there (even NaN) reaches no gradient through its matrix product
        no_pictures = torch.zeros_like(has_negative)
        negclip = self.negclip(torch.cat([images, torch.zeros_like(image_features[n:])]),
                               torch.cat([captions, negatives.flatten(0, 1)]), logit_scale,
                               torch.zeros_like(concreteness), has_negative, no_pictures)
        loss, terms = negclip, {"degla/negclip": negclip}
        rows = has_negative.any(dim=1)
        if o.igc_weight > 0:
            logits = own_choice_logits(logit_scale * (images * captions).sum(dim=1),
                                       logit_scale * torch.einsum("nd,nkd->nk", images, negatives), has_negative)
            terms["degla/igc"] = self._choice(logits, rows)
            loss = loss + o.igc_weight * terms["degla/igc"]
        if o.tgc_weight > 0:
            logits = own_choice_logits(o.tgc_scale * (captions * teacher_texts[:n]).sum(dim=1),
                                       o.tgc_scale * torch.einsum("nd,nkd->nk", captions, negatives), has_negative)
            terms["degla/tgc"] = self._choice(logits, rows)
            loss = loss + o.tgc_weight * terms["degla/tgc"]
        if o.distill_weight > 0:
            teacher_negatives = split_negatives(teacher_texts, n, k, has_negative)
            squared = sum(at_least_float32(student - teacher).pow(2).sum() for student, teacher in (
                (images, teacher_images[:n]), (captions, teacher_texts[:n]), (negatives, teacher_negatives)))
            terms["degla/distill"] = self._mean(squared, None)
            loss = loss + o.distill_weight * terms["degla/distill"]
        if not output_dict:
            return loss
        return {"contrastive_loss": loss} | {name: value.detach() for name, value in terms.items()}

    def _teacher(self, n: int, k: int, images: torch.Tensor | None, texts: torch.Tensor | None):
        """The teacher's features, detached, after the checks; None for what no switched-on term reads."""
        rows = n * (1 + k)
        if "teacher_text_features" in self.needs:
            if texts is None or texts.ndim != 2 or texts.shape[0] != rows:
                raise ValueError(f"DeGLALoss needs teacher_text_features, the teacher's features of all {rows} "
                                 f"captions (got {None if texts is None else tuple(texts.shape)}); set "
                                 "loss.degla.tgc_weight and distill_weight to 0 to train without a teacher")
            texts = texts.detach()
        if "teacher_image_features" in self.needs:
            if images is None or images.ndim != 2 or images.shape[0] not in (n, rows):
                raise ValueError(f"DeGLALoss needs teacher_image_features, the teacher's features of the {n} "
                                 f"anchor pictures (got {None if images is None else tuple(images.shape)}); set "
                                 "loss.degla.distill_weight to 0 to train without them")
            images = images.detach()
        return images, texts
