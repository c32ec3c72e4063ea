"""FSC-CLIP (Oh et al., EMNLP 2024, "Preserving Multi-Modal Capabilities of Pre-trained VLMs for Improving
Vision-Linguistic Compositionality"): CLIP's loss over the anchors, plus two hard-negative losses that score each
image against its own caption and its own K negative captions only, never the rest of the batch.

Written from the paper and its released code (github.com/ytaek-oh/fsc-clip, commit 604015d,
``src/training/losses/loss.py``); docs/peers.md gives the formulas, the defaults and what differs. With image
v_a, caption t_a, negatives t_ak (m_ak: it exists) and scale s:

    L = CLIP(anchors) + w_g L_global + w_l L_local
    L_global = mean over anchors with a negative of  ell(s <v_a, t_a>, s <v_a, t_ak> : m_ak)
    L_local  = the same ell over local scores g(a, t): the caption's tokens, each matched to the image's
               patches it is most similar to, aggregated by a log-sum-exp (`local_scores`)
    ell(z)   = sum_j y_j (1 - p_j)^gamma (-log p_j),  p = softmax(z),  y_0 = 1 - eps + eps / (1 + M),
               y_k = eps / (1 + M) for the M negatives that exist

gamma > 0 is the focal loss, eps > 0 the selective calibrated regularisation (label smoothing on the
hard-negative choice only, never on CLIP's loss). Negative pictures, where a batch has them, are not used:
FSC-CLIP has none
(so ``mask_entailed``, which masks logits against negative pictures, has nothing to mask).
"""

from __future__ import annotations


import torch
import torch.nn.functional as F
from open_clip.loss import ClipLoss

from ..loss_options import FSCCLIPOptions
from .sample_terms import check_batch, global_mean, own_choice_logits, split_negatives
from .layout import HardNegativeLoss





def calibrated_focal_loss(logits: torch.Tensor, present: torch.Tensor, gamma: float,
                          smoothing: float) -> torch.Tensor:
    """Per row, ``sum_j y_j (1 - p_j)^gamma (-log p_j)`` over the classes that exist (``present``; column 0, the
    positive, always does), with the smoothed targets of the module docstring. Rows x (1 + K) -> rows."""
    log_p = F.log_softmax(logits, dim=1)
    # a missing class has log p = -inf and target 0: a finite stand-in keeps 0 * inf out of values and gradients
    log_p = torch.where(present, log_p, torch.zeros((), dtype=log_p.dtype, device=log_p.device))
    terms = -log_p
    if gamma > 0:
        # 1 - p as -expm1(log p): exact where p is close to 1; kept above 0 so that a saturated row's gradient
        # is 0, not 0 * inf, when gamma < 1
        terms = terms * (-torch.expm1(log_p)).clamp_min(torch.finfo(log_p.dtype).tiny) ** gamma
    classes = present.sum(dim=1, keepdim=True).to(log_p.dtype)
    targets = torch.where(present, smoothing / classes, torch.zeros((), dtype=log_p.dtype, device=log_p.device))
    positive = torch.zeros_like(targets)
    positive[:, 0] = 1 - smoothing
    targets = targets + positive
    return (targets * terms).sum(dim=1)


def patch_weights(similarity: torch.Tensor, normalizer: str, sparsify: bool) -> torch.Tensor:
    """Each token's weights over the P patches (last dim), summing to 1: min-max rescaled similarities
    (optionally those below 1/P dropped) or their softmax. A token equally similar to every patch, whose min-max
    is 0 / 0, weighs them equally; so does one whose similarities differ by rounding alone (a few units in the
    last place: the matrix product may round the same dot product differently in different columns), where
    min-max would blow that noise up to weights between 0 and 1."""
    if normalizer == "softmax":
        return similarity.softmax(dim=-1)
    low, high = similarity.amin(dim=-1, keepdim=True), similarity.amax(dim=-1, keepdim=True)
    spread = high - low
    distinct = spread > 4 * torch.finfo(similarity.dtype).eps * torch.maximum(low.abs(), high.abs())
    weights = torch.where(distinct, (similarity - low) / torch.where(distinct, spread, 1), 1)
    if sparsify:
        weights = torch.where(weights < 1 / similarity.shape[-1], 0, weights)
    return weights / weights.sum(dim=-1, keepdim=True)


def local_scores(image_tokens: torch.Tensor, text_tokens: torch.Tensor, present: torch.Tensor,
                 token_mask: torch.Tensor, logit_scale, normalizer: str = "minmax", sparsify: bool = False,
                 pictures_per_pass: int = 16) -> torch.Tensor:
    """g(a, c) for the n anchor pictures (the first n rows of ``image_tokens``: patch features, rows x P x D) and
    each one's C = 1 + K captions, its own and its negatives' (``text_tokens``: the ``[anchors; negatives]`` rows x
    L x D of `layout`; ``present`` n x C says which exist, a missing one counting as zeros; ``token_mask`` n x C x
    L' which of their first L' positions count). Every token's patches averaged with `patch_weights` of their
    similarity (no gradient through the weights, as in FSC-CLIP), normalised, and scored against the normalised
    token; ``log sum_t exp(s cos)`` over the caption's tokens. -> n x C. The cosines are `GroupedCosine`'s."""
    cosine = GroupedCosine.apply(text_tokens, image_tokens, present, token_mask.shape[-1], normalizer, sparsify,
                                 pictures_per_pass)
    return torch.logsumexp((logit_scale * cosine).masked_fill(~token_mask, float("-inf")), dim=-1)


def caption_slots(rows: torch.Tensor, n: int, k: int) -> list[torch.Tensor]:
    """Views of ``[anchors; negatives]`` rows, one per caption slot, each n rows long: the anchors', then each
    anchor's j-th negative (row n + a K + j) for j < K."""
    return [rows[:n]] + [rows[n + j::k] for j in range(k)]


class GroupedCosine(torch.autograd.Function):
    """cos(u_t, m_t), m_t = sum_p a_tp w_p, for the first ``length`` tokens u_t of each anchor picture's captions
    against the picture's patches w_p (`local_scores`' arguments; -> n x C x length), a_t = `patch_weights` of the
    similarities <u_t, w_p> (no gradient through them).

    The work goes in passes of ``pictures_per_pass`` pictures, each pass's captions side by side (read from
    `caption_slots`' views, never gathered for the whole batch), so that every intermediate is a few MB that the
    allocator reuses and the cache holds; the gradients are written into the full-size gradients of
    ``text_tokens`` and ``image_tokens`` in place, with no zero-filled buffer per read. The gradient is written
    out rather than left to autograd (which would take a pass over the tokens for every elementwise step of the
    norms): with the averaged patches m computed again in the backward pass rather than kept,
    d u = d_cos (m / (|u| |m|) - cos u / |u|^2), d m = d_cos (u / (|u| |m|) - cos m / |m|^2), d W = A^T d m, two
    products per pass forward (the similarities, m) and two backward (m, d W). Norms have F.normalize's floor
    (1e-12), with no gradient below it."""

    EPS = 1e-12

    @staticmethod
    def forward(ctx, text_tokens: torch.Tensor, image_tokens: torch.Tensor, present: torch.Tensor, length: int,
                normalizer: str, sparsify: bool, pictures_per_pass: int) -> torch.Tensor:
        n, count = present.shape
        dtype = torch.promote_types(torch.promote_types(text_tokens.dtype, image_tokens.dtype), torch.float32)
        small = dict(dtype=dtype, device=text_tokens.device)
        weights = torch.empty(n, count * length, image_tokens.shape[1], **small)
        cosine, grouped_norm, token_norm = (torch.empty(n, count * length, **small) for _ in range(3))
        with torch.autocast(text_tokens.device.type, enabled=False):  # in float32 at least, as the rest of the loss
            for pictures, patches, tokens in GroupedCosine._passes(text_tokens, image_tokens, present, length,
                                                                   pictures_per_pass, dtype):
                similarity = tokens @ patches.transpose(1, 2)
                a = weights[pictures] = patch_weights(similarity, normalizer, sparsify)
                grouped_norm[pictures] = torch.linalg.vector_norm(a @ patches, dim=-1)
                token_norm[pictures] = torch.linalg.vector_norm(tokens, dim=-1)
                cosine[pictures] = (a * similarity).sum(dim=-1)
        eps = GroupedCosine.EPS
        grouped_floor, token_floor = grouped_norm.clamp_min(eps), token_norm.clamp_min(eps)
        cosine /= grouped_floor * token_floor
        ctx.save_for_backward(text_tokens, image_tokens, present, weights, cosine, grouped_floor, token_floor,
                              grouped_norm > eps, token_norm > eps)
        ctx.pictures_per_pass = pictures_per_pass
        return cosine.reshape(n, count, length)

    @staticmethod
    def _passes(text_tokens, image_tokens, present, length, pictures_per_pass, dtype):
        """Per pass: its pictures (a slice of the n), their patches and the first ``length`` tokens of their
        captions side by side (pictures x C length x D), in ``dtype``; zeros for a caption that is missing
        (whatever its row holds, even NaN, reaches neither the value nor the gradient)."""
        n, count = present.shape
        slots = caption_slots(text_tokens, n, count - 1)
        everything = bool(present.all())
        for start in range(0, n, pictures_per_pass):
            pictures = slice(start, min(start + pictures_per_pass, n))
            tokens = torch.cat([slot[pictures, :length] for slot in slots], dim=1).to(dtype)
            if not everything:
                tokens = torch.where(present[pictures].repeat_interleave(length, dim=1)[..., None], tokens,
                                     torch.zeros((), dtype=dtype, device=tokens.device))
            yield pictures, image_tokens[pictures].to(dtype), tokens

    @staticmethod
    def backward(ctx, d_cosine: torch.Tensor):
        text_tokens, image_tokens, present, weights, cosine, grouped_floor, token_floor, grouped_above, \
            token_above = ctx.saved_tensors
        n, count = present.shape
        length = cosine.shape[1] // count
        d_cosine = d_cosine.reshape(cosine.shape)
        zero = torch.zeros((), dtype=cosine.dtype, device=cosine.device)
        d_dot = (d_cosine / (grouped_floor * token_floor))[..., None]
        # d cos / d |m| = -cos / |m| and d |m| / d m = m / |m| above the floor; the same for u
        grouped_scale = torch.where(grouped_above, -d_cosine * cosine / (grouped_floor * grouped_floor),
                                    zero)[..., None]
        token_scale = torch.where(token_above, -d_cosine * cosine / (token_floor * token_floor), zero)[..., None]
        # every row of [anchors; negatives] is in one slot: its first `length` positions are written below; the
        # positions after them and the negatives' pictures are not read
        d_text = torch.empty_like(text_tokens)
        d_text[:, length:] = 0
        d_slots = caption_slots(d_text, n, count - 1)
        d_image = torch.empty_like(image_tokens)
        d_image[n:] = 0
        missing = present.logical_not().repeat_interleave(length, dim=1)[..., None]
        with torch.autocast(text_tokens.device.type, enabled=False):
            for pictures, patches, tokens in GroupedCosine._passes(text_tokens, image_tokens, present, length,
                                                                   ctx.pictures_per_pass, cosine.dtype):
                a = weights[pictures]
                grouped = a @ patches
                d_grouped = d_dot[pictures] * tokens + grouped_scale[pictures] * grouped
                torch.bmm(a.transpose(1, 2), d_grouped, out=d_image[pictures])
                d_tokens = d_dot[pictures] * grouped + token_scale[pictures] * tokens
                d_tokens = d_tokens.masked_fill_(missing[pictures], 0)
                for c, d_slot in enumerate(d_slots):
                    d_slot[pictures, :length] = d_tokens[:, c * length:(c + 1) * length]
        return d_text, d_image, None, None, None, None, None


class FSCCLIPLoss(HardNegativeLoss):
    """FSC-CLIP's loss on the `layout` batch (module docstring). ``forward(..., image_tokens=, text_tokens=,
    text_token_mask=)``: the extras of `needs` when the local loss is on (`concrete_jungle.token_features`):
    patch features of the anchor pictures (n or n (1 + K) rows x P x D; only the anchors' are read), token
    features of every caption (n (1 + K) x L x D) and which tokens count (n (1 + K) x L bool). ``concreteness``
    gives the batch's shape only: FSC-CLIP does not read ratings.

    Data parallel: CLIP's loss is open_clip's `ClipLoss` on the anchors; the hard-negative losses need no
    gathered features, their means are over the global batch (`sample_terms.global_mean`)."""

    needs = frozenset({"image_tokens", "text_tokens", "text_token_mask"})  # with local_negatives on (else none)

    options_class = FSCCLIPOptions

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.clip = ClipLoss(local_loss=self.local_loss, gather_with_grad=self.gather_with_grad,
                             cache_labels=self.cache_labels, rank=self.rank, world_size=self.world_size)
        if not self.options.local_negatives:
            self.needs = frozenset()

    def choice_loss(self, logits: torch.Tensor, has_negative: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """The global-batch mean of ell over the anchors with a negative (``rows``)."""
        o = self.options
        present = torch.cat([torch.ones_like(has_negative[:, :1]), has_negative], dim=1)
        per_row = calibrated_focal_loss(logits, present, o.focal_gamma if o.focal else 0.0, o.label_smoothing)
        local_sum = torch.where(rows, per_row, torch.zeros((), dtype=per_row.dtype, device=per_row.device)).sum()
        return global_mean(local_sum, rows.sum(), self.local_loss, self.gather_with_grad, self.rank,
                           self.world_size)

    def forward(self, image_features: torch.Tensor, text_features: torch.Tensor, logit_scale,
                concreteness: torch.Tensor, has_negative: torch.Tensor | None = None,
                has_negative_image: torch.Tensor | None = None, output_dict: bool = False,
                anchor_true_of_negative: torch.Tensor | None = None,
                image_tokens: torch.Tensor | None = None, text_tokens: torch.Tensor | None = None,
                text_token_mask: torch.Tensor | None = None):
        n, k, has_negative = check_batch(self, image_features, text_features, logit_scale, concreteness,
                                         has_negative, "FSCCLIPLoss")
        o = self.options
        clip = self.clip(image_features[:n], text_features[:n], logit_scale)
        loss, terms = clip, {"fsc_clip/clip": clip}
        rows = has_negative.any(dim=1)
        if o.global_negatives:
            images = image_features[:n]
            positive = (images * text_features[:n]).sum(dim=1)
            negatives = torch.einsum("nd,nkd->nk", images, split_negatives(text_features, n, k, has_negative))
            logits = own_choice_logits(logit_scale * positive, logit_scale * negatives, has_negative)
            terms["fsc_clip/global"] = self.choice_loss(logits, has_negative, rows)
            loss = loss + o.global_weight * terms["fsc_clip/global"]
        if o.local_negatives:
            present, mask = self._captions(n, k, has_negative, image_tokens, text_tokens, text_token_mask)
            scores = local_scores(image_tokens, text_tokens, present, mask, logit_scale, o.sim_normalizer,
                                  o.sim_sparsify)
            logits = own_choice_logits(scores[:, 0], scores[:, 1:], has_negative)
            terms["fsc_clip/local"] = self.choice_loss(logits, has_negative, rows)
            loss = loss + o.local_weight * terms["fsc_clip/local"]
        if not output_dict:
            return loss
        return {"contrastive_loss": loss} | {name: value.detach() for name, value in terms.items()}

    @staticmethod
    def _captions(n: int, k: int, has_negative: torch.Tensor, image_tokens, text_tokens, text_token_mask):
        """Which of each anchor's captions exist, its own then its K negatives' (n x (1 + K)), and their token masks
        (n x (1 + K) x L'), cut after the last position any caption counts. A missing negative has one position
        counted, so that its score stays finite (it is masked out of the choice afterwards)."""
        if image_tokens is None or text_tokens is None or text_token_mask is None:
            raise ValueError("FSCCLIPLoss with local_negatives needs image_tokens, text_tokens and text_token_mask "
                             "(concrete_jungle.token_features); set loss.fsc_clip.local_negatives: false to "
                             "train without them")
        rows = n * (1 + k)
        if image_tokens.ndim != 3 or image_tokens.shape[0] not in (n, rows):
            raise ValueError(f"image_tokens has shape {tuple(image_tokens.shape)}; expected ({n} or {rows}, "
                             "patches, dim)")
        if text_tokens.ndim != 3 or text_tokens.shape[0] != rows or text_token_mask.shape != text_tokens.shape[:2]:
            raise ValueError(f"text_tokens {tuple(text_tokens.shape)} and text_token_mask "
                             f"{tuple(text_token_mask.shape)} must be ({rows}, tokens, dim) and ({rows}, tokens)")
        mask = text_token_mask.bool()
        exists = torch.cat([torch.ones_like(has_negative[:, 0]), has_negative.flatten()])
        counted = mask[exists]
        if not counted.any(dim=1).all():
            raise ValueError("text_token_mask marks no token of some caption; every caption needs at least its "
                             "end-of-text token (concrete_jungle.token_features)")
        # positions after the last one any caption counts add nothing: the work is over the captions' length
        last = int(counted.any(dim=0).nonzero().max()) + 1
        present = torch.cat([torch.ones_like(has_negative[:, :1]), has_negative], dim=1)
        mask = torch.stack([slot[:, :last] for slot in caption_slots(mask, n, k)], dim=1)
        if not bool(has_negative.all()):
            only_first = torch.zeros_like(mask)
            only_first[..., 0] = True
            mask = torch.where(present[..., None], mask, only_first)
        return present, mask
