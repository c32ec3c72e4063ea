"""Where a model sits on the trade-off between composition and recognition: the two means of each evaluated model
(the summary line `concrete-jungle eval` writes, `evaluation.report.summary`), each with its 95 % interval, the
Pareto front among them, as a figure and a Markdown table of the same numbers (`concrete-jungle tradeoff`).

A point is one model's results: an ``eval --out`` folder (its ``<benchmark>.json`` files) or one result file. Its
interval is a bootstrap over each benchmark's images (all items of an image together, `stats`), the benchmarks
resampled independently and averaged as the mean is; a benchmark whose result holds no per-item outcomes for its
headline number gives its kind no interval, said in the table. Points are compared only on the same benchmarks and
the same benchmark files (``benchmark_files_sha256``): a mean over other benchmarks is another number.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..outcomes import RESAMPLES

KINDS = ("compositional", "recognition")


class TradeoffError(ValueError):
    """Results that cannot be placed on one figure; the message names them and why."""


def read_point(path: str | Path) -> dict[str, dict]:
    """A model's results by benchmark: every ``<benchmark>.json`` of an ``eval --out`` folder, or one result file."""
    from ..evaluation import BENCHMARKS
    from ..evaluation.report import read_result

    path = Path(path)
    if not path.exists():
        raise TradeoffError(f"{path} does not exist; give `concrete-jungle eval --out` folders or their result files "
                            "(LABEL=PATH to label one)")
    if path.is_dir():
        files = [path / f"{name}.json" for name in BENCHMARKS if (path / f"{name}.json").is_file()]
        if not files:
            raise TradeoffError(f"{path} holds no result of `concrete-jungle eval` (<benchmark>.json); give eval's "
                                "--out folders or their result files")
    else:
        files = [path]
    results = {}
    for file in files:
        result = read_result(str(file))
        if result.get("benchmark") not in BENCHMARKS:
            raise TradeoffError(f"{file} names no benchmark of ours ({result.get('benchmark')!r}); give result files "
                                "that `concrete-jungle eval` wrote")
        results[result["benchmark"]] = result
    return results


def headline_draws(name: str, result: dict, resamples: int, rng: np.random.Generator) -> np.ndarray | None:
    """Bootstrap replicates of a benchmark's headline number (the mean of its headline metrics, the registry's) over
    its images; None when its result holds no per-item outcomes for them."""
    from ..evaluation.names import BENCHMARKS
    from ..outcomes import metric_values, prepared

    keys = [k for k in BENCHMARKS[name].headlines if result["metrics"].get(k) is not None]
    outcomes = result.get("outcomes")
    if not keys or not outcomes or any(k not in outcomes["metrics"] for k in keys):
        return None
    outcomes = prepared(outcomes)
    whole = metric_values(outcomes, None, keys)
    differ = [f"{k} {result['metrics'][k]!r} where they give {whole[k]!r}" for k in keys
              if whole[k] is None or abs(whole[k] - result["metrics"][k]) > 1e-9]
    if differ:  # the interval would be another number's, and the figure's error bars negative
        raise TradeoffError(f"its {name} result disagrees with its own per-item outcomes ({'; '.join(differ)}): "
                            "the file was edited or put together from two; evaluate the model again")
    units = sorted({u for data in outcomes["series"].values() for u in data["units"]})
    index = {u: i for i, u in enumerate(units)}
    where = {s: np.array([index[u] for u in data["units"]], dtype=np.int64) for s, data in outcomes["series"].items()}
    draws = np.full(resamples, np.nan)
    for r in range(resamples):
        counts = np.bincount(rng.integers(0, len(units), len(units)), minlength=len(units)).astype(np.float64)
        values = metric_values(outcomes, {s: counts[w] for s, w in where.items()}, keys)
        if all(values[k] is not None for k in keys):
            draws[r] = sum(values[k] for k in keys) / len(keys)
    return draws


def place(results: dict[str, dict], resamples: int = RESAMPLES, seed: int = 0, normalised: bool = False) -> dict:
    """Per kind: the mean (percent), its 95 % interval, and each benchmark's headline number with its own;
    ``normalised``: the chance-normalised means (0 at chance, 100 perfect) instead of the raw ones."""
    from ..evaluation.chance import normalised as to_normalised
    from ..evaluation.report import summary

    rng = np.random.default_rng(seed)
    placed = {}
    for kind, part in summary(results).items():
        parts, all_draws, without = {}, [], []
        for name, value in part["parts"].items():
            chance = part["chance"][name]
            if normalised and chance is None:
                raise TradeoffError(f"{name}'s result carries no chance level, so it has no chance-normalised "
                                    "score; evaluate it again, or plot raw means")
            scale = (lambda v, c=chance: to_normalised(v, c)) if normalised else (lambda v: v)
            draws = headline_draws(name, results[name], resamples, rng)
            interval = None
            if draws is None or np.isnan(draws).all():
                without.append(name)
            else:
                scaled = scale(draws) * 100
                all_draws.append(scaled)
                interval = [float(x) for x in np.nanpercentile(scaled, [2.5, 97.5])]
            parts[name] = {"value": 100 * scale(value), "ci95": interval}
        mean = sum(p["value"] for p in parts.values()) / len(parts)
        ci95 = None
        if not without:
            means = np.nanmean(np.vstack(all_draws), axis=0) if len(all_draws) > 1 else all_draws[0]
            ci95 = [float(x) for x in np.nanpercentile(means, [2.5, 97.5])]
        placed[kind] = {"mean": mean, "ci95": ci95, "parts": parts, "without_outcomes": without}
    return placed


def pareto(points: list[dict]) -> list[bool]:
    """Whether each point is on the Pareto front: no other point is at least as high on both means and higher on
    one."""
    xy = [(p["recognition"]["mean"], p["compositional"]["mean"]) for p in points]
    return [not any(ox >= x and oy >= y and (ox, oy) != (x, y) for ox, oy in xy) for x, y in xy]


def comparable(points: list[dict]) -> None:
    """Every point has both kinds, over the same benchmarks, computed on the same benchmark files."""
    first = points[0]
    for p in points:
        missing = [k for k in KINDS if k not in p["placed"]]
        if missing:
            raise TradeoffError(f"{p['path']} has no {' and no '.join(missing)} benchmark: a point needs both means "
                                "(e.g. --benchmarks sugarcrepe,retrieval)")
        for kind in KINDS:
            ours, theirs = sorted(p["placed"][kind]["parts"]), sorted(first["placed"][kind]["parts"])
            if ours != theirs:
                raise TradeoffError(f"{p['path']} has the {kind} benchmarks {ours}, {first['path']} has {theirs}: "
                                    "means over other benchmarks are not comparable; evaluate every model on the same")
        for name, result in p["results"].items():
            a, b = result.get("benchmark_files_sha256"), first["results"][name].get("benchmark_files_sha256")
            if a and b and a != b:
                raise TradeoffError(f"{p['path']} and {first['path']} were evaluated on different {name} files "
                                    f"(benchmark files sha256 {a} against {b}); evaluate both on the same files")


def labels_and_paths(items: list[str]) -> list[tuple[str, str]]:
    """``LABEL=PATH`` or ``PATH`` (labelled by the shortest trailing part of the path that tells them apart)."""
    from ..evaluation.report import column_names

    pairs = [item.split("=", 1) if "=" in item and not Path(item).exists() else [None, item] for item in items]
    names = column_names([path for _, path in pairs])
    labelled = [(label or name, path) for (label, path), name in zip(pairs, names)]
    seen: dict[str, str] = {}
    for label, path in labelled:
        if label in seen:
            raise TradeoffError(f"{seen[label]} and {path} have the same label {label!r}: give each point a label of "
                                "its own (LABEL=PATH)")
        seen[label] = path
    return labelled


OUTPUTS = ["tradeoff.png", "tradeoff.md", "tradeoff.json"]


def tradeoff(items: list[str], out: str | Path, resamples: int = RESAMPLES, seed: int = 0,
             normalised: bool = False, overwrite: bool = False) -> dict:
    """Place every model, find the front, write ``tradeoff.png``, ``tradeoff.md`` and ``tradeoff.json`` to
    ``out`` (replacing only such files a trade-off wrote there, `files.outputs.claim`, unless ``overwrite``); the placed
    points."""
    from ..files.outputs import claim, output_folder, written
    from ..records import atomic_write_json, atomic_write_text

    output_folder(out)
    points = []
    for label, path in labels_and_paths(items):
        results = read_point(path)
        try:
            placed = place(results, resamples, seed, normalised)
        except TradeoffError as e:
            raise TradeoffError(f"{path}: {e}") from None
        points.append({"label": label, "path": path, "results": results,
                       "model": next(iter(results.values())).get("model_label", "?"), "placed": placed})
    if len(points) < 2:
        raise TradeoffError("a trade-off needs two or more models (a start model, its fine-tunes, a WiSE-FT sweep)")
    comparable(points)
    rows = [{"label": p["label"], "path": p["path"], "model": p["model"]} | {k: p["placed"][k] for k in KINDS}
            for p in points]
    for row, front in zip(rows, pareto(rows)):
        row["front"] = front
    table = {"points": rows, "resamples": resamples, "seed": seed, "normalised": normalised,
             "benchmarks": {k: sorted(rows[0][k]["parts"]) for k in KINDS}, "sweeps": sweeps(points)}
    out = claim(out, OUTPUTS, "tradeoff", overwrite)
    plot(table, out / "tradeoff.png")
    atomic_write_text(out / "tradeoff.md", markdown(table))
    atomic_write_json(out / "tradeoff.json", table)
    written(out, OUTPUTS)
    return table


def sweeps(points: list[dict]) -> list[list[int]]:
    """The WiSE-FT sweeps among the points, each as point indices from its start through its alphas to its
    fine-tune (those of them that are points): a point whose checkpoint holds ``wise_ft.json`` belongs to the
    sweep of its two ends, which are found by their model hash."""
    by_hash = {next(iter(p["results"].values())).get("model_hash"): i for i, p in enumerate(points)}
    groups: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for i, p in enumerate(points):
        where = (next(iter(p["results"].values())).get("model") or {}).get("path")
        record = Path(where) / "wise_ft.json" if where else None
        if record is not None and record.is_file():
            made = json.loads(record.read_text(encoding="utf-8"))
            groups.setdefault((made["start"]["hash"], made["finetuned"]["hash"]), []).append((made["alpha"], i))
    found = []
    for (start, finetuned), members in groups.items():
        chain = ([by_hash[start]] if start in by_hash else []) + [i for _, i in sorted(members)] + (
            [by_hash[finetuned]] if finetuned in by_hash else [])
        if len(chain) > 1:
            found.append(chain)
    return found


def interval_text(ci95: list[float] | None) -> str:
    return "-" if ci95 is None else f"[{ci95[0]:.2f}, {ci95[1]:.2f}]"


def markdown(table: dict) -> str:
    which = "chance-normalised means (0 at chance, 100 perfect)" if table["normalised"] else "raw means (%)"
    lines = ["| model | compositional | 95 % interval | recognition | 95 % interval | on the front |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in table["points"]:
        c, r = row["compositional"], row["recognition"]
        lines.append(f"| {row['label']} | {c['mean']:.2f} | {interval_text(c['ci95'])} | {r['mean']:.2f} | "
                     f"{interval_text(r['ci95'])} | {'yes' if row['front'] else 'no'} |")
    lines += ["", f"Both columns are {which} of each benchmark's headline number (the summary line of `concrete-jungle "
              f"eval`): compositional over {', '.join(table['benchmarks']['compositional'])}; recognition over "
              f"{', '.join(table['benchmarks']['recognition'])}. Intervals: bootstrap, {table['resamples']} "
              "resamples of each benchmark's images (all items of an image together; the benchmarks resampled "
              f"independently; seed {table['seed']}). On the front: no other model is at least as high on both "
              "means and higher on one."]
    without = sorted({n for row in table["points"] for k in KINDS for n in row[k]["without_outcomes"]})
    if without:
        lines += ["", f"No interval where {', '.join(without)} hold(s) no per-item outcomes for the headline "
                  "number (written before results kept them, or a metric that is not a mean over items)."]
    lines += ["", "Models:"] + [f"- {row['label']}: `{row['path']}`, {row['model']}" for row in table["points"]]
    return "\n".join(lines) + "\n"


def plot(table: dict, path: Path) -> None:
    """Compositional mean against recognition mean, 95 % intervals as error bars, the front as a dashed line through
    its points (drawn red), each WiSE-FT sweep as a dotted line from its start through its alphas to its fine-tune,
    every point labelled where its label overlaps no other."""
    from .figures import _pyplot

    plt = _pyplot()
    rows = table["points"]
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=130)

    def err(part):
        return [[part["mean"] - part["ci95"][0]], [part["ci95"][1] - part["mean"]]] if part["ci95"] else None

    def xy(row):
        return row["recognition"]["mean"], row["compositional"]["mean"]

    for row in rows:
        ax.errorbar(*xy(row), xerr=err(row["recognition"]), yerr=err(row["compositional"]), fmt="none",
                    ecolor="#bdc3c7", elinewidth=0.9, capsize=2, zorder=1)
        ax.plot(*xy(row), "o", markersize=6, color="#c0392b" if row["front"] else "#34495e", zorder=4)
    lines = [[xy(rows[j]) for j in sweep] for sweep in table.get("sweeps", [])]
    for i, line in enumerate(lines):
        ax.plot(*zip(*line), ":", color="#2980b9", linewidth=1.4, zorder=2,
                label="WiSE-FT: start → alphas → fine-tune" if i == 0 else None)
    front = sorted(xy(row) for row in rows if row["front"])
    lines.append(front)
    ax.plot([x for x, _ in front], [y for _, y in front], "--", color="#c0392b", linewidth=1.2,
            label="Pareto front", zorder=3)
    unit = "chance-normalised" if table["normalised"] else "%"
    ax.set_xlabel(f"recognition mean ({unit}): {', '.join(table['benchmarks']['recognition'])}")
    ax.set_ylabel(f"compositional mean ({unit}): {', '.join(table['benchmarks']['compositional'])}")
    ax.set_title("Composition against recognition (95 % intervals; front in red)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    # in the laid-out axes: labels stay inside, off the markers and the lines
    label_points(fig, ax, [(row["label"], *xy(row)) for row in rows], lines)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)


# where a label may go, in points from its marker: beside it first, then further out with a leader line
OFFSETS = [(7, 5), (7, -11), (-7, 5), (-7, -11), (0, 12), (0, -18), (18, 18), (18, -26), (-18, 18), (-18, -26),
           (30, 4), (-30, 4), (30, 34), (30, -42), (-30, 34), (-30, -42), (0, 40), (0, -48)]


def label_points(fig, ax, points: list[tuple[str, float, float]], lines: list[list[tuple[float, float]]] = ()) -> None:
    """Each label at the first offset where it overlaps no marker, no line of ``lines`` (each a list of points in
    data coordinates) and no label placed before (the highest point first); where none is free, at the first."""
    from matplotlib.transforms import Bbox

    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    radius = 4 * fig.dpi / 72
    taken = []

    def block(cx: float, cy: float, r: float) -> None:
        taken.append(Bbox.from_extents(cx - r, cy - r, cx + r, cy + r))

    for _, x, y in points:
        block(*ax.transData.transform((x, y)), radius)
    for line in lines:  # each segment as a row of small boxes, one every pixel or two along it
        for a, b in zip(line, line[1:]):
            (ax_, ay), (bx, by) = ax.transData.transform(a), ax.transData.transform(b)
            steps = max(1, int(max(abs(bx - ax_), abs(by - ay)) / 2))
            for k in range(steps + 1):
                block(ax_ + (bx - ax_) * k / steps, ay + (by - ay) * k / steps, 1.0)
    for label, x, y in sorted(points, key=lambda p: -p[2]):
        for n, (dx, dy) in enumerate(OFFSETS + [OFFSETS[0]]):
            far = abs(dx) + abs(dy) > 20
            text = ax.annotate(label, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=8, zorder=5,
                               ha="left" if dx >= 0 else "right", va="center",
                               arrowprops={"arrowstyle": "-", "color": "#555555", "lw": 0.7, "shrinkA": 1,
                                           "shrinkB": 4} if far else None)
            box = text.get_window_extent(renderer)
            fits = frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)
            if n == len(OFFSETS) or (fits and not any(box.overlaps(other) for other in taken)):
                taken.append(box)
                break
            text.remove()
