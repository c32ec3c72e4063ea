"""CLIC (Peleg, Singh and Hein, 2025, "Advancing Compositional Awareness in CLIP with Efficient Fine-Tuning",
github.com/AmitPeleg/CLIC): a picture made of two pictures side by side, several positive captions of it (the two
captions joined in either order, and the two pictures' other captions joined), one hard negative made by swapping
a word between the two captions, a contrastive term per positive, a two-way choice of each positive against the
negative, and a uni-modal term pulling the first two positives together.

Transcribed from the released code at commit dc845c7 (dc845c75f867be8194a5ddc188975174cccff4e4, 2025-06-19):
``losses.py`` class ``CLIPLoss`` (``_compute_loss_with_hard_negatives`` with ``hard_negatives_separate`` and
``uni_modal_loss``, the recipe of ``trigger_train.sh``), ``models.py`` (the logits, features gathered with their
gradient) and ``data_loading.py`` / ``utils/data_utils.py`` (its batch; here any set with several positives per
picture, docs/peers.md). With the picture v_a, its P positive captions t_a^i (i = 0 the anchor's caption; m_a^i: it
exists), its negatives t_ak (K = 1 in CLIC's data), scale s, over the global batch of N pictures:

    i2t_a^i  = -log softmax_{b : m_b^i}(s <v_a, t_b^i>)[a]         (the released code: each positive's own set)
    t2i_a^i  = -log softmax_b(s <t_a^i, v_b>)[a]
    neg_a^i  = -log softmax(s <v_a, t_a^i>, s <v_a, t_ak> : k)_0     (anchors with a negative)
    uni_a    = ||t_a^0 - t_a^1||^2                                   (anchors with a second positive)
    L = w_c (mean i2t + mean t2i) / 2 + w_n mean neg + w_u mean uni

each mean over the (a, i) that exist. With every positive present the means are the released code's (a mean per
positive, then their mean) term for term; the negative's picture, where a batch has one, is not read. docs/peers.md
says what else differs (the released recipe's alternating plain CLIP steps, its concatenated pictures).
"""

from __future__ import annotations

import torch

from .layout import HardNegativeLoss, at_least_float32, gather_no_grad, picture_positives
from .options import CLICOptions
from .sample_terms import check_batch, global_mean, own_choice_logits, split_negatives


def gathered(images: torch.Tensor, captions: torch.Tensor, loss) -> tuple[torch.Tensor, torch.Tensor]:
    """Every rank's pictures (N x D) and positive captions (N x P x D), gathered as open_clip's `gather_features`
    gathers (its own rank's rows keep their gradient; every rank's with ``gather_with_grad``), in one collective:
    two gathers with gradient could meet their backward passes in different orders on two ranks."""
    if loss.world_size == 1:
        return images, captions
    import torch.distributed as dist

    n, p, d = captions.shape
    rows = torch.cat([images[:, None], captions], dim=1)  # n x (1 + P) x D
    if loss.gather_with_grad:
        from torch.distributed.nn.functional import all_gather

        parts = list(all_gather(rows))
    else:
        parts = [torch.empty_like(rows) for _ in range(loss.world_size)]
        dist.all_gather(parts, rows.detach().contiguous())
        if not loss.local_loss:
            parts[loss.rank] = rows
    every = torch.cat(parts)
    return every[:, 0], every[:, 1:]


class CLICLoss(HardNegativeLoss):
    """CLIC's loss (module docstring). ``forward(..., positive_text_features=, has_positive=)``: the features of
    each picture's other positive captions (n x (P - 1) x D) and which exist (n x (P - 1)); ``concreteness`` gives
    the batch's shape only. ``output_dict`` adds "clic/i2t", "clic/t2i", "clic/negative" and "clic/uni_modal".

    Data parallel as open_clip's ClipLoss: the contrastive terms read gathered pictures and captions (this rank's
    rows under ``local_loss``, every row otherwise); the choice and uni-modal terms are per sample
    (`sample_terms.global_mean`)."""

    needs = frozenset({"positive_text_features", "has_positive"})

    options_class = CLICOptions

    def _mean(self, local_sum: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        return global_mean(local_sum, count, self.local_loss, self.gather_with_grad, self.rank, self.world_size)

    def forward(self, image_features, text_features, logit_scale, concreteness, has_negative=None,
                has_negative_image=None, output_dict=False, anchor_true_of_negative=None,
                positive_text_features=None, has_positive=None):
        o = self.options
        n, k, has_negative = check_batch(self, image_features, text_features, logit_scale, concreteness,
                                         has_negative, "CLICLoss")
        captions, exists = picture_positives(text_features[:n], positive_text_features, has_positive)
        if o.uni_weight > 0 and captions.shape[1] < 2:
            raise ValueError("CLICLoss: its uni-modal term compares each picture's first two positive captions, and "
                             "this batch has one per picture; train on a set with several (`concrete-jungle import "
                             "clic`, or coco-swaps --positives 5), or set loss.clic.uni_weight: 0")
        images = image_features[:n]
        scale = logit_scale
        # the positive logit of each (picture, positive) from the two vectors, as the columns below hold it
        positive = scale * torch.einsum("nd,npd->np", at_least_float32(images), at_least_float32(captions))
        terms = {}
        if o.contrastive_weight > 0:
            terms["clic/i2t"], terms["clic/t2i"] = self._contrastive(images, captions, exists, positive, scale)
        if o.negative_weight > 0:
            negatives = split_negatives(text_features, n, k, has_negative)
            against = scale * torch.einsum("nd,nkd->nk", images, negatives)
            choice = own_choice_logits(positive.flatten(), against.repeat_interleave(captions.shape[1], 0),
                                       has_negative.repeat_interleave(captions.shape[1], 0))
            rows = (exists & has_negative.any(dim=1, keepdim=True)).flatten()
            nll = -torch.log_softmax(choice, dim=1)[:, 0]
            terms["clic/negative"] = self._mean(torch.where(rows, nll, nll.new_zeros(())).sum(), rows.sum())
        if o.uni_weight > 0:
            rows = exists[:, 1]
            squared = at_least_float32(captions[:, 0] - captions[:, 1]).pow(2).sum(dim=1)
            terms["clic/uni_modal"] = self._mean(torch.where(rows, squared, squared.new_zeros(())).sum(), rows.sum())
        loss = sum(weight * terms[name] for name, weight in (
            ("clic/i2t", o.contrastive_weight / 2), ("clic/t2i", o.contrastive_weight / 2),
            ("clic/negative", o.negative_weight), ("clic/uni_modal", o.uni_weight)) if name in terms)
        if not output_dict:
            return loss
        return {"contrastive_loss": loss} | {name: value.detach() for name, value in terms.items()}

    def _contrastive(self, images, captions, exists, positive, scale):
        """The means of i2t and t2i over the (picture, positive) pairs that exist, on the gathered batch."""
        all_images, all_captions = gathered(images, captions, self)
        all_exists = exists if self.world_size == 1 else gather_no_grad(exists, self.world_size)
        if self.local_loss:
            own_images, own_captions, own_exists, own_positive = images, captions, exists, positive
        else:
            own_images, own_captions, own_exists = all_images, all_captions, all_exists
            own_positive = scale * torch.einsum("nd,npd->np", at_least_float32(all_images),
                                                at_least_float32(all_captions))
        count = int(all_exists.sum())
        share = self.world_size if self.local_loss else 1
        # i2t: each picture against the captions of one positive set (every picture's i-th positive), -inf where
        # a picture lacks it; a set no picture has keeps its (zero) columns, its rows all left out below, so that no
        # softmax of -inf alone sends NaN into the gradient
        products = at_least_float32(scale * torch.einsum("ad,bpd->apb", own_images, all_captions))
        logits = products.masked_fill((~all_exists & all_exists.any(dim=0)).T[None], float("-inf"))
        i2t = torch.logsumexp(logits, dim=2) - own_positive
        # t2i: each positive caption against every picture; where this rank's rows are every row (one process, or
        # no local_loss), caption (a, p) against picture b is the product above at (b, p, a): one product, not two
        if self.world_size == 1 or not self.local_loss:
            t2i = torch.logsumexp(products, dim=0).T - own_positive
        else:
            t2i = torch.logsumexp(at_least_float32(scale * torch.einsum("apd,bd->apb", own_captions, all_images)),
                                  dim=2) - own_positive
        zero = i2t.new_zeros(())
        return tuple(torch.where(own_exists, nll, zero).sum() * (share / max(count, 1)) for nll in (i2t, t2i))
