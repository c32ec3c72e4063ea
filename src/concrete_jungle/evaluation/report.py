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
    lines = []
    for name, result in results.items():
        lines += [f"## {name}", "", "| metric | % |", "| --- | --- |"]
        lines += [f"| {k} | {100 * v:.2f} |" for k, v in result["metrics"].items()] + [""]
        skipped = result.get("skipped")
        if skipped and (sum(skipped.values()) if isinstance(skipped, dict) else skipped):
            lines += [f"Skipped items (missing or unreadable images): {skipped}", ""]
    return "\n".join(lines)


def compare(paths: list[str | Path]) -> str:
    """A side-by-side Markdown table of the metrics of result JSON files (same benchmark)."""
    results = [json.loads(Path(p).read_text()) for p in paths]
    keys = list(dict.fromkeys(k for r in results for k in r["metrics"]))
    header = "| metric | " + " | ".join(Path(p).stem + f" ({r['model_hash'][:8]})" for p, r in zip(paths, results))
    lines = [header + (" | Δ (last - first) |" if len(results) > 1 else " |"),
             "| --- |" + " --- |" * (len(results) + (len(results) > 1))]
    for k in keys:
        vals = [r["metrics"].get(k) for r in results]
        cells = ["-" if v is None else f"{100 * v:.2f}" for v in vals]
        delta = [f"{100 * (vals[-1] - vals[0]):+.2f}"] if len(vals) > 1 and None not in (vals[0], vals[-1]) else (
            ["-"] if len(vals) > 1 else [])
        lines.append(f"| {k} | " + " | ".join(cells + delta) + " |")
    return "\n".join(lines) + "\n"
