"""Tables and figures shared by the toy-world experiments: results over seeds, training curves, signed numbers."""

from __future__ import annotations

import statistics
from pathlib import Path

from ..records import read_jsonl

TEST_COLUMNS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj", "M.Avg")
RETRIEVAL_COLUMNS = ("text_retrieval_recall@1", "image_retrieval_recall@1")


def results_table(scores: dict) -> dict[str, dict[str, tuple[float, float, int]]]:
    """Row label -> column -> (mean, standard deviation over seeds, number of seeds), in percent."""
    table = {}
    for label in dict.fromkeys(name for name, _ in scores):
        rows = [v for (name, _), v in scores.items() if name == label]
        table[label] = {}
        for col in TEST_COLUMNS + RETRIEVAL_COLUMNS:
            vals = [100 * r[col] for r in rows]
            table[label][col] = (statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0, len(vals))
    return table


def training_curves_figure(runs: dict):
    """Loss and hard-negative gradient share per step of every fine-tune (mean over seeds). One colour per row in
    both panels, from one mapping, and each panel with its own legend: a row missing from a panel (the control
    has no hard-negative share) cannot shift the colours of the others."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(k[0] for k in runs))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {label: palette[i % len(palette)] for i, label in enumerate(labels)}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), dpi=110)
    for label in labels:
        logs = [[r for r in read_jsonl(ckpt.parent.parent / "metrics.jsonl") if "loss" in r]
                for (name, _), ckpt in runs.items() if name == label]
        steps = [r["step"] for r in logs[0]]
        for ax, key in zip(axes, ("loss", "hn_grad_share")):
            values = [[log_[i][key] for log_ in logs] for i in range(len(steps))]
            if all(v is not None for row in values for v in row):  # the control has no hard-negative share
                ax.plot(steps, [statistics.fmean(row) for row in values], label=label, color=colour[label])
    for ax, title in zip(axes, ("Cement / InfoNCE loss", "hard-negative gradient share")):
        ax.set_xlabel("fine-tuning step")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_training_curves(runs: dict, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig = training_curves_figure(runs)
    fig.savefig(path)
    plt.close(fig)
    return path


def rich_table(table: dict):
    """The results table for the terminal."""
    from rich.table import Table

    cols = TEST_COLUMNS + RETRIEVAL_COLUMNS
    out = Table(title="toy compositional test (%, mean ± sd over seeds) and Recall@1")
    out.add_column("model")
    for c in cols:
        out.add_column(c.replace("text_retrieval_recall@1", "I→T R@1").replace("image_retrieval_recall@1", "T→I R@1"),
                       justify="right")
    for label, row in table.items():
        out.add_row(label, *(_cell(row[c]).replace(" ± ", "±") for c in cols))
    return out


def _cell(v: tuple[float, float, int]) -> str:
    mean, std, n = v
    return f"{mean:.1f} ± {std:.1f}" if n > 1 else f"{mean:.1f}"


def table_markdown(table: dict) -> str:
    cols = TEST_COLUMNS + RETRIEVAL_COLUMNS
    names = [c.replace("text_retrieval_recall@1", "I→T R@1").replace("image_retrieval_recall@1", "T→I R@1")
             for c in cols]
    lines = ["| model | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(cols)]
    lines += [f"| {label} | " + " | ".join(_cell(row[c]) for c in cols) + " |" for label, row in table.items()]
    return "\n".join(lines)


def signed(x: float, digits: int = 1) -> str:
    """``+1.2``, ``-0.3``, and ``+0.0`` for anything that rounds to zero (never ``-0.0``)."""
    x = round(x, digits)
    return f"{x if x else 0.0:+.{digits}f}"
