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
from .report import HEADLINES, counts, markdown, summary

# The benchmark modules import torch and open_clip; they are imported where they are used, so that the
# CLI (and its --help) starts without them.


def load_data(name: str, root: Path, skip_missing: bool) -> dict:
    """Read and check a benchmark's files (no model needed), with the digest of every file it read
    (``benchmark_files_sha256``: `checks.files_digest`), which its result carries."""
    from .checks import files_digest

    data = read_benchmark(name, root, skip_missing)
    data["benchmark_files_sha256"] = files_digest(data.pop("files"), root)
    return data


def read_benchmark(name: str, root: Path, skip_missing: bool) -> dict:
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


# what shows that a benchmark's data is under the data root (`--benchmarks all`): any one of the files or folders
# (ending in /) that `read_benchmark` opens first; whether the rest is there and sound, `load_data` checks
MARKERS = {
    "sugarcrepe": ("sugarcrepe/*.json",),
    "sugarcrepe_pp": ("sugarcrepe_pp/*.json",),
    "winoground": ("winoground/examples.jsonl",),
    "aro": ("aro/visual_genome_relation.json", "aro/visual_genome_attribution.json"),
    "aro_order": ("coco/dataset_coco.json", "flickr30k/dataset_flickr30k.json"),
    "valse": ("valse/*.json",),
    "whatsup": ("whatsup/controlled_images_dataset.json", "whatsup/controlled_clevr_dataset.json",
                "whatsup/*_qa_*_obj.json"),
    "retrieval": ("flickr30k/dataset_flickr30k.json",),
    "coco_retrieval": ("coco/dataset_coco.json",),
    "zeroshot": ("zeroshot/*/",),
    "linear_probe": ("imagenet/train/",),
    "coco_probe": ("coco/annotations/instances_train2017.json",),
    "vtab": ("vtab/*/",),
}


def present(root: Path) -> dict[str, bool]:
    """Per benchmark (`BENCHMARKS` order): whether its data is under ``root`` (`MARKERS`)."""
    def found(pattern: str) -> bool:
        folder = pattern.endswith("/")
        return any(p.is_dir() if folder else p.is_file() for p in root.glob(pattern.rstrip("/")))

    return {name: any(map(found, MARKERS[name])) for name in BENCHMARKS}


def evaluate_one(name: str, encoder, data) -> dict:
    from . import (aro, aro_order, linear_probe, retrieval, sugarcrepe, sugarcrepe_pp, valse, vtab, whatsup,
                   winoground, zeroshot)

    module = {"vtab": vtab, "sugarcrepe": sugarcrepe, "sugarcrepe_pp": sugarcrepe_pp, "winoground": winoground,
              "aro": aro, "aro_order": aro_order, "valse": valse, "whatsup": whatsup, "retrieval": retrieval,
              "coco_retrieval": retrieval, "zeroshot": zeroshot, "linear_probe": linear_probe,
              "coco_probe": linear_probe}[name]
    return module.evaluate(encoder, data)


def run(encoder, names: list[str], loaded: dict, out: str | Path | None = None,
        overwrite: bool = False) -> dict[str, dict]:
    """Evaluate every benchmark in ``loaded`` (name -> data from `load_data`); write JSON + results.md (which also
    report the results ``out`` held of this model). ``overwrite``: remove another model's results from ``out``."""
    from .chance import levels

    kept = kept_results(Path(out), encoder.clip.hash, overwrite) if out is not None else {}
    results = {}
    for name in names:
        start = time.perf_counter()
        result = evaluate_one(name, encoder, loaded[name])  # with its per-item outcomes, for eval --compare
        # a metric with nothing to average (every item skipped) has no value: null in JSON, never NaN
        result["metrics"] = {k: None if isinstance(v, float) and v != v else v for k, v in result["metrics"].items()}
        result["chance"] = levels(name, loaded[name], result, HEADLINES[name][1])
        results[name] = {"benchmark": name, "model": encoder.clip.identity, "model_label": encoder.clip.label,
                         "model_hash": encoder.clip.hash, "items": counts(loaded[name])[0],
                         "benchmark_files_sha256": loaded[name]["benchmark_files_sha256"],
                         "seconds": round(time.perf_counter() - start, 2)} | result
        if out is not None:
            atomic_write_json(Path(out) / f"{name}.json", results[name])
    if out is not None:
        reported = {n: r for n, r in kept.items() if n not in results} | results
        atomic_write_json(Path(out) / "summary.json", summary(reported))
        atomic_write_text(Path(out) / "results.md", markdown(reported))
    return results


def kept_results(out: Path, model_hash: str, overwrite: bool) -> dict[str, dict]:
    """The results ``out`` holds of the model ``model_hash``, by benchmark: kept beside this run's. Results of
    another model would stay beside them (and ``eval --compare out/*.json`` read them as this model's): refused,
    naming the model, or with ``overwrite`` removed first, with the report that names it. A file of a benchmark's
    name that is no result of ours is refused, and kept."""
    import json

    mine, others = {}, {}
    for name in BENCHMARKS:
        path = out / f"{name}.json"
        if not path.is_file():
            continue
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
            held = result["model_hash"]
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"--out {out} holds {path}, which is not a result of `concrete-jungle eval`; it is "
                             "kept: choose another --out, or move it away") from None
        (mine if held == model_hash else others)[path] = result
    if others and not overwrite:
        models = ", ".join(sorted({r.get("model_label") or r["model_hash"] for r in others.values()}))
        raise ValueError(f"--out {out} holds the results of another model, {models} "
                         f"({', '.join(p.name for p in others)}); pass --overwrite to remove them first, or choose "
                         "another --out")
    if others:
        for path in [*others, out / "summary.json", out / "results.md"]:
            path.unlink(missing_ok=True)
    return {path.stem: result for path, result in mine.items()}
