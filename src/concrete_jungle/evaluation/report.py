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


def markdown(results: dict[str, dict]) -> str:
    """A run's results: which model, then per benchmark its items and metrics."""
    labels = list(dict.fromkeys(r.get("model_label", "") for r in results.values()))
    lines = [f"Model: {', '.join(labels)}", ""] if any(labels) else []
    for name, result in results.items():
        lines += [f"## {name}", ""]
        if "n" in result:  # items per subset
            lines += ["Items: " + ", ".join(f"{k} {v}" for k, v in result["n"].items()), ""]
        elif "items" in result:
            lines += [f"Items: {result['items']}", ""]
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


def compare(paths: list[str | Path]) -> str:
    """A side-by-side Markdown table of the metrics of result JSON files (same benchmark), each column named by
    its file, with the model each file evaluated and its item count."""
    results = [json.loads(Path(p).read_text()) for p in paths]
    keys = list(dict.fromkeys(k for r in results for k in r["metrics"]))
    names = column_names(paths)
    header = "| metric | " + " | ".join(names)
    lines = [header + (" | Δ (last - first) |" if len(results) > 1 else " |"),
             "| --- |" + " --- |" * (len(results) + (len(results) > 1))]
    for k in keys:
        vals = [r["metrics"].get(k) for r in results]
        cells = [percent(v) for v in vals]
        delta = [f"{100 * (vals[-1] - vals[0]):+.2f}"] if len(vals) > 1 and None not in (vals[0], vals[-1]) else (
            ["-"] if len(vals) > 1 else [])
        lines.append(f"| {k} | " + " | ".join(cells + delta) + " |")
    lines += ["", "Files:"]
    for name, path, r in zip(names, paths, results):
        model = r.get("model_label") or r.get("model_hash", "?")[:8]
        lines.append(f"- {name}: `{path}`, {r.get('benchmark', '?')}, model {model}, items {r.get('items', '?')}")
    return "\n".join(lines) + "\n"
