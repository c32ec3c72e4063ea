"""Cement loss: InfoNCE over anchors and hard negatives with a per-sample margin on the hard-negative logit.

docs/method.md §5 (paper §2.3). A batch holds N anchor pairs and their N hard-negative pairs, features ordered
``[anchors; negatives]`` (2N images, 2N texts, L2-normalised). With ``S = s * I @ T.T``:

    h(a)      = (a + N) mod 2N                   the hard-negative column of row a
    S~[a, b]  = S[a, b] + m_a  if b == h(a)      m_a = m_{a+N} = schedule(c_a)
    L         = (CE(S~, arange) + CE(S~.T, arange)) / 2

Because m is shared by a pair and its negative, the margins of S~ sit at the transposed places of
S~.T, so one margined matrix serves both directions. A sample without a hard negative has its
negative row and column masked out of the softmax (-inf), never zero-filled.

Data parallel follows open_clip's `ClipLoss` (`gather_features`, `local_loss`, `gather_with_grad`,
cached labels); the gathered ``[a_0; n_0; a_1; n_1; ...]`` rows are re-ordered to
``[a_0; a_1; ...; n_0; n_1; ...]`` before `h` is applied, so indices are global.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

# ---------------------------------------------------------------- margin schedules: concreteness -> margin


@dataclass(frozen=True)
class NoMargin:
    """InfoNCE over 2N: every margin is 0."""

    def __call__(self, c: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(c)


@dataclass(frozen=True)
class StaticMargin:
    """The same margin for every sample (paper's ablation: 1)."""

    value: float = 1.0

    def __call__(self, c: torch.Tensor) -> torch.Tensor:
        return torch.full_like(c, self.value)


@dataclass(frozen=True)
class AdaptiveMargin:
    """Cement's Fermi-Dirac margin: m_max for concrete keywords (c > c~), m_min for abstract ones."""

    m_min: float = -2.0
    m_max: float = 2.0
    center: float = 4.0  # c~
    tau: float = 0.15  # tau_m

    def __call__(self, c: torch.Tensor) -> torch.Tensor:
        # (m_max - m_min) / (1 + exp((c~ - c) / tau)) + m_min, written with sigmoid for stability
        return (self.m_max - self.m_min) * torch.sigmoid((c - self.center) / self.tau) + self.m_min


@dataclass(frozen=True)
class InverseMargin(AdaptiveMargin):
    """The paper's ablation: the adaptive schedule mirrored (m_min above c~, m_max below)."""

    def __call__(self, c: torch.Tensor) -> torch.Tensor:
        return (self.m_max - self.m_min) * torch.sigmoid((self.center - c) / self.tau) + self.m_min


SCHEDULES: dict[str, type] = {"none": NoMargin, "static": StaticMargin, "adaptive": AdaptiveMargin,
                              "inverse": InverseMargin}


def make_schedule(name: str, **params) -> Callable[[torch.Tensor], torch.Tensor]:
    """A schedule by name with its parameters, e.g. ``make_schedule("adaptive", tau=0.2)``."""
    if name not in SCHEDULES:
        raise ValueError(f"margin schedule {name!r} is not one of {sorted(SCHEDULES)}")
    try:
        return SCHEDULES[name](**params)
    except TypeError as e:
        raise ValueError(f"margin schedule {name!r}: {e}") from None


# ---------------------------------------------------------------- the margined, masked InfoNCE core


def add_margins_(
    logits: torch.Tensor, hard_cols: torch.Tensor, margins: torch.Tensor, masked_cols: torch.Tensor,
    mask_rows_too: bool = False,
) -> torch.Tensor:
    """In place: ``margins[row]`` added at ``(row, hard_cols[row])``, ``masked_cols`` set to -inf.

    ``mask_rows_too`` also fills those rows, for a square matrix whose columns' softmax is taken too
    (there a missing negative image would otherwise enter every text's denominator).

    A sparse add of one entry per row and a column fill, on logits that nothing else needs (the matmul
    that made them keeps only its inputs for backward): no extra rows x cols tensor is made.
    """
    rows = torch.arange(logits.shape[0], device=logits.device)
    logits.index_put_((rows, hard_cols), margins.to(logits.dtype), accumulate=True)
    if masked_cols.numel():
        logits.index_fill_(1, masked_cols, float("-inf"))
        if mask_rows_too:
            logits.index_fill_(0, masked_cols, float("-inf"))
    return logits


def nll_sum(log_probs: torch.Tensor, labels: torch.Tensor, valid_rows: torch.Tensor) -> torch.Tensor:
    """Sum over the valid rows of -log p[row, label]."""
    return -log_probs.gather(1, labels[:, None]).squeeze(1)[valid_rows].sum()


@torch.no_grad()
def row_statistics(log_probs: torch.Tensor, labels: torch.Tensor, hard_cols: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Per row: p_ii and the hard-negative gradient share p_{i,h(i)} / (1 - p_ii) (docs/method.md §5).

    The share is computed in log space, as p_{i,h(i)} over the sum of the row's other off-diagonal probabilities:
    for a confident model p_ii rounds to 1 and ``1 - p_ii`` to 0 in float32, where the plain ratio explodes."""
    p_pos = log_probs.gather(1, labels[:, None]).squeeze(1).exp()
    others = log_probs.scatter(1, labels[:, None], float("-inf"))
    log_share = log_probs.gather(1, hard_cols[:, None]).squeeze(1) - torch.logsumexp(others, dim=1)
    return p_pos, torch.nan_to_num(log_share.exp(), nan=0.0)  # nan: a row with no other column at all


@torch.no_grad()
def logit_gap(logits: torch.Tensor, labels: torch.Tensor, hard_cols: torch.Tensor) -> torch.Tensor:
    """Per row, before any margin: S[i, i] - S[i, h(i)]."""
    return logits.gather(1, labels[:, None]).squeeze(1) - logits.gather(1, hard_cols[:, None]).squeeze(1)


# ---------------------------------------------------------------- data parallel


def _gather_no_grad(t: torch.Tensor, world_size: int) -> torch.Tensor:
    import torch.distributed as dist

    parts = [torch.empty_like(t) for _ in range(world_size)]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts)


def anchors_then_negatives(gathered: torch.Tensor, world_size: int) -> torch.Tensor:
    """``[a_0; n_0; a_1; n_1; ...]`` (each block n rows) -> ``[a_0; a_1; ...; n_0; n_1; ...]``."""
    n = gathered.shape[0] // (2 * world_size)
    return gathered.reshape(world_size, 2, n, -1).transpose(0, 1).reshape(2 * world_size * n, -1)


# ---------------------------------------------------------------- the loss module


class CementLoss(nn.Module):
    """InfoNCE over anchors + hard negatives with a concreteness-driven margin (docs/method.md §5).

    ``forward(image_features, text_features, logit_scale, concreteness, has_negative=None)``:
    features are 2n x D (n anchors then their n negatives, on this rank), ``concreteness`` is n,
    ``has_negative`` an optional n-bool mask (False: that sample's negative row and column are left
    out of the softmax). With ``output_dict=True`` it returns ``{"contrastive_loss", ...diagnostics}``:
    hard-negative gradient share (rows with a negative, both directions), mean p_ii, mean raw logit gap
    S[i,i] - S[i,i'] over anchors with a negative (image-to-text and text-to-image), mean margin; all
    detached and computed from the log-softmax the loss needs anyway.

    ``margin="none"`` with every negative present is open_clip's ClipLoss on the 2N pairs; with no
    negative at all it is ClipLoss on the N anchors.
    """

    def __init__(
        self,
        margin: str | Callable[[torch.Tensor], torch.Tensor] = "adaptive",
        local_loss: bool = False,
        gather_with_grad: bool = False,
        cache_labels: bool = True,
        rank: int = 0,
        world_size: int = 1,
        **margin_params,
    ):
        super().__init__()
        self.schedule = make_schedule(margin, **margin_params) if isinstance(margin, str) else margin
        self.local_loss = local_loss
        self.gather_with_grad = gather_with_grad
        self.cache_labels = cache_labels
        self.rank = rank
        self.world_size = world_size
        self._index_cache: dict = {}
        self._warned_unnormalised = False

    # -- checks
    def _check(self, image_features, text_features, logit_scale, concreteness, has_negative) -> None:
        if image_features.ndim != 2 or text_features.ndim != 2:
            raise ValueError(f"image_features and text_features must be 2-D (rows x dim), got "
                             f"{tuple(image_features.shape)} and {tuple(text_features.shape)}")
        if image_features.shape != text_features.shape:
            raise ValueError(f"image_features {tuple(image_features.shape)} and text_features "
                             f"{tuple(text_features.shape)} must have the same shape")
        rows = image_features.shape[0]
        if rows % 2:
            raise ValueError(f"image_features has {rows} rows; expected 2n rows ordered [anchors; negatives]")
        if concreteness.shape != (rows // 2,):
            raise ValueError(f"concreteness has shape {tuple(concreteness.shape)}; expected ({rows // 2},), "
                             "one value per anchor")
        if torch.isnan(concreteness).any():
            raise ValueError("concreteness contains NaN; rate every keyword or drop the sample")
        if has_negative is not None and (has_negative.shape != (rows // 2,) or has_negative.dtype != torch.bool):
            raise ValueError(f"has_negative must be a bool tensor of shape ({rows // 2},), got "
                             f"{has_negative.dtype} {tuple(has_negative.shape)}")
        if torch.as_tensor(logit_scale).numel() != 1:
            raise ValueError("logit_scale must be a scalar (the exponentiated scale, as open_clip returns it)")
        if not self._warned_unnormalised:
            with torch.no_grad():
                norms = torch.cat([image_features.norm(dim=1), text_features.norm(dim=1)])
                if (norms - 1).abs().max() > 1e-3:
                    self._warned_unnormalised = True
                    warnings.warn("CementLoss: features are not L2-normalised (norms "
                                  f"{norms.min().item():.3g}..{norms.max().item():.3g}); the margin assumes "
                                  "cosine logits. Normalise them (open_clip: model(..., normalize=True)).",
                                  stacklevel=3)

    # -- indices, cached per device and size like ClipLoss's labels
    def _indices(self, device, n_global: int, n_local: int) -> tuple[torch.Tensor, torch.Tensor]:
        key = (device, n_global, n_local, self.local_loss, self.rank)
        if key in self._index_cache:
            return self._index_cache[key]
        if self.local_loss:
            own = torch.arange(n_local, device=device) + n_local * self.rank
            labels = torch.cat([own, own + n_global])
        else:
            labels = torch.arange(2 * n_global, device=device)
        hard_cols = (labels + n_global) % (2 * n_global)
        if self.cache_labels:
            self._index_cache = {key: (labels, hard_cols)}
        return labels, hard_cols

    def _gather(self, image_features, text_features, concreteness, has_negative):
        from open_clip.loss import gather_features

        all_images, all_texts = gather_features(
            image_features, text_features, local_loss=self.local_loss, gather_with_grad=self.gather_with_grad,
            rank=self.rank, world_size=self.world_size,
        )
        all_images = anchors_then_negatives(all_images, self.world_size)
        all_texts = anchors_then_negatives(all_texts, self.world_size)
        all_c = _gather_no_grad(concreteness, self.world_size)
        all_mask = _gather_no_grad(has_negative, self.world_size)
        return all_images, all_texts, all_c, all_mask

    def forward(
        self,
        image_features: torch.Tensor,
        text_features: torch.Tensor,
        logit_scale: torch.Tensor | float,
        concreteness: torch.Tensor,
        has_negative: torch.Tensor | None = None,
        output_dict: bool = False,
    ):
        self._check(image_features, text_features, logit_scale, concreteness, has_negative)
        n = image_features.shape[0] // 2
        device = image_features.device
        if has_negative is None:
            has_negative = torch.ones(n, dtype=torch.bool, device=device)
        if self.world_size > 1:
            all_images, all_texts, all_c, all_mask = self._gather(image_features, text_features, concreteness,
                                                                  has_negative)
        else:
            all_images, all_texts, all_c, all_mask = image_features, text_features, concreteness, has_negative
        n_global = all_c.shape[0]
        labels, hard_cols = self._indices(device, n_global, n)

        margins = self.schedule(concreteness if self.local_loss else all_c)
        row_margins = torch.cat([margins, margins])
        row_mask = has_negative if self.local_loss else all_mask
        # anchors always count; a negative row only where the sample has a negative
        valid_rows = torch.cat([torch.ones_like(row_mask), row_mask])
        masked_cols = n_global + torch.nonzero(~all_mask).squeeze(1)
        n_valid_global = n_global + int(all_mask.sum())

        if self.local_loss:
            directions = [logit_scale * image_features @ all_texts.T, logit_scale * text_features @ all_images.T]
        else:
            directions = [logit_scale * all_images @ all_texts.T]
        # raw gaps before the margins go in; in the shared-matrix case the text rows are S's columns
        views = directions if self.local_loss else [directions[0], directions[0].T]
        gaps = [logit_gap(v, labels, hard_cols) for v in views] if output_dict else []
        for logits in directions:
            add_margins_(logits, hard_cols, row_margins, masked_cols, mask_rows_too=not self.local_loss)
        if self.local_loss:
            log_probs = [F.log_softmax(logits, dim=1) for logits in directions]
        else:
            # S~.T needs no second matrix: the margins are symmetric (docs/method.md §5), and the text-to-image
            # row softmax of S~.T is the column softmax of S~
            log_probs = [F.log_softmax(directions[0], dim=1), F.log_softmax(directions[0], dim=0).T]

        # Normalised by the global count of valid rows (per rank: its share), so that the mean over ranks of
        # local losses is the global loss even when ranks hold different numbers of negatives.
        denominator = 2 * n_valid_global / (self.world_size if self.local_loss else 1)
        loss = sum(nll_sum(lp, labels, valid_rows) for lp in log_probs) / denominator
        if not output_dict:
            return loss

        stats = [row_statistics(lp, labels, hard_cols) for lp in log_probs]
        p_pos = torch.cat([p for p, _ in stats])[torch.cat([valid_rows, valid_rows])]
        with_negative = torch.cat([row_mask, row_mask, row_mask, row_mask])
        share = torch.cat([sh for _, sh in stats])[with_negative]
        # the gap is the anchors' (paper Fig. 5b-c): S[i,i] - S[i,i'] for an anchor i with a negative i'
        anchor_with_negative = torch.cat([row_mask, torch.zeros_like(row_mask)])
        gap = torch.cat(gaps)[torch.cat([anchor_with_negative, anchor_with_negative])]
        nan = p_pos.new_tensor(float("nan"))
        return {
            "contrastive_loss": loss,
            "hn_grad_share": share.mean() if share.numel() else nan,
            "p_pos": p_pos.mean(),
            "logit_gap": gap.mean() if gap.numel() else nan,
            "margin": margins.detach()[row_mask].mean() if bool(row_mask.any()) else nan,
        }


@torch.no_grad()
def hard_negative_diagnostics(
    image_features: torch.Tensor,
    text_features: torch.Tensor,
    logit_scale: float | torch.Tensor,
    concreteness: torch.Tensor | None = None,
    margin: str | Callable[[torch.Tensor], torch.Tensor] = "none",
    has_negative: torch.Tensor | None = None,
    **margin_params,
) -> dict[str, float]:
    """The loss's diagnostics for any ``[anchors; negatives]`` features (e.g. a model's on a dataset).

    Used by the analysis to plot the hard-negative gradient share against batch size (paper Fig. 6).
    """
    n = image_features.shape[0] // 2
    if concreteness is None:
        concreteness = torch.zeros(n, device=image_features.device)
    out = CementLoss(margin, **margin_params)(image_features, text_features, logit_scale, concreteness,
                                              has_negative, output_dict=True)
    return {k: float(v) for k, v in out.items()}

