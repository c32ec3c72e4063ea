"""The hard-negative batch every loss of this package reads: N anchors, K >= 1 negatives each, some missing.

On each rank the features are ``[anchors; negatives]``: n anchor rows, then n * K negative rows in anchor-major
order (row ``n + a * K + k`` is anchor a's k-th negative). A negative always has a caption; it may lack a picture
(NegCLIP's, FSC-CLIP's and CE-CLIP's negatives are captions only). Per sample, ``has_negative`` (n x K) says
which negative captions exist and ``has_negative_image`` (n x K) which of their pictures do; a missing row of
either tower is masked out of every softmax (-inf), never a zero-filled column, and its feature values are
replaced (`torch.where`) or left unselected before any arithmetic: whatever it holds, NaN included, reaches neither
the loss nor its gradient. Vectors of shape (n,) are read as K = 1, the layout of a ConcreteBatch with one negative.

``anchor_true_of_negative`` (n x K) says which negatives' pictures the anchor's caption is still true of (the data's
decision; unknown counts as false). Such a picture is a false negative for the image side: with ``mask_entailed``
the logit of the anchor's caption against it is -inf in both directions where a loss reads it (`entailed_pairs`).

A picture may have P >= 1 positive captions (COCO's five; CLIC's joined captions): the anchor's caption (its row
above) and P - 1 more, given apart as ``positive_text_features`` (n x (P - 1) x D) with ``has_positive``
(n x (P - 1) bool), to a loss that reads them (its ``needs``): a missing one is masked the same way, never a
zero-filled caption (`picture_positives`).

Data parallel follows open_clip's `ClipLoss` (`gather_features`, `local_loss`, `gather_with_grad`): the gathered
``[a_0; n_0; a_1; n_1; ...]`` rows are re-ordered to ``[a_0; a_1; ...; n_0; n_1; ...]``, so that row indices
are global: anchor ``a`` of rank ``r`` is row ``r * n + a``, its k-th negative ``N + (r * n + a) * K + k``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn


def per_sample(values: torch.Tensor | None, n: int, k: int, name: str, dtype: torch.dtype,
               device: torch.device, fill=True) -> torch.Tensor:
    """``values`` as an n x K tensor (a vector of n is K = 1; None is ``fill`` everywhere)."""
    if values is None:
        return torch.full((n, k), fill, dtype=dtype, device=device)
    values = torch.as_tensor(values, device=device)
    if values.ndim == 1 and k == 1:
        values = values[:, None]
    if values.shape != (n, k):
        raise ValueError(f"{name} has shape {tuple(values.shape)}; expected ({n}, {k}) (one value per anchor and "
                         f"negative) or ({n},) when each anchor has one negative")
    if values.dtype != dtype:
        if dtype == torch.bool:
            raise ValueError(f"{name} must be a bool tensor, got {values.dtype}")
        values = values.to(dtype)
    return values


def picture_positives(captions: torch.Tensor, more: torch.Tensor | None,
                      has_more: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(n x P x D, n x P bool): each picture's positive captions, the anchor's first, and which exist; a missing
    one's features replaced by zeros through `torch.where` (whatever it held, NaN included, reaches no gradient).
    ``more`` None: P = 1."""
    n, d = captions.shape
    if more is None:
        more = captions.new_zeros(n, 0, d)
    if more.ndim != 3 or more.shape[0] != n or more.shape[2] != d:
        raise ValueError(f"positive_text_features has shape {tuple(more.shape)}; expected ({n}, P - 1, {d})")
    has_more = per_sample(has_more, n, more.shape[1], "has_positive", torch.bool, captions.device) \
        if more.shape[1] else torch.zeros(n, 0, dtype=torch.bool, device=captions.device)
    exists = torch.cat([torch.ones(n, 1, dtype=torch.bool, device=captions.device), has_more], dim=1)
    more = torch.where(has_more[..., None], more, torch.zeros((), dtype=more.dtype, device=more.device))
    return torch.cat([captions[:, None], more.to(captions.dtype)], dim=1), exists


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32 when it is in a half type (features under autocast): the per-sample logits and sums are
    small, and their softmaxes and sums keep float32's precision, as open_clip's cross-entropy does under AMP."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def negatives_per_anchor(rows: int, n: int, name: str = "features") -> int:
    """K from a rank's row count ``n * (1 + K)``."""
    if n < 1 or rows % n or rows // n < 2:
        raise ValueError(f"{name} has {rows} rows for {n} anchors; expected n * (1 + K) rows ordered "
                         "[anchors; negatives] with K >= 1 negatives per anchor")
    return rows // n - 1


def warn_unnormalised(loss: nn.Module, image_features: torch.Tensor, text_features: torch.Tensor,
                      has_negative: torch.Tensor, has_negative_image: torch.Tensor, name: str) -> None:
    """Warn once per loss module when the features of rows that exist are not unit vectors: the losses assume
    cosine logits."""
    anchors = torch.ones(has_negative.shape[0], dtype=torch.bool, device=has_negative.device)
    texts = torch.cat([anchors, has_negative.flatten()])
    images = torch.cat([anchors, (has_negative_image & has_negative).flatten()])
    with torch.no_grad():
        norms = torch.cat([image_features[images].norm(dim=1), text_features[texts].norm(dim=1)])
        if (norms - 1).abs().max() > 1e-2:  # unit vectors rounded to bf16 (autocast) are off by up to 5e-3
            loss._warned_unnormalised = True
            warnings.warn(f"{name}: features are not L2-normalised (norms {norms.min().item():.3g}.."
                          f"{norms.max().item():.3g}); the loss assumes cosine logits. Normalise them (open_clip: "
                          "model(..., normalize=True)).", stacklevel=4)


def anchors_then_negatives(gathered: torch.Tensor, world_size: int, k: int = 1) -> torch.Tensor:
    """``[a_0; n_0; a_1; n_1; ...]`` (rank r's block: n anchor rows then n * K negative rows) ->
    ``[a_0; a_1; ...; n_0; n_1; ...]``."""
    per_rank = gathered.reshape(world_size, -1, *gathered.shape[1:])
    n = per_rank.shape[1] // (1 + k)
    return torch.cat([per_rank[:, :n].reshape(-1, *gathered.shape[1:]),
                      per_rank[:, n:].reshape(-1, *gathered.shape[1:])])


def gather_no_grad(t: torch.Tensor, world_size: int) -> torch.Tensor:
    """Every rank's ``t``, concatenated along dim 0 (no gradient: masks, ratings)."""
    import torch.distributed as dist

    parts = [torch.empty_like(t) for _ in range(world_size)]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts)


def gather_rows(image_features: torch.Tensor, text_features: torch.Tensor, k: int, local_loss: bool,
                gather_with_grad: bool, rank: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The global ``[anchors; negatives]`` features of both towers (`anchors_then_negatives`), gathered as
    open_clip's `gather_features` does (with or without the gradient through the gather)."""
    if world_size == 1:
        return image_features, text_features
    from open_clip.loss import gather_features

    all_images, all_texts = gather_features(image_features, text_features, local_loss=local_loss,
                                            gather_with_grad=gather_with_grad, rank=rank, world_size=world_size)
    return anchors_then_negatives(all_images, world_size, k), anchors_then_negatives(all_texts, world_size, k)


@dataclass(frozen=True)
class Layout:
    """Global indices of one batch: N anchors (all ranks), K negatives each, R = N (1 + K) rows.

    ``own`` are the rows this rank's loss computes (all R, or its own under ``local_loss``); ``pair_anchor[p]``
    and ``pair_negative[p]`` the rows of the p-th (anchor, negative) pair, ``p = a * K + k``."""

    n: int
    k: int
    text_valid: torch.Tensor  # (R,) bool: the row has a caption
    image_valid: torch.Tensor  # (R,) bool: the row has a picture
    has_negative: torch.Tensor  # (N, K) bool: the negative's caption exists
    has_negative_image: torch.Tensor  # (N, K) bool: and its picture
    own: torch.Tensor  # (rows,) long: global rows computed here
    entailed: torch.Tensor  # (N, K) bool: the negative's picture exists and its anchor's caption is true of it

    @property
    def rows(self) -> int:
        return self.n * (1 + self.k)

    @property
    def pair_anchor(self) -> torch.Tensor:
        return torch.arange(self.n, device=self.own.device).repeat_interleave(self.k)

    @property
    def pair_negative(self) -> torch.Tensor:
        return self.n + torch.arange(self.n * self.k, device=self.own.device)

    def entailed_pairs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(picture rows, caption rows) of the logits ``mask_entailed`` masks: each entailed negative's picture
        against its anchor's caption."""
        which = self.entailed.flatten()
        return self.pair_negative[which], self.pair_anchor[which]


def make_layout(has_negative: torch.Tensor, has_negative_image: torch.Tensor, n_local: int, rank: int,
                local_loss: bool, anchor_true_of_negative: torch.Tensor | None = None) -> Layout:
    """The `Layout` of a gathered batch (``has_negative``, ``has_negative_image`` and, where entailed pictures
    are masked, ``anchor_true_of_negative`` of every rank, N x K; None: none is masked)."""
    n, k = has_negative.shape
    device = has_negative.device
    anchors = torch.ones(n, dtype=torch.bool, device=device)
    # a picture without its caption cannot be a pair: it counts as missing
    images = has_negative_image & has_negative
    text_valid = torch.cat([anchors, has_negative.flatten()])
    image_valid = torch.cat([anchors, images.flatten()])
    if local_loss:
        mine = torch.arange(n_local, device=device) + n_local * rank
        own = torch.cat([mine, n + (mine[:, None] * k + torch.arange(k, device=device)).flatten()])
    else:
        own = torch.arange(n * (1 + k), device=device)
    entailed = images & anchor_true_of_negative if anchor_true_of_negative is not None else torch.zeros_like(images)
    return Layout(n, k, text_valid, image_valid, has_negative, images, own, entailed)


def hard_columns(layout: Layout) -> tuple[torch.Tensor, torch.Tensor]:
    """For each of the R rows, the columns of its hard counterparts, padded with -1 to K per row: an anchor's K
    negatives, a negative's anchor. (R x K long, and R x K bool for the entries that are real columns.)"""
    n, k, device = layout.n, layout.k, layout.own.device
    anchor_cols = layout.n + torch.arange(n * k, device=device).reshape(n, k)
    negative_cols = torch.full((n * k, k), -1, dtype=torch.long, device=device)
    negative_cols[:, 0] = layout.pair_anchor
    cols = torch.cat([anchor_cols, negative_cols])
    return cols.clamp(min=0), cols >= 0


class HardNegativeLoss(nn.Module):
    """What every loss of this package holds: its options, open_clip's data-parallel settings (``local_loss``,
    ``gather_with_grad``, ``cache_labels``, ``rank``, ``world_size``), whether it masks entailed negative pictures
    (``mask_entailed``), the extras it reads (``needs``), and whether it has warned of features that are not unit
    vectors."""

    needs: frozenset[str] = frozenset()
    options_class: type  # the loss's options (`loss_options`): their defaults serve when none are given

    def __init__(self, options=None, local_loss: bool = False, gather_with_grad: bool = False,
                 cache_labels: bool = True, rank: int = 0, world_size: int = 1, mask_entailed: bool = False):
        super().__init__()
        self.options = self.options_class() if options is None else options
        self.mask_entailed = mask_entailed
        self.local_loss, self.gather_with_grad, self.cache_labels = local_loss, gather_with_grad, cache_labels
        self.rank, self.world_size = rank, world_size
        self._warned_unnormalised = False
