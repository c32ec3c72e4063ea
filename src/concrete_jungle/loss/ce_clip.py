"""CE-CLIP's loss (Zhang, Awal, Agrawal, CVPR 2024, github.com/lezhang7/Enhance-FineGrained): NegCLIP's contrastive
loss plus an intra-modal contrastive term on the captions and a cross-modal rank loss with an adaptive threshold.

Released code: ``Clip_DALoss`` in ``src/open_clip/loss.py``, the threshold's clamp and reset in
``src/training/train.py``, the recipe in ``scripts/run_multiple_nodes.sh`` (HEAD ef87eb7). Its data brings K = 4
hard-negative captions per caption (a relation swap, which can be missing, and an adjective, noun and verb
replacement) and no negative pictures. With s the logit scale, anchors a = 1..N, and the K negative captions
t_ak of anchor a (those that exist), per step:

    L_itc = NegCLIP's first version: image-to-text over every caption (anchors only if not hard_negatives),
            text-to-image over the anchors' images
    L_imc = mean_a -log( e^{s<v_a,t_a>} / (e^{s<v_a,t_a>} + sum_n e^{s<t_a,t_n>}) ),  n: every negative caption
            of the batch
    L_cmr = (1 / (N K)) sum_{a,k: t_ak exists} max(0, tau_k + s<v_a,t_ak> - s<v_a,t_a>)
    L     = L_itc + imc_weight L_imc + cmr_weight L_cmr

tau_k, one per negative slot k, is the state of the loss: the value computed from the previous training step,
0 at the start (``threshold="fixed"``: ``fixed_threshold`` always). After each training step (``self.training``)
it becomes, from that step's detached logits over the global batch,

    "mean": tau_k = mean_a s<v_a,t_a> - mean_{a: t_ak exists} s<v_a,t_ak>   (a slot with no negative keeps its tau)
    "max":  tau_k = max_a (s<v_a,t_a> - s<v_a,t_ak> where t_ak exists, else 0) / 5

clamped to [0, threshold_upper_bound]. It is a buffer (``thresholds``) of the module's state dict, which a
checkpoint must keep for a resumed run to continue with the same thresholds.

The intra-modal term changed across the repository's commits; we follow 7f4433a (2024-01-31, "fix bugs", kept by
2d07821): the target is the sample's own image-text logit. Before it (7b58a00, cfdb1b2 "final", 2023-06) and again
from b8a5244 (2024-03-08) the target column is 1, and from 47cef4e (2024-03-27, HEAD) the image-text logit is
dropped and the target is column 0; both make the target the similarity of each caption to the *first negative
caption of the batch*, which depends on the batch order and pulls captions towards a negative: not a loss one
can state, so we do not offer it.

Where we differ from the released code, and why: a missing negative caption (its "###" placeholder) is masked out
of the image-to-text and intra-modal softmaxes too, not only out of the rank loss (the contract of this package:
missing is masked, never a real column); the rank and intra-modal terms are computed under ``local_loss`` and
with any world size (the released code skips them under ``local_loss``); the thresholds are not reset to 0 at each
epoch (the released trainer re-initialises them in ``train_one_epoch``; a loss does not see epochs, and the next
step recomputes them anyway); a slot with no negative in a batch keeps its threshold (the released code divides by
zero there). Negative pictures, if the data has them, are not read: CE-CLIP has none
(so ``mask_entailed``, which masks logits against negative pictures, has nothing to mask).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .layout import HardNegativeLoss, at_least_float32
from .options import CEClipOptions
from .peer_batch import leading, mean_term, pair_nll, read_batch

MAX_THRESHOLD_DIVISOR = 5.0  # "max": the largest gap over the batch, divided by 5 (get_cmr_loss, loss.py)




class CEClipLoss(HardNegativeLoss):
    """CE-CLIP's loss on the hard-negative batch (see the module docstring); ``output_dict`` adds the unweighted
    terms "ce_clip/itc", "ce_clip/imc", "ce_clip/cmr" and "ce_clip/threshold", the mean tau this step used."""

    options_class = CEClipOptions

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # one tau per negative slot, sized at the first step (K is the data's); float64: a state, not a feature
        self.register_buffer("thresholds", torch.empty(0, dtype=torch.float64))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        saved = state_dict.get(prefix + "thresholds")
        if saved is not None:  # the saved K decides the size
            self.thresholds = torch.empty_like(saved, dtype=torch.float64, device=self.thresholds.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _current_thresholds(self, k: int, device: torch.device) -> torch.Tensor:
        if self.thresholds.numel() == 0:
            start = self.options.fixed_threshold if self.options.threshold == "fixed" else 0.0
            self.thresholds = torch.full((k,), float(start), dtype=torch.float64, device=device)
        if self.thresholds.numel() != k:
            raise ValueError(f"CEClipLoss keeps one threshold per negative slot and has {self.thresholds.numel()}; "
                             f"this batch has K = {k} negatives per anchor. Use one K per run (or a new loss).")
        return self.thresholds.to(device)

    def forward(self, image_features, text_features, logit_scale, concreteness, has_negative=None,
                has_negative_image=None, output_dict=False, anchor_true_of_negative=None, **extras):
        batch = read_batch(self, image_features, text_features, logit_scale, concreteness, has_negative,
                           has_negative_image, anchor_true_of_negative)
        layout, options = batch.layout, self.options
        n, k, anchors = layout.n, layout.k, batch.anchors
        tau = self._current_thresholds(k, image_features.device)

        captions = layout.text_valid if options.hard_negatives else anchors
        i2t, t2i, positive = pair_nll(batch, logit_scale, anchors, captions)
        itc = (mean_term(i2t, n, batch.share) + mean_term(t2i, n, batch.share)) / 2

        mine = anchors[layout.own]
        rows = layout.own[mine]  # this rank's anchors, global indices
        image, text = leading(batch.own_images, mine), leading(batch.own_texts, mine)
        loss, terms = itc, {"ce_clip/itc": itc}
        if options.imc_weight:
            negatives = leading(batch.texts[n:], layout.has_negative.flatten())
            logits = torch.cat([positive[:, None], at_least_float32(logit_scale * text @ negatives.T)], dim=1)
            imc = mean_term(torch.logsumexp(logits, dim=1) - positive, n, batch.share)
            loss, terms["ce_clip/imc"] = loss + options.imc_weight * imc, imc
        if options.cmr_weight:
            # only the (anchor, slot) pairs whose negative exists are read: a missing row never reaches the loss
            anchor, slot = torch.nonzero(layout.has_negative[rows], as_tuple=True)
            negative = batch.texts[n + rows[anchor] * k + slot]
            hard = logit_scale * (at_least_float32(image[anchor]) * at_least_float32(negative)).sum(dim=1)
            hinge = F.relu(tau[slot].to(hard.dtype) + hard - positive[anchor])
            cmr = mean_term(hinge, n * k, batch.share)
            loss, terms["ce_clip/cmr"] = loss + options.cmr_weight * cmr, cmr
        if self.training and options.threshold != "fixed":
            self.thresholds = self._next_thresholds(batch, logit_scale, tau)
        if not output_dict:
            return loss
        return {"contrastive_loss": loss, **{name: value.detach() for name, value in terms.items()},
                "ce_clip/threshold": tau.mean().to(loss.dtype)}

    @torch.no_grad()
    def _next_thresholds(self, batch, logit_scale, tau: torch.Tensor) -> torch.Tensor:
        """tau after this step, from its logits over the global batch (the same on every rank)."""
        layout = batch.layout
        n, k = layout.n, layout.k
        scale = torch.as_tensor(logit_scale).detach().to(torch.float64)
        images, texts = batch.images[:n].detach().to(torch.float64), batch.texts.detach().to(torch.float64)
        positive = scale * (images * texts[:n]).sum(dim=1)
        anchor, slot = torch.nonzero(layout.has_negative, as_tuple=True)
        hard = scale * (images[anchor] * texts[n + anchor * k + slot]).sum(dim=1)
        if self.options.threshold == "mean":
            count = torch.zeros(k, dtype=torch.float64, device=tau.device).index_add_(0, slot, torch.ones_like(hard))
            total = torch.zeros(k, dtype=torch.float64, device=tau.device).index_add_(0, slot, hard)
            new = torch.where(count > 0, positive.mean() - total / count.clamp(min=1), tau)
        else:  # "max": a missing negative counts as a gap of 0, as in the released code
            gaps = torch.zeros(n, k, dtype=torch.float64, device=tau.device)
            gaps[anchor, slot] = positive[anchor] - hard
            new = gaps.max(dim=0).values / MAX_THRESHOLD_DIVISOR
        bound = self.options.threshold_upper_bound
        return new if bound is None else new.clamp(0.0, bound)
