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

from .layout import HardNegativeLoss
from .options import FSCCLIPOptions
from .sample_terms import check_batch, global_mean, own_choice_logits, split_negatives


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
                 pictures_per_pass: int = 16, memory: GradientMemory | None = None) -> torch.Tensor:
    """g(a, c) for the n anchor pictures (the first n rows of ``image_tokens``: patch features, rows x P x D) and
    each one's C = 1 + K captions, its own and its negatives' (``text_tokens``: the ``[anchors; negatives]`` rows x
    L x D of `layout`; ``present`` n x C says which exist, a missing one counting as zeros; ``token_mask`` n x C x
    L' which of their first L' positions count). Every token's patches averaged with `patch_weights` of their
    similarity (no gradient through the weights, as in FSC-CLIP), normalised, and scored against the normalised
    token; ``log sum_t exp(s cos)`` over the caption's tokens. -> n x C. The cosines are `GroupedCosine`'s, their
    gradients written into ``memory`` (None: new memory)."""
    packing = TokenPacking(present, token_mask, pictures_per_pass)
    cosine = GroupedCosine.apply(text_tokens, image_tokens, packing, normalizer, sparsify,
                                 GradientMemory(keep=False) if memory is None else memory)
    return torch.logsumexp((logit_scale * cosine).masked_fill(~token_mask, float("-inf")), dim=-1)


class GradientMemory:
    """Memory for the gradients of the token features and for the averaged patches the backward pass reads, kept
    from one step to the next on the CPU. The CPU allocator gives blocks this large back to the operating system
    when they are freed (the two gradients are 528 MB at N = 1024 with K = 1, 77 positions and the patches of every
    row), and fresh memory costs a page fault per 4 KB page when it is first written: about 0.7x open_clip's
    ClipLoss step at that size (docs/benchmarks.md). A kept block is handed out again only when nothing else holds
    it (the gradient it held last was used and dropped, no view of it is left, the backward pass that reads it is
    done); otherwise, on other devices (whose allocators keep their blocks) and with ``keep=False``, the memory is
    new. Between steps the kept blocks hold what the backward pass holds at its start anyway."""

    def __init__(self, keep: bool = True):
        self.keep = keep
        self._storages: dict[str, torch.UntypedStorage] = {}

    def empty(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """A contiguous tensor of ``like``'s shape, dtype and device; its values are undefined."""
        return self.empty_of(name, like.shape, like.dtype, like.device)

    def empty_of(self, name: str, shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A contiguous tensor of this shape, dtype and device; its values are undefined."""
        holders = getattr(torch._C, "_storage_Use_Count", None)
        if not self.keep or torch.device(device).type != "cpu" or holders is None:
            return torch.empty(shape, dtype=dtype, device=device)
        size = torch.Size(shape).numel() * dtype.itemsize
        storage = self._storages.get(name)
        if storage is None or storage.nbytes() != size or holders(storage._cdata) != 1:  # 1: this reference
            storage = self._storages[name] = torch.UntypedStorage(size)
        return torch.empty(0, dtype=dtype).set_(storage, 0, shape)


def caption_slots(rows: torch.Tensor, n: int, k: int) -> list[torch.Tensor]:
    """Views of ``[anchors; negatives]`` rows, one per caption slot, each n rows long: the anchors', then each
    anchor's j-th negative (row n + a K + j) for j < K."""
    return [rows[:n]] + [rows[n + j::k] for j in range(k)]


class TokenPacking:
    """Where `GroupedCosine` reads each counted token: the tokens of each anchor picture's captions that exist and
    count (``token_mask`` & ``present``, n x C x L'), packed picture by picture without the positions that do not
    count (padding, the start token), so that no work is spent on them. Pictures go in passes of
    ``pictures_per_pass``, sorted by their number of counted tokens (stable), so that a pass pads its pictures to
    a width close to each one's count. ``slots``: the passes' padded slots, side by side; ``filled`` (slots bool):
    those that hold a token, in the order of ``grid`` (each token's flat index in n x C x L') and of ``rows`` and
    ``positions`` (where it sits in the ``[anchors; negatives]`` token features)."""

    def __init__(self, present: torch.Tensor, token_mask: torch.Tensor, pictures_per_pass: int):
        n, count, length = token_mask.shape
        self.n, self.shape = n, token_mask.shape
        counted = token_mask & present[..., None]
        per_picture = counted.flatten(1).sum(dim=1)
        sizes, order = torch.sort(per_picture, stable=True)
        picture, caption, position = counted[order].nonzero(as_tuple=True)
        anchor = order[picture]
        self.rows = torch.where(caption == 0, anchor, n + anchor * (count - 1) + caption - 1)
        self.positions = position
        self.length = length
        self.grid = (anchor * count + caption) * length + position
        starts = torch.cumsum(sizes, dim=0) - sizes
        self.passes, filled, offset = [], [], 0
        for first in range(0, n, pictures_per_pass):
            last = min(first + pictures_per_pass, n)
            width = int(sizes[last - 1])
            slot = torch.arange(width, device=sizes.device)
            holds = slot < sizes[first:last, None]
            at = (starts[first:last, None] + slot).clamp_max(max(len(self.rows) - 1, 0))
            self.passes.append((order[first:last], at, holds, slice(offset, offset + holds.numel())))
            filled.append(holds.flatten())
            offset += holds.numel()
        self.slots, self.filled = offset, torch.cat(filled)

    def flat(self, text_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``text_tokens`` as (rows L) x D (a view where they are contiguous) and each counted token's row in it."""
        return text_tokens.reshape(-1, text_tokens.shape[-1]), self.rows * text_tokens.shape[1] + self.positions

    def features(self, text_tokens: torch.Tensor, image_tokens: torch.Tensor, dtype):
        """Per pass: (its pictures, their patches (b x P x D), their packed tokens (b x width x D), which slots
        hold one of the picture's tokens, its slots' range in ``slots``, where each slot reads its token in
        `flat`'s rows), in ``dtype``. A slot that holds none reads another counted token (of a caption that
        exists: finite, whatever a missing caption's row holds), so that no copy is spent on masking it: its
        cosine is never read and its gradient is exactly 0. The patches are copied pass by pass: a pass's copy is
        small enough to stay in the cache for its products."""
        flat, at_row = self.flat(text_tokens)
        for pictures, at, holds, slots in self.passes:
            reads = at_row[at.flatten()]
            packed = flat.index_select(0, reads).view(*at.shape, -1).to(dtype)
            yield pictures, image_tokens.index_select(0, pictures).to(dtype), packed, holds, slots, reads


class GroupedCosine(torch.autograd.Function):
    """cos(u_t, m_t), m_t = sum_p a_tp w_p, for the counted tokens u_t of each anchor picture's captions against
    the picture's patches w_p (`local_scores`' arguments, read as `TokenPacking` says; -> n x C x L', 0 where a
    token does not count), a_t = `patch_weights` of the similarities <u_t, w_p> (no gradient through them).

    The work goes in `TokenPacking`'s passes, so that every intermediate is a few MB that the allocator reuses and
    the cache holds; the gradients are written into the full-size gradients of ``text_tokens`` and
    ``image_tokens``. The gradient is written out rather than left to autograd (which would take a pass over the
    tokens for every elementwise step of the norms): with the averaged patches m kept from the forward pass (in
    ``memory``), d u = d_cos (m / (|u| |m|) - cos u / |u|^2), d m = d_cos (u / (|u| |m|) - cos m / |m|^2),
    d W = A^T d m, two products per pass forward (the similarities, m) and one backward (d W). Norms have
    F.normalize's floor (1e-12), with no gradient below it."""

    EPS = 1e-12

    @staticmethod
    def forward(ctx, text_tokens: torch.Tensor, image_tokens: torch.Tensor, packing: TokenPacking,
                normalizer: str, sparsify: bool, memory: GradientMemory) -> torch.Tensor:
        dtype = torch.promote_types(torch.promote_types(text_tokens.dtype, image_tokens.dtype), torch.float32)
        small = dict(dtype=dtype, device=text_tokens.device)
        weights = torch.empty(packing.slots, image_tokens.shape[1], **small)
        cosine, grouped_norm, token_norm = (torch.empty(packing.slots, **small) for _ in range(3))
        # the averaged patches m, kept for the backward pass (which would otherwise compute them again)
        grouped = memory.empty_of("grouped", (packing.slots, image_tokens.shape[-1]), dtype, text_tokens.device)
        with torch.autocast(text_tokens.device.type, enabled=False):  # in float32 at least, as the rest of the loss
            for _, patches, tokens, holds, slots, _ in packing.features(text_tokens, image_tokens, dtype):
                similarity = tokens @ patches.transpose(1, 2)
                a = patch_weights(similarity, normalizer, sparsify)
                weights[slots] = a.flatten(0, 1)
                m = torch.bmm(a, patches, out=grouped[slots].view(*holds.shape, -1))
                grouped_norm[slots] = torch.linalg.vector_norm(m, dim=-1).flatten()
                token_norm[slots] = torch.linalg.vector_norm(tokens, dim=-1).flatten()
                cosine[slots] = (a * similarity).sum(dim=-1).flatten()
        eps = GroupedCosine.EPS
        grouped_floor, token_floor = grouped_norm.clamp_min(eps), token_norm.clamp_min(eps)
        cosine /= grouped_floor * token_floor
        ctx.save_for_backward(text_tokens, image_tokens, weights, cosine, grouped_floor, token_floor,
                              grouped_norm > eps, token_norm > eps)
        ctx.packing, ctx.memory, ctx.grouped = packing, memory, grouped
        out = torch.zeros(packing.shape, **small)
        out.view(-1)[packing.grid] = cosine[packing.filled]
        return out

    @staticmethod
    def backward(ctx, d_out: torch.Tensor):
        text_tokens, image_tokens, weights, cosine, grouped_floor, token_floor, grouped_above, \
            token_above = ctx.saved_tensors
        packing = ctx.packing
        zero = torch.zeros((), dtype=cosine.dtype, device=cosine.device)
        d_cosine = torch.zeros_like(cosine)
        d_cosine[packing.filled] = d_out.reshape(-1)[packing.grid]
        d_dot = (d_cosine / (grouped_floor * token_floor))[:, None]
        # d cos / d |m| = -cos / |m| and d |m| / d m = m / |m| above the floor; the same for u
        grouped_scale = torch.where(grouped_above, -d_cosine * cosine / (grouped_floor * grouped_floor),
                                    zero)[:, None]
        token_scale = torch.where(token_above, -d_cosine * cosine / (token_floor * token_floor), zero)[:, None]
        # the tokens that do not count and the negatives' pictures get no gradient; every anchor picture is in
        # one pass, which writes its rows
        d_text = ctx.memory.empty("text_tokens", text_tokens).zero_()
        d_flat = d_text.view(-1, d_text.shape[-1])
        d_image = ctx.memory.empty("image_tokens", image_tokens)
        d_image[packing.n:] = 0
        with torch.autocast(text_tokens.device.type, enabled=False):
            for pictures, patches, tokens, holds, slots, reads in packing.features(text_tokens, image_tokens,
                                                                                  cosine.dtype):
                b, width = holds.shape
                a = weights[slots].view(b, width, -1)
                grouped = ctx.grouped[slots].view(b, width, -1)
                d_dot_pass = d_dot[slots].view(b, width, 1)
                d_grouped = torch.addcmul(grouped_scale[slots].view(b, width, 1) * grouped, d_dot_pass, tokens)
                d_image.index_copy_(0, pictures, (a.transpose(1, 2) @ d_grouped).to(d_image.dtype))
                d_tokens = torch.addcmul(token_scale[slots].view(b, width, 1) * tokens, d_dot_pass, grouped)
                # added, not copied: a slot that holds no token of the pass reads another one, and adds it 0
                d_flat.index_add_(0, reads, d_tokens.flatten(0, 1).to(d_flat.dtype))
        return d_text, d_image, None, None, None, None


class OneProductClipLoss(ClipLoss):
    """open_clip's `ClipLoss`, with one process's logits per text read as the transpose of its logits per image, as
    `ClipLoss` itself reads them for a gathered batch without ``local_loss``: one product forward and two backward
    instead of two and four (the same dot products, each summed by the one product; gathered batches, and a
    ``logit_bias``, as open_clip computes them)."""

    def get_logits(self, image_features, text_features, logit_scale, logit_bias=None):
        if self.world_size > 1 or logit_bias is not None:
            return super().get_logits(image_features, text_features, logit_scale, logit_bias)
        logits_per_image = logit_scale * image_features @ text_features.T
        return logits_per_image, logits_per_image.T


class FSCCLIPLoss(HardNegativeLoss):
    """FSC-CLIP's loss on the `layout` batch (module docstring). ``forward(..., image_tokens=, text_tokens=,
    text_token_mask=)``: the extras of `needs` when the local loss is on (`concrete_jungle.models.token_features`):
    patch features of the anchor pictures (n or n (1 + K) rows x P x D; only the anchors' are read), token
    features of every caption (n (1 + K) x L x D) and which tokens count (n (1 + K) x L bool). ``concreteness``
    gives the batch's shape only: FSC-CLIP does not read ratings.

    Data parallel: CLIP's loss is open_clip's `ClipLoss` on the anchors; the hard-negative losses need no
    gathered features, their means are over the global batch (`sample_terms.global_mean`)."""

    needs = frozenset({"image_tokens", "text_tokens", "text_token_mask"})  # with local_negatives on (else none)

    options_class = FSCCLIPOptions

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.clip = OneProductClipLoss(local_loss=self.local_loss, gather_with_grad=self.gather_with_grad,
                                       cache_labels=self.cache_labels, rank=self.rank, world_size=self.world_size)
        self.gradient_memory = GradientMemory()
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
                                  o.sim_sparsify, memory=self.gradient_memory)
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
                             "(concrete_jungle.models.token_features); set loss.fsc_clip.local_negatives: false to "
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
                             "end-of-text token (concrete_jungle.models.token_features)")
        # positions after the last one any caption counts add nothing: the work is over the captions' length
        last = int(counted.any(dim=0).nonzero().max()) + 1
        present = torch.cat([torch.ones_like(has_negative[:, :1]), has_negative], dim=1)
        mask = torch.stack([slot[:, :last] for slot in caption_slots(mask, n, k)], dim=1)
        if not bool(has_negative.all()):
            only_first = torch.zeros_like(mask)
            only_first[..., 0] = True
            mask = torch.where(present[..., None], mask, only_first)
        return present, mask
