"""The analysis's figures (paper Fig. 5 and Fig. 6), drawn from the numbers `analysis` computes."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

LABELS = {"none": "InfoNCE", "static": "static margin 1", "adaptive": "Cement (adaptive)", "inverse": "inverse"}


def plot_gradient_share(curves: dict[str, dict[int, float]], path: str | Path, title: str = "",
                        sd: dict[str, dict[int, float]] | None = None, batches: int | None = None) -> Path:
    """Fig. 6; ``sd``: standard deviations over the ``batches`` random batches, drawn as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for schedule, points in curves.items():
        ns = sorted(points)
        ax.errorbar(ns, [points[n] for n in ns], yerr=[sd[schedule][n] for n in ns] if sd else None, marker="o",
                    capsize=3, label=LABELS.get(schedule, schedule))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size N (anchors)")
    ax.set_ylabel("hard-negative gradient share")
    ax.set_title("\n".join(textwrap.wrap(title or "Hard-negative share of the gradient (paper Fig. 6)", 60)),
                 fontsize=10)
    if sd:
        ax.text(0.99, 0.01, f"bars: ± 1 sd over {batches} random batches" if batches else "bars: ± 1 sd",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=7, color="#555")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def binned_means(x: list[float], y: list[float], width: float = 0.25, min_count: int = 5) -> list[tuple]:
    """(bin centre, mean of y, half-width of its 95 % interval, count) for each concreteness bin holding at least
    ``min_count`` pairs; emptier bins are left out rather than drawn from two points."""
    bins: dict[int, list[float]] = {}
    for xi, yi in zip(x, y):
        bins.setdefault(int(xi // width), []).append(yi)
    out = []
    for k, values in sorted(bins.items()):
        n = len(values)
        if n < min_count:
            continue
        mean = sum(values) / n
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        out.append(((k + 0.5) * width, mean, 1.96 * sd / math.sqrt(n), n))
    return out


def supported_lowess(x: list[float], y: list[float], min_points: int = 20):
    """A LOWESS fit drawn only between the 5th and 95th percentile of x, where the data hold it up; ``None``
    for fewer than ``min_points`` pairs or no spread in x. Outside that range a smoother extrapolates from a
    handful of points, which is how a line can claim a gap where the only pairs have none."""
    from statsmodels.nonparametric.smoothers_lowess import lowess

    if len(x) < min_points:
        return None
    ordered = sorted(x)
    lo, hi = ordered[int(0.05 * (len(x) - 1))], ordered[int(0.95 * (len(x) - 1))]
    if hi <= lo:
        return None
    fit = lowess(y, x, frac=0.6, return_sorted=True)
    return fit[(fit[:, 0] >= lo) & (fit[:, 0] <= hi)]


def plot_dataset_figures(per_dataset: dict[str, list[dict]], out: Path, reference: str = "the reference CLIP") \
        -> list[Path]:
    """Fig. 5: concreteness histograms, logit gap vs c (per dataset: points, binned means with 95 % intervals,
    LOWESS where supported), text shift vs c, visio-linguistic correlation; ``reference`` names the model the
    similarities come from."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(out / name)
        plt.close(fig)
        paths.append(out / name)

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for name, rows in per_dataset.items():
        ax.hist([r["concreteness"] for r in rows], bins=20, range=(1, 5), alpha=0.5, label=name)
    ax.set_xlabel("concreteness c of the perturbed keyword")
    ax.set_ylabel("pairs")
    ax.set_title("Concreteness per dataset (Fig. 5a)")
    ax.legend()
    save(fig, "fig5a_concreteness.png")

    names = list(per_dataset)
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.8), dpi=120, squeeze=False, sharey=True)
    for ax, name, colour in zip(axes[0], names, plt.rcParams["axes.prop_cycle"].by_key()["color"]):
        rows = per_dataset[name]
        x, y = [r["concreteness"] for r in rows], [r["logit_gap"] for r in rows]
        ax.scatter(x, y, s=5, alpha=0.15, color=colour, linewidths=0)
        bins = binned_means(x, y)
        if bins:
            ax.errorbar([b[0] for b in bins], [b[1] for b in bins], yerr=[b[2] for b in bins], fmt="o", ms=4,
                        color="black", capsize=2, label="mean per 0.25 of c (95 % CI, bins of >= 5 pairs)")
        fit = supported_lowess(x, y)
        if fit is not None and len(fit):
            ax.plot(fit[:, 0], fit[:, 1], color=colour, linewidth=2, label="LOWESS (5th-95th percentile of c)")
        ax.set_title(f"{name} ({len(rows)} pairs)", fontsize=10)
        ax.set_xlabel("concreteness c")
        ax.set_xlim(0.9, 5.1)
        ax.set_xticks([1, 2, 3, 4, 5])
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("logit gap S[i,i] - S[i,i']")
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend(fontsize=7, loc="best")
    fig.suptitle("Logit gap against concreteness (Fig. 5b-c)", fontsize=11)
    save(fig, "fig5bc_logit_gap.png")

    save(text_shift_figure(per_dataset), "fig5d_text_shift.png")

    visual = "dino" if all(rows and "dino" in rows[0] for rows in per_dataset.values()) else "clip_v"
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for name, rows in per_dataset.items():
        pairs = [r for r in rows if r[visual] is not None]
        label = name if pairs else f"{name} (text-only negatives: no image side)"
        ax.scatter([r["clip_l"] for r in pairs], [r[visual] for r in pairs], s=6, alpha=0.4, label=label)
    ax.set_xlabel(f"text-text cosine (t, t') under {reference}")
    ax.set_ylabel({"dino": "DINOScore (v, v')", "clip_v": f"image-image cosine (v, v') under {reference}"}[visual])
    ax.set_title("Visio-linguistic correlation (Fig. 5e-f)")
    ax.legend(fontsize=8)
    save(fig, "fig5ef_correlation.png")
    return paths


def text_shift_figure(per_dataset: dict[str, list[dict]]):
    """Fig. 5d: per dataset, the mean edit distance (and BERTScore) per 0.25 of c with its 95 % interval, the
    datasets side by side (clouds of points would hide each other: edit distances are small integers and
    coincide), on integer ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    has_bert = all(rows and "bertscore" in rows[0] for rows in per_dataset.values())
    panels = [("edit_distance", "word edit distance (t, t')", "Edit distance (Fig. 5d)")] + (
        [("bertscore", "BERTScore F1 (t, t')", "BERTScore (Fig. 5d)")] if has_bert else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), dpi=120, squeeze=False)
    offsets = [0.06 * (k - (len(per_dataset) - 1) / 2) for k in range(len(per_dataset))]
    for ax, (key, ylabel, title) in zip(axes[0], panels):
        for (name, rows), dx in zip(per_dataset.items(), offsets):
            bins = binned_means([r["concreteness"] for r in rows], [r[key] for r in rows])
            ax.errorbar([b[0] + dx for b in bins], [b[1] for b in bins], yerr=[b[2] for b in bins], fmt="o-", ms=4,
                        capsize=2, label=name)
        ax.set(xlabel="concreteness c", ylabel=ylabel, title=title, xlim=(0.9, 5.1))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylim(bottom=0)  # a distance: from 0, so the integer ticks are there to draw
    axes[0][0].yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0][0].legend(title="mean per 0.25 of c (95 % CI)", fontsize=8, title_fontsize=8)
    fig.tight_layout()
    return fig
