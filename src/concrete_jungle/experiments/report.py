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
    """Per fine-tuning step, the mean over each row's seeds of its loss, relative to its own first logged step, and
    of its hard-negative gradient share. Relative, because the rows' losses are not one quantity: the control's
    runs over its N anchors' rows, the others' over 2N rows, with margins for static and Cement; drawn as they
    are, the control would read as the lowest loss. One colour per row in both panels, from one mapping, and each
    panel with its own legend: a row missing from a panel (the control has no hard-negative share) cannot shift
    the colours of the others."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(k[0] for k in runs))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {label: palette[i % len(palette)] for i, label in enumerate(labels)}
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.6), dpi=110)
    seeds = {}
    for label in labels:
        logs = [[r for r in read_jsonl(ckpt.parent.parent / "metrics.jsonl") if "loss" in r]
                for (name, _), ckpt in runs.items() if name == label]
        seeds[label] = len(logs)
        steps = [r["step"] for r in logs[0]]
        for ax, key in zip(axes, ("loss", "hn_grad_share")):
            values = [[log_[i][key] for log_ in logs] for i in range(len(steps))]
            if all(v is not None for row in values for v in row):  # the control has no hard-negative share
                mean = [statistics.fmean(row) for row in values]
                if key == "loss":
                    mean = [v / mean[0] for v in mean]
                ax.plot(steps, mean, label=label, color=colour[label])
    counts = sorted(set(seeds.values()))
    over = (f"mean over {counts[0]} seeds" if counts[0] > 1 else "one seed") if len(counts) == 1 else \
        f"mean over {counts[0]}-{counts[-1]} seeds per row"
    for ax, title, ylabel in zip(axes, (f"Loss relative to its first step ({over})",
                                        f"Hard-negative gradient share ({over})"),
                                 (f"loss / loss at step {steps[0]}", "hard-negative gradient share")):
        ax.set_xlabel("fine-tuning step")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        # below the panel: inside, it covers part of the curves
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.text(0.01, 0.01, LOSS_CAPTION, fontsize=8, color="#444", ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


LOSS_CAPTION = ("Each row's loss is divided by its own value at the first step: the control's loss runs over its N "
                "anchors' rows, the other rows' over 2N rows (anchors and negatives), static margin and Cement add "
                "margins, so their levels are not comparable with each other: each curve says how its own loss "
                "moved from its start.")


def plot_training_curves(runs: dict, path: Path) -> Path:
    """`training_curves_figure` as a PNG at ``path``."""
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


RESOLVABLE = ("The resolvable difference is (1.96 + 0.84) bootstrap standard errors: a true difference that large is "
              "detected with 80 % power at the two-sided 5 % level.")


def contrast_row(label: str, claim: str, h: dict, before: tuple[str, ...] = (), after: tuple[str, ...] = (),
                 verdict: str = "**{}**") -> str:
    """A markdown row of a study's contrast ``h``: its label, claim, ``before`` (e.g. its metric), its difference
    and 95 % interval (points), ``after`` (e.g. its p-values), its resolvable difference and its verdict."""
    cells = [label, claim, *before, signed(h["estimate"], 2), f"[{signed(h['ci95'][0], 2)}, {signed(h['ci95'][1], 2)}]",
             *after, f"{h['resolvable']:.2f}", verdict.format(h["verdict"])]
    return "| " + " | ".join(cells) + " |"


def all_rows(table: dict) -> list[str]:
    """The report's last section: every row of the study's table."""
    return ["## All rows (test, %, mean ± sd over seeds)", "", table_markdown(table), ""]

