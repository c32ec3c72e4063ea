"""The analysis's figures (paper Fig. 5 and Fig. 6), drawn from the numbers `analysis` computes."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

LABELS = {"infonce": "InfoNCE", "static": "static margin 1", "cement": "Cement (adaptive)", "inverse": "inverse"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def gradient_share_title(data: str, pairs: int, model: str, logit_scale: float | None = None) -> str:
    """Fig. 6's title; ``model``: a label without a path (`statistics.model_label`), which a title would wrap inside
    or run off the figure with."""
    scale = f", logit scale {logit_scale:.1f}" if logit_scale is not None else ""
    return f"Hard-negative gradient share on {data} ({pairs} pairs) under {model}{scale} (Fig. 6)"


def gradient_share_figure(curves: dict[str, dict[int, float]], title: str = "",
                          sd: dict[str, dict[int, float]] | None = None, batches: int | None = None):
    """Fig. 6; ``sd``: standard deviations over the ``batches`` random batches, drawn as error bars."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for schedule, points in curves.items():
        ns = sorted(points)
        ax.errorbar(ns, [points[n] for n in ns], yerr=[sd[schedule][n] for n in ns] if sd else None, marker="o",
                    capsize=3, label=LABELS.get(schedule, schedule))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size N (anchors)")
    ax.set_ylabel("hard-negative gradient share")
    ax.set_title(wrapped(title or "Hard-negative share of the gradient (paper Fig. 6)"), fontsize=10)
    if sd:
        ax.text(0.99, 0.01, f"bars: ± 1 sd over {batches} random batches" if batches else "bars: ± 1 sd",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=7, color="#555")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def plot_gradient_share(curves: dict[str, dict[int, float]], path: str | Path, title: str = "",
                        sd: dict[str, dict[int, float]] | None = None, batches: int | None = None) -> Path:
    """Fig. 6 (`gradient_share_figure`) as a PNG at ``path``."""
    import matplotlib.pyplot as plt

    fig = gradient_share_figure(curves, title, sd, batches)
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def wrapped(title: str, width: int = 60) -> str:
    """A title on lines of at most ``width`` characters, broken between words only."""
    return "\n".join(textwrap.wrap(title, width, break_long_words=False, break_on_hyphens=False))


def binned_means(x: list[float], y: list[float], width: float = 0.25, min_count: int = 5, top: float = 5.0) \
        -> list[tuple]:
    """(bin centre, mean of y, half-width of its 95 % interval, count) for each concreteness bin holding at least
    ``min_count`` pairs; emptier bins are left out rather than drawn from two points. The last bin is closed at
    the scale's ``top``: a rating of exactly 5 belongs to [4.75, 5], not to a bin drawn beyond the scale."""
    last = math.ceil(top / width) - 1
    bins: dict[int, list[float]] = {}
    for xi, yi in zip(x, y):
        bins.setdefault(min(int(xi // width), last), []).append(yi)
    out = []
    for k, values in sorted(bins.items()):
        n = len(values)
        if n < min_count:
            continue
        mean = sum(values) / n
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        out.append(((k + 0.5) * width, mean, 1.96 * sd / math.sqrt(n), n))
    return out


def plot_dataset_figures(per_dataset: dict[str, list[dict]], out: Path, reference: str = "the reference CLIP") \
        -> list[Path]:
    """Fig. 5: concreteness histograms, logit gap vs c, text shift vs c, visio-linguistic correlation, as PNGs in
    ``out``; ``reference`` names the model the similarities come from, in the words the report uses for it."""
    import matplotlib.pyplot as plt

    paths = []
    for name, fig in (("fig5a_concreteness.png", concreteness_figure(per_dataset)),
                      ("fig5bc_logit_gap.png", logit_gap_figure(per_dataset, reference)),
                      ("fig5d_text_shift.png", text_shift_figure(per_dataset)),
                      ("fig5ef_correlation.png", correlation_figure(per_dataset, reference))):
        fig.savefig(out / name)
        plt.close(fig)
        paths.append(out / name)
    return paths


def concreteness_figure(per_dataset: dict[str, list[dict]]):
    """Fig. 5a: one outlined histogram per dataset. Outlines, not translucent bars: overlapping bars blend into
    colours that no legend entry has."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for name, rows in per_dataset.items():
        ax.hist([r["concreteness"] for r in rows], bins=20, range=(1, 5), histtype="step", linewidth=1.8,
                label=name)
    ax.set_xlabel("concreteness c of the perturbed keyword")
    ax.set_ylabel("pairs")
    ax.set_title("Concreteness per dataset (Fig. 5a)")
    ax.legend()
    fig.tight_layout()
    return fig


def logit_gap_figure(per_dataset: dict[str, list[dict]], reference: str = "the reference CLIP"):
    """Fig. 5b-c: per dataset, its pairs and their mean logit gap per 0.25 of c with its 95 % interval, the means
    of adjacent bins joined. No smoother: on these gaps (most near 0, a few large) a LOWESS line runs outside
    the binned means' intervals, at the ends and between them."""
    plt = _pyplot()
    names = list(per_dataset)
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.8), dpi=120, squeeze=False, sharey=True)
    for ax, name, colour in zip(axes[0], names, plt.rcParams["axes.prop_cycle"].by_key()["color"]):
        rows = per_dataset[name]
        x, y = [r["concreteness"] for r in rows], [r["logit_gap"] for r in rows]
        ax.scatter(x, y, s=5, alpha=0.15, color=colour, linewidths=0, label=f"pairs of {name}")
        bins = binned_means(x, y)
        if bins:
            xs, means, half = _broken_at_gaps(bins)
            ax.errorbar(xs, means, yerr=half, fmt="o-", ms=4, color="black", capsize=2,
                        label="mean per 0.25 of c, 95 % CI")
        ax.set_title(f"{name} ({len(rows)} pairs)", fontsize=10)
        ax.set_xlabel("concreteness c")
        ax.set_xlim(0.9, 5.1)
        ax.set_xticks([1, 2, 3, 4, 5])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")  # each panel's: its points have its dataset's colour
    axes[0][0].set_ylabel("logit gap S[i,i] - S[i,i']")
    fig.suptitle(wrapped(f"Logit gap against concreteness under {reference} (Fig. 5b-c); bins of fewer than 5 "
                         "pairs are left out", 50 * len(names)), fontsize=11)
    fig.tight_layout()
    return fig


def _broken_at_gaps(bins: list[tuple], width: float = 0.25) -> tuple[list[float], list[float], list[float]]:
    """The bins' centres, means and half-intervals with a gap (NaN) between bins that are not adjacent: a line
    across a left-out bin would claim a mean where too few pairs are."""
    points: list[tuple[float, float, float]] = []
    for k, (centre, mean, h, _) in enumerate(bins):
        if k and centre - bins[k - 1][0] > 1.5 * width:
            points.append((math.nan, math.nan, math.nan))
        points.append((centre, mean, h))
    xs, means, half = (list(column) for column in zip(*points))
    return xs, means, half


def correlation_figure(per_dataset: dict[str, list[dict]], reference: str = "the reference CLIP"):
    """Fig. 5e-f: text-text cosine (CLIP-L) against image-image similarity (CLIP-V, or DINOScore where every
    dataset has it); the axes say which similarity they hold, the title which model computed them. Hollow markers
    of a shape per dataset: translucent ones, piled up near (1, 1), blend into colours no legend entry has."""
    plt = _pyplot()
    visual = "dino" if all(rows and "dino" in rows[0] for rows in per_dataset.values()) else "clip_v"
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (name, rows) in enumerate(per_dataset.items()):
        pairs = [r for r in rows if r[visual] is not None]
        label = name if pairs else f"{name} (text-only negatives: no image side)"
        ax.scatter([r["clip_l"] for r in pairs], [r[visual] for r in pairs], s=14, marker="os^Dv"[k % 5],
                   facecolors="none", edgecolors=colours[k % len(colours)], linewidths=0.7, label=label)
    ax.set_xlabel("CLIP-L: text-text cosine (t, t')")
    ax.set_ylabel({"dino": "DINOScore (v, v')", "clip_v": "CLIP-V: image-image cosine (v, v')"}[visual])
    models = "CLIP-L and CLIP-V" if visual == "clip_v" else "CLIP-L"
    ax.set_title(wrapped(f"Visio-linguistic correlation (Fig. 5e-f); {models} under {reference}"), fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def text_shift_figure(per_dataset: dict[str, list[dict]]):
    """Fig. 5d: per dataset, the mean edit distance (and BERTScore) per 0.25 of c with its 95 % interval, the
    datasets side by side (clouds of points would hide each other: edit distances are small integers and
    coincide), on integer ticks."""
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()

    has_bert = all(rows and "bertscore" in rows[0] for rows in per_dataset.values())
    panels = [("edit_distance", "word edit distance (t, t')", "Edit distance (Fig. 5d)")] + (
        [("bertscore", "BERTScore F1 (t, t')", "BERTScore (Fig. 5d)")] if has_bert else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), dpi=120, squeeze=False)
    offsets = [0.06 * (k - (len(per_dataset) - 1) / 2) for k in range(len(per_dataset))]
    # each dataset its own marker and dash as well as colour: where two lines coincide, both still show
    styles = [("o", "-"), ("s", "--"), ("^", ":"), ("D", "-.")]
    for ax, (key, ylabel, title) in zip(axes[0], panels):
        for k, ((name, rows), dx) in enumerate(zip(per_dataset.items(), offsets)):
            bins = binned_means([r["concreteness"] for r in rows], [r[key] for r in rows])
            xs, means, half = _broken_at_gaps(bins) if bins else ([], [], [])
            marker, dash = styles[k % len(styles)]
            ax.errorbar([x + dx for x in xs], means, yerr=half, marker=marker, linestyle=dash, ms=4 if k else 5,
                        mfc="none" if k % 2 else None, capsize=2, label=name)
        ax.set(xlabel="concreteness c", ylabel=ylabel, title=title, xlim=(0.9, 5.1))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylim(bottom=0)  # a distance: from 0, so the integer ticks are there to draw
    axes[0][0].yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0][0].legend(title="mean per 0.25 of c (95 % CI)", fontsize=8, title_fontsize=8)
    fig.tight_layout()
    return fig


def plot_grid(gains: list[list[float | None]], intervals: list[list[list[float] | None]], rows: list[str],
              columns: list[str], path: str | Path, title: str) -> Path:
    """A data x loss heat-map: each cell coloured by its gain (points, diverging around 0) and labelled with the
    gain and its 95 % interval; a cell whose interval excludes 0 is framed. The colour scale spans the widest
    interval, so that a gain small against its uncertainty looks pale, not saturated."""
    plt = _pyplot()
    values = [[math.nan if g is None else g for g in row] for row in gains]
    ends = [abs(e) for row in intervals for ci in row if ci for e in ci]
    bound = max([abs(v) for row in values for v in row if not math.isnan(v)] + ends + [0.5])
    fig, ax = plt.subplots(figsize=(1.8 + 2.1 * len(columns), 1.4 + 0.9 * len(rows)))
    image = ax.imshow(values, cmap="RdBu", vmin=-bound, vmax=bound, aspect="auto")
    for i, row in enumerate(values):
        for j, gain in enumerate(row):
            ci = intervals[i][j]
            text = "-" if math.isnan(gain) else f"{gain:+.2f}" + (f"\n[{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=9,
                    color="white" if abs(gain) > 0.6 * bound else "black")
            if ci and (ci[0] > 0 or ci[1] < 0):
                ax.add_patch(plt.Rectangle((j - 0.48, i - 0.48), 0.96, 0.96, fill=False, lw=2, ec="black"))
    ax.set_xticks(range(len(columns)), columns)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("loss")
    ax.set_ylabel("training data")
    ax.set_title(wrapped(title), fontsize=10)
    fig.colorbar(image, ax=ax, label="gain over the start (points)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
