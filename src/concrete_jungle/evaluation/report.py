"""Results as people read them: the layout check's counts, a run's Markdown, a side-by-side comparison of files."""

from __future__ import annotations

import json
from pathlib import Path


def counts(data) -> tuple[int, int]:
    """(usable items, skipped items) of what `load_data` returned, whatever the benchmark's structure; for VTAB,
    tasks."""
    if "tasks" in data:
        return len(data["tasks"]), data["skipped"]
    skipped = data.get("skipped", 0)
    skipped = sum(skipped.values()) if isinstance(skipped, dict) else skipped
    if "splits" in data:
        return sum(len(paths) for paths, _ in data["splits"].values()), skipped
    items = data["items"]
    return (sum(map(len, items.values())) if isinstance(items, dict) else len(items)), skipped


def layout_report(loaded: dict) -> str:
    """What `concrete-jungle eval --check` prints: each benchmark's usable and skipped items."""
    lines = ["| benchmark | items | skipped (missing or unreadable images) |", "| --- | --- | --- |"]
    for name, data in loaded.items():
        items, skipped = counts(data)
        lines.append(f"| {name} | {items} | {skipped} |")
    return "\n".join(lines + ["", "The layout was checked and every image opened; no model was loaded."])


# The one number of each benchmark in a run's summary line, and which of the two means it joins. Each is the number
# the benchmark's paper leads with; a benchmark of several (ARO, What'sUp, retrieval) gives the mean of those.
HEADLINES = {
    "sugarcrepe": ("compositional", ["M.Avg"]),
    "sugarcrepe_pp": ("compositional", ["M.Avg/ITT"]),
    "winoground": ("compositional", ["group"]),
    "aro": ("compositional", ["VG-Relation", "VG-Relation (all relations)", "VG-Attribution"]),
    "aro_order": ("compositional", ["coco_order", "flickr30k_order"]),
    "valse": ("compositional", ["VALSE"]),
    "whatsup": ("compositional", ["controlled_a", "controlled_b", "coco_qa_one", "coco_qa_two", "vg_qa_one",
                                  "vg_qa_two"]),
    "retrieval": ("recognition", ["image_retrieval_recall@1", "text_retrieval_recall@1"]),
    "coco_retrieval": ("recognition", ["image_retrieval_recall@1", "text_retrieval_recall@1"]),
    "zeroshot": ("recognition", ["acc1 (mean over datasets)"]),
    "linear_probe": ("recognition", ["top1"]),
    "coco_probe": ("recognition", ["mAP"]),
    "vtab": ("recognition", ["M.Avg"]),
}


def summary(results: dict[str, dict]) -> dict[str, dict]:
    """Per kind (compositional, recognition): the mean over the run's benchmarks of their headline numbers
    (`HEADLINES`), and those numbers."""
    out: dict[str, dict] = {}
    for name, result in results.items():
        kind, keys = HEADLINES[name]
        values = [result["metrics"][k] for k in keys if result["metrics"].get(k) is not None]
        if values:
            out.setdefault(kind, {"parts": {}})["parts"][name] = sum(values) / len(values)
    for kind in out.values():
        kind["mean"] = sum(kind["parts"].values()) / len(kind["parts"])
    return out


def markdown(results: dict[str, dict]) -> str:
    """A run's results: which model, the summary line, then per benchmark its items and metrics."""
    labels = list(dict.fromkeys(r.get("model_label", "") for r in results.values()))
    lines = [f"Model: {', '.join(labels)}", ""] if any(labels) else []
    for kind, part in summary(results).items():
        lines += [f"**{kind.capitalize()}: {percent(part['mean'])}** (the mean over "
                  + ", ".join(f"{n} {percent(v)}" for n, v in part["parts"].items())
                  + "; each benchmark's headline number, docs/method.md §7)", ""]
    for name, result in results.items():
        lines += [f"## {name}", ""]
        if isinstance(result.get("n"), dict):  # items per subset
            lines += ["Items: " + ", ".join(f"{k} {v}" for k, v in result["n"].items()), ""]
        elif "n" in result or "items" in result:
            lines += [f"Items: {result.get('n', result.get('items'))}", ""]
        lines += ["| metric | % |", "| --- | --- |"]
        lines += [f"| {k} | {percent(v)} |" for k, v in result["metrics"].items()] + [""]
        skipped = result.get("skipped")
        if skipped and (sum(skipped.values()) if isinstance(skipped, dict) else skipped):
            lines += [f"Skipped items (missing or unreadable images): {skipped}", ""]
    return "\n".join(lines)


def percent(value) -> str:
    return "-" if value is None or value != value else f"{100 * value:.2f}"  # None or NaN: nothing to show


def column_names(paths: list[str | Path]) -> list[str]:
    """The shortest trailing part of each path that tells the files apart (``a/sugarcrepe.json`` and
    ``b/sugarcrepe.json``, not two ``sugarcrepe``)."""
    parts = [Path(p).parts for p in paths]
    for k in range(1, max(map(len, parts)) + 1):
        names = ["/".join(p[-k:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return [str(p) for p in paths]


def compare(first: list[str | Path], second: list[str | Path] | None = None, resamples: int = 2000,
            seed: int = 0) -> dict:
    """Compare result JSON files of one benchmark, each metric with the difference and its 95 % interval.

    Without ``second``: every file against the first (one run each; McNemar p for accuracy metrics). With
    ``second``: the runs of ``first`` (e.g. seeds) against the runs of ``second``, the difference of their means,
    runs resampled within each side as well as images (`stats.bootstrap_contrast`). Items are matched by key;
    results on other items are refused with the reason. The comparison as a dict; `compare_markdown` renders it."""
    from ..stats import OutcomesError, binary, bootstrap_contrast, check_same_items, mcnemar, verdict

    paths = [str(p) for p in first + (second or [])]
    results = [json.loads(Path(p).read_text()) for p in paths]
    names = column_names(paths)
    benchmarks = sorted({r.get("benchmark", "?") for r in results})
    if len(benchmarks) > 1:
        raise OutcomesError(f"the files hold different benchmarks ({', '.join(benchmarks)}); compare one at a time")
    without = [n for n, r in zip(names, results) if "outcomes" not in r]
    if not without:
        check_same_items([r["outcomes"] for r in results], names)
    if second:
        sides = [("A", names[:len(first)], results[:len(first)]), ("B", names[len(first):], results[len(first):])]
    else:
        sides = [(n, [n], [r]) for n, r in zip(names, results)]
    keys = list(dict.fromkeys(k for r in results for k in r["metrics"]))
    known = [k for k in keys if not without and k in results[0]["outcomes"]["metrics"]]
    base = sides[0][2]
    intervals = []  # per later column: the bootstrap of every metric with a recipe, one pass over the resamples
    for _, _, runs in sides[1:]:
        if not known:
            intervals.append({})
            continue
        groups = {"first": [r["outcomes"] for r in base], "second": [r["outcomes"] for r in runs]}
        intervals.append(bootstrap_contrast(groups, {"first": -1.0, "second": 1.0}, known, resamples, seed))
    rows = []
    for k in keys:
        row = {"metric": k, "values": [mean_or_none([r["metrics"].get(k) for r in runs]) for _, _, runs in sides],
               "differences": []}
        for (label, _, runs), interval, value in zip(sides[1:], intervals, row["values"][1:]):
            if k in interval:
                diff = {"vs": label} | interval[k]
                diff["verdict"] = verdict(diff["ci95"])
                flags = [binary(r["outcomes"], k) for r in (base[0], runs[0])]
                if len(base) == len(runs) == 1 and all(f is not None for f in flags):
                    diff["mcnemar"] = mcnemar(*flags)
            else:  # no per-item outcomes, or a metric that is not a mean of them (mAP)
                first = row["values"][0]
                diff = {"vs": label, "estimate": None if first is None or value is None else 100 * (value - first),
                        "ci95": None, "verdict": "no interval"}
            row["differences"].append(diff)
        rows.append(row)
    return {"benchmark": benchmarks[0], "columns": [label for label, _, _ in sides],
            "files": {label: files for label, files, _ in sides}, "resamples": resamples, "seed": seed,
            "without_outcomes": without, "rows": rows,
            "models": {n: r.get("model_label") or r.get("model_hash", "?")[:8] for n, r in zip(names, results)},
            "items": {n: r.get("items", "?") for n, r in zip(names, results)}, "paths": dict(zip(names, paths))}


def mean_or_none(values: list) -> float | None:
    return None if not values or any(v is None for v in values) else sum(values) / len(values)


def compare_markdown(comparison: dict) -> str:
    """The comparison as a table: each column's value, then per later column the difference to the first (points)
    with its 95 % interval, McNemar's p where it applies, and whether the difference is resolved, in words."""
    columns = comparison["columns"]
    first = columns[0]
    head = ["metric", *columns]
    for label in columns[1:]:
        head += [f"Δ {label} - {first}", "95 % interval", "McNemar p", "resolved?"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in comparison["rows"]:
        cells = [row["metric"], *(percent(v) for v in row["values"])]
        for d in row["differences"]:
            interval = "-" if d.get("ci95") is None else f"[{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}]"
            p = d.get("mcnemar", {}).get("p")
            cells += ["-" if d["estimate"] is None else f"{d['estimate']:+.2f}", interval,
                      "-" if p is None else f"{p:.3g}", WORDS[d["verdict"]]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Differences in points. Intervals: paired bootstrap, {comparison['resamples']} resamples of the "
              "images (all items of an image together" + (", and of the runs within each side" if
                                                            "A" in comparison["files"] else "")
              + f"; seed {comparison['seed']}); McNemar: exact, on the items one run gets right and the other not."]
    if comparison["without_outcomes"]:
        lines += ["", "No intervals: " + ", ".join(comparison["without_outcomes"]) + " hold(s) no per-item outcomes "
                  "(written before they were kept); evaluate again to get them."]
    lines += ["", "Files:"]
    for label, files in comparison["files"].items():
        for name in files:
            prefix = f"{label}: " if label != name else ""
            lines.append(f"- {prefix}{name}: `{comparison['paths'][name]}`, {comparison['benchmark']}, model "
                         f"{comparison['models'][name]}, items {comparison['items'][name]}")
    return "\n".join(lines) + "\n"


WORDS = {"higher": "yes: higher", "lower": "yes: lower", "not resolved": "no", "no interval": "-"}
