"""Dataset analysis (paper §3.1-3.2, SPEC §8): how much of the gradient reaches the hard negative.

`gradient_share_by_batch_size` reproduces the paper's Fig. 6: the hard-negative gradient share
``mean_a p_{a,h(a)} / (1 - p_aa)`` (SPEC §5, from `loss.hard_negative_diagnostics`) of InfoNCE and of each
margin schedule, for batches of N anchors drawn from a model's real features on a ConcreteBatch. The
share falls as N grows (more easy negatives share the softmax) and rises with a positive margin.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from .loss import hard_negative_diagnostics

SCHEDULES = ("none", "static", "adaptive", "inverse")
LABELS = {"none": "InfoNCE", "static": "static margin 1", "adaptive": "Cement (adaptive)", "inverse": "inverse"}


def gradient_share_by_batch_size(
    image_features: torch.Tensor,
    text_features: torch.Tensor,
    concreteness: torch.Tensor,
    logit_scale: float,
    batch_sizes: list[int],
    schedules=SCHEDULES,
    batches: int = 8,
    seed: int = 0,
) -> dict[str, dict[int, float]]:
    """Mean share over ``batches`` random batches of N anchors, per schedule and N.

    Features are ``[anchors; negatives]`` rows of M pairs (2M x D, L2-normalised); a batch of N picks N
    pairs and keeps each anchor with its own negative.
    """
    m = concreteness.shape[0]
    too_big = [n for n in batch_sizes if n > m]
    if too_big:
        raise ValueError(f"batch sizes {too_big} exceed the {m} pairs available; pass smaller --batch-sizes")
    g = torch.Generator().manual_seed(seed)
    out: dict[str, dict[int, float]] = {s: {} for s in schedules}
    for n in batch_sizes:
        picks = [torch.randperm(m, generator=g)[:n] for _ in range(batches)]
        for schedule in schedules:
            shares = []
            for idx in picks:
                rows = torch.cat([idx, idx + m])
                d = hard_negative_diagnostics(image_features[rows], text_features[rows], logit_scale,
                                              concreteness[idx], margin=schedule)
                shares.append(d["hn_grad_share"])
            out[schedule][n] = sum(shares) / len(shares)
    return out


@torch.no_grad()
def concretebatch_features(clip, source, device: str = "cpu", batch_size: int = 64, limit: int | None = None):
    """(image features, text features, concreteness) of a ConcreteBatch under a model, ``[anchors; negatives]``."""
    from .concretebatch import iter_records

    anchors_i, negs_i, anchors_t, negs_t, cs = [], [], [], [], []
    buffer: list[dict] = []

    def flush():
        if not buffer:
            return
        prep = lambda ims: torch.stack([clip.preprocess(im) for im in ims]).to(device)  # noqa: E731
        enc_i = lambda ims: F.normalize(clip.model.encode_image(prep(ims)).float(), dim=-1).cpu()  # noqa: E731
        enc_t = lambda ts: F.normalize(clip.model.encode_text(clip.tokenizer(ts).to(device)).float(), dim=-1).cpu()  # noqa: E731
        anchors_i.append(enc_i([r["image"] for r in buffer]))
        negs_i.append(enc_i([r["neg_image"] for r in buffer]))
        anchors_t.append(enc_t([r["caption"] for r in buffer]))
        negs_t.append(enc_t([r["neg_caption"] for r in buffer]))
        cs.extend(r["concreteness"] for r in buffer)
        buffer.clear()

    for n, record in enumerate(iter_records(source)):
        if limit is not None and n >= limit:
            break
        buffer.append(record)
        if len(buffer) == batch_size:
            flush()
    flush()
    if not cs:
        raise ValueError(f"{source} holds no records")
    return (torch.cat(anchors_i + negs_i), torch.cat(anchors_t + negs_t), torch.tensor(cs))


def plot_gradient_share(curves: dict[str, dict[int, float]], path: str | Path, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for schedule, points in curves.items():
        ns = sorted(points)
        ax.plot(ns, [points[n] for n in ns], marker="o", label=LABELS.get(schedule, schedule))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size N (anchors)")
    ax.set_ylabel("hard-negative gradient share")
    ax.set_title(title or "Hard-negative share of the gradient (paper Fig. 6)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
