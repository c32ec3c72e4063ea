"""The evaluation suite (paper §3, docs/method.md §7): one module per benchmark, each with ``load`` (files checked
before any model loads) and ``evaluate(encoder, data)``; `run` ties them to a data root and writes results.

Data root layout (every part optional; only the benchmarks asked for are read)::

    <root>/sugarcrepe/*.json          official SugarCrepe JSON        + <root>/coco/val2017/
    <root>/sugarcrepe_pp/*.json       official SugarCrepe++ JSON      + <root>/coco/val2017/
    <root>/winoground/                examples.jsonl + images/ (or exported from the HF dataset)
    <root>/flickr30k/                 dataset_flickr30k.json + images/
    <root>/imagenet/                  train/<class>/*, val/<class>/*
    <root>/coco/                      annotations/instances_{train,val}2017.json, train2017/, val2017/
    <root>/vtab/<task>/               clip_benchmark's local dataset roots
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..records import atomic_write_json, atomic_write_text
from .names import BENCHMARKS

# The benchmark modules import torch and open_clip; they are imported where they are used, so that the
# CLI (and its --help) starts without them.


def load_data(name: str, root: Path, skip_missing: bool):
    """Read and check a benchmark's files (no model needed)."""
    from . import linear_probe, retrieval, sugarcrepe, sugarcrepe_pp, vtab, winoground
    from .encoding import BenchmarkDataError

    if name == "sugarcrepe":
        return sugarcrepe.load(root / "sugarcrepe", root / "coco" / "val2017", skip_missing=skip_missing)
    if name == "sugarcrepe_pp":
        return sugarcrepe_pp.load(root / "sugarcrepe_pp", root / "coco" / "val2017", skip_missing=skip_missing)
    if name == "winoground":
        return winoground.load(root / "winoground", skip_missing=skip_missing)
    if name == "retrieval":
        return retrieval.load(root / "flickr30k" / "dataset_flickr30k.json", root / "flickr30k" / "images",
                              skip_missing=skip_missing)
    if name == "linear_probe":
        return linear_probe.load_image_folder(root / "imagenet", skip_missing=skip_missing)
    if name == "coco_probe":
        return linear_probe.load_coco(root / "coco", skip_missing=skip_missing)
    if name == "vtab":
        return vtab.load(root / "vtab", skip_missing=skip_missing)
    raise BenchmarkDataError(f"unknown benchmark {name!r}; choose from {BENCHMARKS}")


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


def evaluate_one(name: str, encoder, data) -> dict:
    from . import linear_probe, retrieval, sugarcrepe, sugarcrepe_pp, vtab, winoground

    module = {"vtab": vtab, "sugarcrepe": sugarcrepe, "sugarcrepe_pp": sugarcrepe_pp, "winoground": winoground,
              "retrieval": retrieval, "linear_probe": linear_probe, "coco_probe": linear_probe}[name]
    return module.evaluate(encoder, data)


def run(encoder, names: list[str], loaded: dict, out: str | Path | None = None) -> dict[str, dict]:
    """Evaluate every benchmark in ``loaded`` (name -> data from `load_data`); write JSON + results.md."""
    results = {}
    for name in names:
        start = time.perf_counter()
        result = evaluate_one(name, encoder, loaded[name])
        result.pop("per_item", None)
        results[name] = {"benchmark": name, "model": encoder.clip.identity, "model_hash": encoder.clip.hash,
                         "seconds": round(time.perf_counter() - start, 2)} | result
        if out is not None:
            atomic_write_json(Path(out) / f"{name}.json", results[name])
    if out is not None:
        atomic_write_text(Path(out) / "results.md", markdown(results))
    return results


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
