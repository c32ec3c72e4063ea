"""Per-sample terms of the hard-negative losses: an anchor against its own K negatives, never the batch.

FSC-CLIP's hard-negative losses and DeGLA's grounded contrasts score each anchor against its own caption and its
own negatives only: a (1 + K)-way choice per anchor, with a missing negative masked (-inf), not zero-filled. Such
a term needs no gathered features; under data parallelism only its sum and its count of rows cross ranks.
`global_mean` makes that sum follow open_clip's `ClipLoss` conventions, so that a loss adding these terms to a
gathered contrastive term keeps one meaning on any number of processes (tests/test_peer_losses.py).
"""

from __future__ import annotations

import torch

from .layout import at_least_float32, negatives_per_anchor, per_sample, warn_unnormalised


def check_batch(loss, image_features: torch.Tensor, text_features: torch.Tensor, logit_scale,
                concreteness: torch.Tensor, has_negative: torch.Tensor | None,
                name: str) -> tuple[int, int, torch.Tensor]:
    """(n, K, has_negative as n x K bool) of a rank's ``[anchors; negatives]`` batch, after the checks every loss
    makes: 2-D features of one shape, n (1 + K) rows, a scalar scale; a warning once if the features of the rows
    that exist are not unit vectors."""
    if image_features.ndim != 2 or image_features.shape != text_features.shape:
        raise ValueError(f"image_features {tuple(image_features.shape)} and text_features "
                         f"{tuple(text_features.shape)} must both be rows x dim, of the same shape")
    if concreteness.ndim not in (1, 2):
        raise ValueError(f"concreteness has shape {tuple(concreteness.shape)}; expected (n,) or (n, K), "
                         "one value per anchor and negative")
    n = concreteness.shape[0]
    k = negatives_per_anchor(image_features.shape[0], n, "image_features")
    if torch.as_tensor(logit_scale).numel() != 1:
        raise ValueError("logit_scale must be a scalar (the exponentiated scale, as open_clip returns it)")
    has_negative = per_sample(has_negative, n, k, "has_negative", torch.bool, image_features.device)
    if not loss._warned_unnormalised:  # the rows these losses read: every caption that exists, anchor pictures
        warn_unnormalised(loss, image_features, text_features, has_negative, torch.zeros_like(has_negative), name)
    return n, k, has_negative


def split_negatives(rows: torch.Tensor, n: int, k: int, has_negative: torch.Tensor) -> torch.Tensor:
    """The negative rows of ``[anchors; negatives]`` as n x K x ...; a missing one replaced by zeros through
    `torch.where`, so that whatever it held (even NaN) reaches neither the loss nor its gradient."""
    negatives = rows[n:].reshape(n, k, *rows.shape[1:])
    keep = has_negative.reshape(n, k, *([1] * (rows.ndim - 1)))
    return torch.where(keep, negatives, torch.zeros((), dtype=rows.dtype, device=rows.device))


def own_choice_logits(positive: torch.Tensor, negatives: torch.Tensor, has_negative: torch.Tensor) -> torch.Tensor:
    """n x (1 + K) logits: column 0 the positive's, column 1 + k the k-th negative's, -inf where it is missing."""
    logits = at_least_float32(torch.cat([positive[:, None], negatives], dim=1))
    present = torch.cat([torch.ones_like(has_negative[:, :1]), has_negative], dim=1)
    return logits.masked_fill(~present, float("-inf"))


def global_mean(local_sum: torch.Tensor, local_count: torch.Tensor | None, local_loss: bool, gather_with_grad: bool,
                rank: int, world_size: int) -> torch.Tensor:
    """The sum of a per-sample term over the global batch divided by its global count of rows (``local_count``
    None: the sum itself), with open_clip's data-parallel semantics:

    - without ``local_loss`` every rank returns the global value; its gradient reaches this rank's rows only, or,
      with ``gather_with_grad``, every rank's rows through the gather (as `ClipLoss`'s gathered features do);
    - with ``local_loss`` a rank returns its share (``world_size`` x its sum / the global count), so that the mean
      over ranks, which DDP's gradient average takes, is the global value.

    No row at all counts as 0, not NaN: a batch without a single negative has nothing to add."""
    if world_size == 1:
        return local_sum if local_count is None else local_sum / local_count.clamp_min(1)
    import torch.distributed as dist

    denominator = 1
    if local_count is not None:
        denominator = local_count.detach().reshape(1).clone()
        dist.all_reduce(denominator)
        denominator = denominator.clamp_min(1).to(local_sum.dtype).squeeze(0)
    if local_loss:
        return local_sum * world_size / denominator
    if gather_with_grad:
        from torch.distributed.nn.functional import all_gather

        total = torch.cat(all_gather(local_sum.reshape(1))).sum()
    else:
        parts = [torch.empty(1, dtype=local_sum.dtype, device=local_sum.device) for _ in range(world_size)]
        dist.all_gather(parts, local_sum.detach().reshape(1))
        parts[rank] = local_sum.reshape(1)
        total = torch.cat(parts).sum()
    return total / denominator
