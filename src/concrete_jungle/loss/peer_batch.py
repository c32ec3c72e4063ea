"""The batch every peer loss of the NegCLIP family reads (NegCLIP, TripletCLIP, CE-CLIP): the inputs checked
and gathered as open_clip's `ClipLoss` gathers them (`read_batch`), and the two-way contrastive term over chosen
image-caption pairs and caption columns (`pair_nll`) that each of them builds its loss from."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .layout import (
    Layout,
    at_least_float32,
    gather_no_grad,
    gather_rows,
    make_layout,
    negatives_per_anchor,
    per_sample,
    warn_unnormalised,
)


@dataclass
class PeerBatch:
    """One batch as the peer losses read it: global features (all ranks, `layout` order), the rows this rank
    computes and their features (its own under ``local_loss``, else all), and ``share``, the factor that makes the
    mean over ranks of per-rank losses the global loss (the world size under ``local_loss``, else 1)."""

    layout: Layout
    images: torch.Tensor  # R x D
    texts: torch.Tensor  # R x D
    own_images: torch.Tensor  # rows layout.own
    own_texts: torch.Tensor
    share: int
    all_rows: bool  # this rank computes every row (not local_loss)
    mask_entailed: bool = False  # the logits of entailed negative pictures against their anchors' captions: -inf

    @property
    def rows(self) -> int:
        return self.layout.rows

    @property
    def anchors(self) -> torch.Tensor:
        """(R,) bool: the anchor rows."""
        return torch.arange(self.rows, device=self.layout.own.device) < self.layout.n


def read_batch(loss: nn.Module, image_features: torch.Tensor, text_features: torch.Tensor, logit_scale,
               concreteness: torch.Tensor, has_negative: torch.Tensor | None,
               has_negative_image: torch.Tensor | None,
               anchor_true_of_negative: torch.Tensor | None = None) -> PeerBatch:
    """Check a peer loss's inputs and gather them as open_clip's ClipLoss does (``loss`` carries ``local_loss``,
    ``gather_with_grad``, ``rank``, ``world_size`` and ``mask_entailed``). ``concreteness`` only gives n and K
    here."""
    name = type(loss).__name__
    if image_features.ndim != 2 or image_features.shape != text_features.shape:
        raise ValueError(f"{name}: image_features {tuple(image_features.shape)} and text_features "
                         f"{tuple(text_features.shape)} must both be rows x dim, with the same shape")
    if concreteness.ndim not in (1, 2):
        raise ValueError(f"{name}: concreteness has shape {tuple(concreteness.shape)}; expected (n,) or (n, K)")
    n, device = concreteness.shape[0], image_features.device
    k = negatives_per_anchor(image_features.shape[0], n, "image_features")
    if concreteness.ndim == 1 and k != 1:
        raise ValueError(f"{name}: concreteness has shape {tuple(concreteness.shape)}; expected ({n}, {k})")
    if torch.as_tensor(logit_scale).numel() != 1:
        raise ValueError(f"{name}: logit_scale must be a scalar (the exponentiated scale, as open_clip returns it)")
    has_negative = per_sample(has_negative, n, k, "has_negative", torch.bool, device)
    has_image = per_sample(has_negative_image, n, k, "has_negative_image", torch.bool, device)
    if not loss._warned_unnormalised:
        warn_unnormalised(loss, image_features, text_features, has_negative, has_image, name)
    all_images, all_texts = gather_rows(image_features, text_features, k, loss.local_loss, loss.gather_with_grad,
                                        loss.rank, loss.world_size)
    entailed = per_sample(anchor_true_of_negative, n, k, "anchor_true_of_negative", torch.bool, device,
                          fill=False) if loss.mask_entailed else None
    if loss.world_size > 1:
        has_negative, has_image = (gather_no_grad(t, loss.world_size) for t in (has_negative, has_image))
        entailed = None if entailed is None else gather_no_grad(entailed, loss.world_size)
    layout = make_layout(has_negative, has_image, n, loss.rank, loss.local_loss, entailed)
    if loss.local_loss:
        return PeerBatch(layout, all_images, all_texts, image_features, text_features, loss.world_size, False,
                         loss.mask_entailed)
    return PeerBatch(layout, all_images, all_texts, all_images, all_texts, 1, True, loss.mask_entailed)


def positions(columns: torch.Tensor, rows: torch.Tensor, size: int) -> torch.Tensor:
    """Where each global index of ``rows`` sits in the index list ``columns`` (-1 where it is not one of them)."""
    where = torch.full((size,), -1, dtype=torch.long, device=columns.device)
    where[columns] = torch.arange(columns.numel(), device=columns.device)
    return where[rows]


def leading(rows: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``rows[mask]``, as a view when the mask selects a leading block (every row, or the anchors)."""
    count = int(mask.sum())
    return rows[:count] if bool(mask[:count].all()) else rows[mask]


def columns_at(logits: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """``logits[:, columns]`` for increasing ``columns``, as a view when they are a contiguous run."""
    if columns.numel() and int(columns[-1] - columns[0]) + 1 == columns.numel():
        return logits[:, int(columns[0]):int(columns[-1]) + 1]
    return logits.index_select(1, columns)


def pair_nll(batch: PeerBatch, logit_scale, pairs: torch.Tensor,
             captions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each of this rank's rows in ``pairs`` (R bool: rows that are an image and its caption): -log softmax of
    its image against the caption columns ``captions`` (R bool, holding ``pairs``) at its own caption, the same of
    its caption against the images of ``pairs``, and its own logit s <v, t>. Rows and columns that are not
    selected are never read: a missing row's values reach neither the loss nor the gradient. With the batch's
    ``mask_entailed``, an entailed negative picture's logit against its anchor's caption is -inf wherever the two
    meet here (`mask_pairs_`)."""
    layout = batch.layout
    mine = pairs[layout.own]
    own_rows = layout.own[mine]
    image, text = leading(batch.own_images, mine), leading(batch.own_texts, mine)
    # the own logit from the two vectors (in float32 at least) rather than picked from the matrix: picking
    # would cost the backward pass a zero-filled matrix per direction
    positive = logit_scale * (at_least_float32(image) * at_least_float32(text)).sum(dim=1)
    logits = at_least_float32(logit_scale * image @ leading(batch.texts, captions).T)
    caption_rows = torch.nonzero(captions).squeeze(1)
    if batch.mask_entailed:
        pictures, anchors = layout.entailed_pairs()
        mask_pairs_(logits, own_rows, pictures, caption_rows, anchors, batch.rows)
    i2t = torch.logsumexp(logits, dim=1) - positive
    if batch.all_rows:
        # the rows are every pair, in order: their text-to-image logits are the columns of the pairs' captions in
        # these logits, and each caption's softmax runs down its column (one matrix serves both directions)
        columns = positions(caption_rows, own_rows, batch.rows)
        t2i = torch.logsumexp(columns_at(logits, columns), dim=0) - positive
    else:
        logits = at_least_float32(logit_scale * text @ leading(batch.images, pairs).T)
        if batch.mask_entailed:
            mask_pairs_(logits, own_rows, anchors, torch.nonzero(pairs).squeeze(1), pictures, batch.rows)
        t2i = torch.logsumexp(logits, dim=1) - positive
    return i2t, t2i, positive


def mask_pairs_(logits: torch.Tensor, row_ids: torch.Tensor, rows: torch.Tensor, column_ids: torch.Tensor,
                columns: torch.Tensor, size: int) -> None:
    """In place: -inf at each (``rows[p]``, ``columns[p]``) (global rows of the batch) that is an entry of
    ``logits``, whose rows are the global rows ``row_ids`` and columns ``column_ids``."""
    at, other = positions(row_ids, rows, size), positions(column_ids, columns, size)
    present = (at >= 0) & (other >= 0)
    logits.index_put_((at[present], other[present]), logits.new_tensor(float("-inf")))


def mean_term(nll: torch.Tensor, count: int, share: int) -> torch.Tensor:
    """This rank's part of a global mean over ``count`` rows (0 when there are none)."""
    return nll.sum() * (share / count) if count else nll.sum() * 0.0
