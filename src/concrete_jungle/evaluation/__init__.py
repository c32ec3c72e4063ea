"""The evaluation suite (paper §3, docs/method.md §7): one module per benchmark, each with ``load`` (files checked
before any model loads) and ``evaluate(encoder, data)``; `run` ties them to a data root and writes results;
`report` renders and compares them.

Data root layout (every part optional; only the benchmarks asked for are read)::

    <root>/sugarcrepe/*.json          official SugarCrepe JSON        + <root>/coco/val2017/
    <root>/sugarcrepe_pp/*.json       official SugarCrepe++ JSON      + <root>/coco/val2017/
    <root>/winoground/                examples.jsonl + images/ (or exported from the HF dataset)
    <root>/aro/                       visual_genome_{relation,attribution}.json + images/
    <root>/valse/                     <piece>.json + images/
    <root>/whatsup/                   controlled_*_dataset.json, {coco,vg}_qa_*_obj.json + their image folders
    <root>/flickr30k/                 dataset_flickr30k.json + images/
    <root>/coco/                      dataset_coco.json + val2014/ (coco_retrieval: the Karpathy 5k test split)
    <root>/zeroshot/<dataset>/        test/<class>/* (+ classnames.txt, templates.txt)
    <root>/imagenet/                  train/<class>/*, val/<class>/*
    <root>/coco/                      annotations/instances_{train,val}2017.json, train2017/, val2017/
    <root>/vtab/<task>/               clip_benchmark's local dataset roots
"""

from __future__ import annotations

import time
from pathlib import Path

from ..records import atomic_write_json, atomic_write_text
from .names import BENCHMARKS
from .report import counts, markdown, summary

# The benchmark modules import torch and open_clip; they are imported where they are used, so that the
# CLI (and its --help) starts without them.


def load_data(name: str, root: Path, skip_missing: bool):
    """Read and check a benchmark's files (no model needed)."""
    from . import (aro, aro_order, linear_probe, retrieval, sugarcrepe, sugarcrepe_pp, valse, vtab, whatsup,
                   winoground, zeroshot)
    from .encoding import BenchmarkDataError

    if name == "sugarcrepe":
        return sugarcrepe.load(root / "sugarcrepe", root / "coco" / "val2017", skip_missing=skip_missing)
    if name == "sugarcrepe_pp":
        return sugarcrepe_pp.load(root / "sugarcrepe_pp", root / "coco" / "val2017", skip_missing=skip_missing)
    if name == "winoground":
        return winoground.load(root / "winoground", skip_missing=skip_missing)
    if name == "aro":
        return aro.load(root / "aro", skip_missing=skip_missing)
    if name == "aro_order":
        return aro_order.load(root, skip_missing=skip_missing)
    if name == "valse":
        return valse.load(root / "valse", skip_missing=skip_missing)
    if name == "whatsup":
        return whatsup.load(root / "whatsup", root / "coco" / "val2017", skip_missing=skip_missing)
    if name == "retrieval":
        return retrieval.load(root / "flickr30k" / "dataset_flickr30k.json", root / "flickr30k" / "images",
                              skip_missing=skip_missing)
    if name == "coco_retrieval":
        return retrieval.load(root / "coco" / "dataset_coco.json", root / "coco", skip_missing=skip_missing)
    if name == "zeroshot":
        return zeroshot.load(root / "zeroshot", skip_missing=skip_missing)
    if name == "linear_probe":
        return linear_probe.load_image_folder(root / "imagenet", skip_missing=skip_missing)
    if name == "coco_probe":
        return linear_probe.load_coco(root / "coco", skip_missing=skip_missing)
    if name == "vtab":
        return vtab.load(root / "vtab", skip_missing=skip_missing)
    raise BenchmarkDataError(f"unknown benchmark {name!r}; choose from {BENCHMARKS}")




def evaluate_one(name: str, encoder, data) -> dict:
    from . import (aro, aro_order, linear_probe, retrieval, sugarcrepe, sugarcrepe_pp, valse, vtab, whatsup,
                   winoground, zeroshot)

    module = {"vtab": vtab, "sugarcrepe": sugarcrepe, "sugarcrepe_pp": sugarcrepe_pp, "winoground": winoground,
              "aro": aro, "aro_order": aro_order, "valse": valse, "whatsup": whatsup, "retrieval": retrieval,
              "coco_retrieval": retrieval, "zeroshot": zeroshot, "linear_probe": linear_probe,
              "coco_probe": linear_probe}[name]
    return module.evaluate(encoder, data)


def run(encoder, names: list[str], loaded: dict, out: str | Path | None = None) -> dict[str, dict]:
    """Evaluate every benchmark in ``loaded`` (name -> data from `load_data`); write JSON + results.md."""
    results = {}
    for name in names:
        start = time.perf_counter()
        result = evaluate_one(name, encoder, loaded[name])  # with its per-item outcomes, for eval --compare
        # a metric with nothing to average (every item skipped) has no value: null in JSON, never NaN
        result["metrics"] = {k: None if isinstance(v, float) and v != v else v for k, v in result["metrics"].items()}
        results[name] = {"benchmark": name, "model": encoder.clip.identity, "model_label": encoder.clip.label,
                         "model_hash": encoder.clip.hash, "items": counts(loaded[name])[0],
                         "seconds": round(time.perf_counter() - start, 2)} | result
        if out is not None:
            atomic_write_json(Path(out) / f"{name}.json", results[name])
    if out is not None:
        atomic_write_json(Path(out) / "summary.json", summary(results))
        atomic_write_text(Path(out) / "results.md", markdown(results))
    return results
