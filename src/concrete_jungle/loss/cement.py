"""Cement loss: InfoNCE over anchors and hard negatives with a per-sample margin on each hard-negative logit.

docs/method.md §5 (paper §2.3). A batch holds N anchor pairs and K >= 1 hard-negative pairs per anchor, features
ordered ``[anchors; negatives]`` (`layout`: row ``N + a K + k`` is anchor a's k-th negative; L2-normalised).
With ``S = s * I @ T.T`` and ``j = N + a K + k``:

    S~[a, j] = S[a, j] + m_ak,   S~[j, a] = S[j, a] + m_ak,      m_ak = schedule(c_ak)
    L        = (CE(S~, arange) + CE(S~.T, arange)) / 2           over the rows that exist

Because a margin sits at both (a, j) and (j, a), the margins of S~.T are those of S~, so one margined matrix
serves both directions. A missing negative caption masks its column (and row) out of every softmax; a missing
negative picture its row (and column): -inf, never zero-filled. With K = 1 and every picture present this is
the paper's loss; with captions only and no margin it is NegCLIP's (`negclip`). With ``mask_entailed``, the logit
S[j, a] of a negative picture j that its anchor's caption a is still true of (``anchor_true_of_negative``) is -inf:
it leaves row j's image-to-text softmax and column a's text-to-image one (`layout`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .layout import (
    Layout,
    gather_no_grad,
    gather_rows,
    hard_columns,
    make_layout,
    negatives_per_anchor,
    per_sample,
    warn_unnormalised,
)
from .options import RENAMED_SCHEDULES

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


# by the name of the loss each makes (`options.CEMENT_LOSSES`: loss.name, `train --loss`)
SCHEDULES: dict[str, type] = {"cement": AdaptiveMargin, "infonce": NoMargin, "static": StaticMargin,
                              "inverse": InverseMargin}


def make_schedule(name: str, **params) -> Callable[[torch.Tensor], torch.Tensor]:
    """A schedule by name with its parameters, e.g. ``make_schedule("cement", tau=0.2)``."""
    if name in RENAMED_SCHEDULES:
        warnings.warn(f"margin schedule {name!r} is now called {RENAMED_SCHEDULES[name]!r}, the name of its loss; "
                      "the old name goes in 0.3", DeprecationWarning, stacklevel=3)
        name = RENAMED_SCHEDULES[name]
    if name not in SCHEDULES:
        raise ValueError(f"margin schedule {name!r} is not one of {', '.join(SCHEDULES)}")
    try:
        return SCHEDULES[name](**params)
    except TypeError as e:
        raise ValueError(f"margin schedule {name!r}: {e}") from None


# ---------------------------------------------------------------- the margined, masked InfoNCE core


def margin_entries(layout: Layout, margins: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows, columns, values) of the margins of S~: m_ak at (a, j) and at (j, a) for every pair."""
    anchor, negative, m = layout.pair_anchor, layout.pair_negative, margins.flatten()
    return torch.cat([anchor, negative]), torch.cat([negative, anchor]), torch.cat([m, m])


def add_margins_(logits: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """In place: ``values`` added at ``(rows, cols)``: a sparse add of a few entries per row, on logits that
    nothing else needs (the matmul that made them keeps only its inputs for backward)."""
    return logits.index_put_((rows, cols), values.to(logits.dtype), accumulate=True)


def mask_(logits: torch.Tensor, cols: torch.Tensor | None = None, rows: torch.Tensor | None = None) -> torch.Tensor:
    """In place: the columns and rows named (indices) set to -inf; their entries get no gradient."""
    if cols is not None and cols.numel():
        logits.index_fill_(1, cols, float("-inf"))
    if rows is not None and rows.numel():
        logits.index_fill_(0, rows, float("-inf"))
    return logits


def mask_entries_(logits: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """In place: the entries ``(rows, cols)`` set to -inf; they get no gradient."""
    return logits.index_put_((rows, cols), logits.new_tensor(float("-inf")))


def nll_sum(log_probs: torch.Tensor, labels: torch.Tensor, valid_rows: torch.Tensor) -> torch.Tensor:
    """Sum over the valid rows of -log p[row, label]."""
    return -log_probs.gather(1, labels[:, None]).squeeze(1)[valid_rows].sum()


@torch.no_grad()
def row_statistics(log_probs: torch.Tensor, labels: torch.Tensor, hard_cols: torch.Tensor,
                   hard_valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: p_ii and the hard-negative gradient share, the probability of the row's hard columns over that of
    all its off-diagonal ones (docs/method.md §5). Computed in log space: for a confident model p_ii rounds to 1
    and ``1 - p_ii`` to 0 in float32, where the plain ratio explodes."""
    p_pos = log_probs.gather(1, labels[:, None]).squeeze(1).exp()
    others = log_probs.scatter(1, labels[:, None], float("-inf"))
    hard = log_probs.gather(1, hard_cols).masked_fill(~hard_valid, float("-inf"))
    log_share = torch.logsumexp(hard, dim=1) - torch.logsumexp(others, dim=1)
    return p_pos, torch.nan_to_num(log_share.exp(), nan=0.0)  # nan: a row with no other column at all


@torch.no_grad()
def anchor_gaps(view: torch.Tensor, own: torch.Tensor, layout: Layout, valid: torch.Tensor) -> torch.Tensor:
    """S[a, a] - S[a, j] for this view's anchor rows a and their negatives j that exist (``valid``: N x K)."""
    anchor_rows = torch.nonzero(own < layout.n).squeeze(1)
    a = own[anchor_rows]
    negatives = layout.n + a[:, None] * layout.k + torch.arange(layout.k, device=own.device)
    gaps = view[anchor_rows, a][:, None] - view[anchor_rows[:, None], negatives]
    return gaps[valid[a]]


# ---------------------------------------------------------------- the loss module


class CementLoss(nn.Module):
    """InfoNCE over anchors + hard negatives with a concreteness-driven margin (docs/method.md §5).

    ``forward(image_features, text_features, logit_scale, concreteness, has_negative=None,
    has_negative_image=None)``: features are n (1 + K) x D (`layout`: n anchors then their n K negatives, on this
    rank), ``concreteness`` n x K (or n for K = 1), ``has_negative`` an optional n x K bool mask of the negative
    captions that exist, ``has_negative_image`` of their pictures (default: every existing caption has its
    picture). With ``output_dict=True`` it returns ``{"contrastive_loss", ...diagnostics}``: hard-negative
    gradient share (rows with a hard counterpart, both directions), mean p_ii, mean raw logit gap S[a,a] - S[a,j]
    over anchors' existing negatives (image-to-text and text-to-image), mean margin; all detached and computed
    from the log-softmax the loss needs anyway.

    ``margin="infonce"`` with every negative present is open_clip's ClipLoss on the N (1 + K) pairs; with no
    negative at all it is ClipLoss on the N anchors.

    ``mask_entailed``: ``anchor_true_of_negative`` (n x K bool, a forward keyword) names the negative pictures the
    anchor's caption is true of; their logit against that caption is masked in both directions.
    """

    def __init__(
        self,
        margin: str | Callable[[torch.Tensor], torch.Tensor] = "cement",
        local_loss: bool = False,
        gather_with_grad: bool = False,
        cache_labels: bool = True,
        rank: int = 0,
        world_size: int = 1,
        mask_entailed: bool = False,
        **margin_params,
    ):
        super().__init__()
        self.mask_entailed = mask_entailed
        self.schedule = make_schedule(margin, **margin_params) if isinstance(margin, str) else margin
        self.local_loss = local_loss
        self.gather_with_grad = gather_with_grad
        self.cache_labels = cache_labels
        self.rank = rank
        self.world_size = world_size
        self._warned_unnormalised = False

    # -- checks
    def _check(self, image_features, text_features, logit_scale, concreteness) -> int:
        if image_features.ndim != 2 or text_features.ndim != 2:
            raise ValueError(f"image_features and text_features must be 2-D (rows x dim), got "
                             f"{tuple(image_features.shape)} and {tuple(text_features.shape)}")
        if image_features.shape != text_features.shape:
            raise ValueError(f"image_features {tuple(image_features.shape)} and text_features "
                             f"{tuple(text_features.shape)} must have the same shape")
        if concreteness.ndim not in (1, 2):
            raise ValueError(f"concreteness has shape {tuple(concreteness.shape)}; expected (n,) or (n, K), "
                             "one value per anchor and negative")
        k = negatives_per_anchor(image_features.shape[0], concreteness.shape[0], "image_features")
        if concreteness.ndim == 1 and k != 1:
            raise ValueError(f"concreteness has shape {tuple(concreteness.shape)}; expected "
                             f"({concreteness.shape[0]}, {k}), one value per anchor and negative")
        if torch.as_tensor(logit_scale).numel() != 1:
            raise ValueError("logit_scale must be a scalar (the exponentiated scale, as open_clip returns it)")
        return k

    def forward(
        self,
        image_features: torch.Tensor,
        text_features: torch.Tensor,
        logit_scale: torch.Tensor | float,
        concreteness: torch.Tensor,
        has_negative: torch.Tensor | None = None,
        has_negative_image: torch.Tensor | None = None,
        output_dict: bool = False,
        anchor_true_of_negative: torch.Tensor | None = None,
    ):
        k = self._check(image_features, text_features, logit_scale, concreteness)
        n, device = concreteness.shape[0], image_features.device
        c = per_sample(concreteness, n, k, "concreteness", concreteness.dtype, device)
        has_negative = per_sample(has_negative, n, k, "has_negative", torch.bool, device)
        has_image = per_sample(has_negative_image, n, k, "has_negative_image", torch.bool, device)
        if torch.isnan(c[has_negative]).any():
            raise ValueError("concreteness contains NaN; rate every keyword or drop the sample")
        c = c.masked_fill(~has_negative, 0.0)  # a missing negative's rating is never read
        if not self._warned_unnormalised:
            warn_unnormalised(self, image_features, text_features, has_negative, has_image, "CementLoss")
        image_features, text_features = existing_rows(image_features, text_features, has_negative, has_image)
        all_images, all_texts = gather_rows(image_features, text_features, k, self.local_loss,
                                            self.gather_with_grad, self.rank, self.world_size)
        entailed = per_sample(anchor_true_of_negative, n, k, "anchor_true_of_negative", torch.bool, device,
                              fill=False) if self.mask_entailed else None
        if self.world_size > 1:
            c, has_negative, has_image = (gather_no_grad(t, self.world_size) for t in (c, has_negative, has_image))
            entailed = None if entailed is None else gather_no_grad(entailed, self.world_size)
        layout = make_layout(has_negative, has_image, n, self.rank, self.local_loss, entailed)
        pictures, captions = layout.entailed_pairs()
        rows, cols, values = margin_entries(layout, self.schedule(c))
        labels = layout.own
        text_missing = torch.nonzero(~layout.text_valid).squeeze(1)
        image_missing = torch.nonzero(~layout.image_valid).squeeze(1)
        valid = layout.image_valid[labels]  # a row with its picture has its caption: both directions count

        if self.local_loss:
            # this rank's rows against every column; the global margin entries of its rows, in local row numbers
            local_of = torch.full((layout.rows,), -1, dtype=torch.long, device=device)
            local_of[labels] = torch.arange(labels.numel(), device=device)
            mine = local_of[rows] >= 0
            rows, cols, values = local_of[rows][mine], cols[mine], values[mine]
            views = [logit_scale * image_features @ all_texts.T, logit_scale * text_features @ all_images.T]
        else:
            s = logit_scale * all_images @ all_texts.T
            views = [s, s.T]
        gaps = [anchor_gaps(views[0], labels, layout, layout.has_negative),
                anchor_gaps(views[1], labels, layout, layout.has_negative_image & ~layout.entailed)] \
            if output_dict else []
        if self.local_loss:
            # the entailed logits (picture j, caption a) of this rank's rows: row j of its image-to-text view,
            # row a of its text-to-image view
            entailed_entries = [(local_of[pictures], captions), (local_of[captions], pictures)]
            log_probs = []
            for logits, missing, (at, other) in zip(views, (text_missing, image_missing), entailed_entries):
                add_margins_(logits, rows, cols, values)
                if self.mask_entailed:
                    mask_entries_(logits, at[at >= 0], other[at >= 0])
                log_probs.append(F.log_softmax(mask_(logits, cols=missing), dim=1))
        else:
            s = mask_(add_margins_(views[0], rows, cols, values), cols=text_missing, rows=image_missing)
            if self.mask_entailed:  # S[j, a]: row j's image-to-text softmax and column a's text-to-image one
                mask_entries_(s, pictures, captions)
            # S~.T needs no second matrix: the margins are symmetric (docs/method.md §5), and the text-to-image
            # row softmax of S~.T is the column softmax of S~
            log_probs = [F.log_softmax(s, dim=1), F.log_softmax(s, dim=0).T]

        # Normalised by the global count of valid rows (per rank: its share), so that the mean over ranks of
        # local losses is the global loss even when ranks hold different numbers of negatives.
        denominator = 2 * int(layout.image_valid.sum()) / (self.world_size if self.local_loss else 1)
        loss = sum(nll_sum(lp, labels, valid) for lp in log_probs) / denominator
        if not output_dict:
            return loss
        margins = self.schedule(c)
        own_anchors = labels[labels < layout.n]
        used_margins = margins[own_anchors][layout.has_negative[own_anchors]]
        return {"contrastive_loss": loss, "margin": mean_or_nan(used_margins, loss)} | \
            row_diagnostics(log_probs, labels, layout, valid, gaps, loss)


def existing_rows(image_features: torch.Tensor, text_features: torch.Tensor, has_negative: torch.Tensor,
                  has_negative_image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The features with every missing row replaced by zeros (`torch.where`) before any arithmetic: masking the
    logits keeps a missing row out of the value, but the matrix product would still multiply its values (NaN, or
    1e6 times a scale) into the gradients of the rows it meets; replaced, it reaches neither."""
    anchors = torch.ones(has_negative.shape[0], dtype=torch.bool, device=has_negative.device)
    texts = torch.cat([anchors, has_negative.flatten()])[:, None]
    images = torch.cat([anchors, (has_negative_image & has_negative).flatten()])[:, None]
    zero = torch.zeros((), dtype=image_features.dtype, device=image_features.device)
    return torch.where(images, image_features, zero), torch.where(texts, text_features, zero.to(text_features.dtype))


def mean_or_nan(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return values.detach().mean() if values.numel() else like.new_tensor(float("nan"))


@torch.no_grad()
def row_diagnostics(log_probs: list[torch.Tensor], labels: torch.Tensor, layout: Layout, valid: torch.Tensor,
                    gaps: list[torch.Tensor], like: torch.Tensor) -> dict[str, torch.Tensor]:
    """The diagnostics of the image-to-text and text-to-image log-probabilities of the rows ``labels``: mean
    p_ii, mean hard-negative gradient share over rows with a hard counterpart, mean anchor logit gap."""
    hard_cols, hard_valid = hard_columns(layout)
    hard_cols, hard_valid = hard_cols[labels], hard_valid[labels]
    p_pos, share = [], []
    for lp, col_valid in zip(log_probs, (layout.text_valid, layout.image_valid)):
        entry_valid = hard_valid & col_valid[hard_cols] & valid[:, None]
        p, sh = row_statistics(lp, labels, hard_cols, entry_valid)
        p_pos.append(p[valid])
        share.append(sh[entry_valid.any(dim=1)])
    return {"hn_grad_share": mean_or_nan(torch.cat(share), like), "p_pos": torch.cat(p_pos).mean(),
            "logit_gap": mean_or_nan(torch.cat(gaps), like)}


@torch.no_grad()
def hard_negative_diagnostics(
    image_features: torch.Tensor,
    text_features: torch.Tensor,
    logit_scale: float | torch.Tensor,
    concreteness: torch.Tensor | None = None,
    margin: str | Callable[[torch.Tensor], torch.Tensor] = "infonce",
    has_negative: torch.Tensor | None = None,
    has_negative_image: torch.Tensor | None = None,
    **margin_params,
) -> dict[str, float]:
    """The loss's diagnostics for any ``[anchors; negatives]`` features (e.g. a model's on a dataset).

    Used by the analysis to plot the hard-negative gradient share against batch size (paper Fig. 6).
    """
    if concreteness is None:
        n = image_features.shape[0] // 2  # one negative per anchor unless the ratings say otherwise
        concreteness = torch.zeros(n, device=image_features.device)
    out = CementLoss(margin, **margin_params)(image_features, text_features, logit_scale, concreteness,
                                              has_negative, has_negative_image, output_dict=True)
    return {k: float(v) for k, v in out.items()}

