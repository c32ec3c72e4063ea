"""The evaluation suite (paper §3, docs/method.md §7): one module per benchmark in `benchmarks`, each with a reader
of the data root (files checked before any model loads), ``evaluate(encoder, data)`` and ``item_chances(data)``;
`names.BENCHMARKS` lists them with the layout each reads under the data root (every part optional; only the
benchmarks asked for are read) and `names.benchmark_module` finds a benchmark's module by its name; `run` ties them
to a data root and writes results; `report` renders and compares them.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..records import atomic_write_json, atomic_write_text
from .names import BENCHMARKS, benchmark_module
from .report import counts, markdown, summary

# The benchmark modules import torch and open_clip; they are imported where they are used, so that the
# CLI (and its --help) starts without them.


def load_data(name: str, root: Path, skip_missing: bool) -> dict:
    """Read and check a benchmark's files (no model needed), with the digest of every file it read
    (``benchmark_files_sha256``: `checks.files_digest`), which its result carries."""
    from .checks import files_digest

    data = read_benchmark(name, root, skip_missing)
    data["benchmark_files_sha256"] = files_digest(data.pop("files"), root)
    data["data_root"] = str(Path(root).resolve())  # which data a number came from, for a reader of its result
    return data


def read_benchmark(name: str, root: Path, skip_missing: bool) -> dict:
    """A benchmark's items from the data root, by its module's reader (`names.BENCHMARKS`)."""
    from .checks import BenchmarkDataError

    if name not in BENCHMARKS:
        raise BenchmarkDataError(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
    return getattr(benchmark_module(name), BENCHMARKS[name].reader)(Path(root), skip_missing)


def present(root: Path) -> dict[str, list[str]]:
    """Per benchmark (`BENCHMARKS` order): which of its ``markers`` are under ``root`` (empty: its data is not
    there), so that a suite says what it builds each benchmark from (aro_order from a retrieval split file alone)."""
    def found(pattern: str) -> bool:
        folder = pattern.endswith("/")
        return any(p.is_dir() if folder else p.is_file() for p in root.glob(pattern.rstrip("/")))

    return {name: [m for m in spec.markers if found(m)] for name, spec in BENCHMARKS.items()}


def evaluate_one(name: str, encoder, data) -> dict:
    """Benchmark ``name``'s result on ``data`` (from `load_data`), with its per-item outcomes."""
    return benchmark_module(name).evaluate(encoder, data)


def chance_levels(name: str, data: dict, result: dict, keys: list[str] | None = None) -> dict[str, float | None]:
    """The chance level of each of ``keys`` (default: the headlines) of benchmark ``name``'s ``result`` on ``data``,
    asked of its module: its ``chance_levels`` where a metric is no mean over items (COCO's mAP), else
    `chance.levels` of its ``item_chances``."""
    from .chance import levels

    module, keys = benchmark_module(name), list(BENCHMARKS[name].headlines) if keys is None else keys
    if hasattr(module, "chance_levels"):
        return module.chance_levels(data, result, keys)
    return levels(module.item_chances(data), result, keys)


def run(encoder, names: list[str], loaded: dict, out: str | Path | None = None,
        overwrite: bool = False) -> dict[str, dict]:
    """Evaluate every benchmark in ``loaded`` (name -> data from `load_data`); write JSON + results.md (which also
    report the results ``out`` held of this model). ``overwrite``: remove another model's results from ``out``."""
    kept = kept_results(Path(out), encoder.clip.hash, overwrite) if out is not None else {}
    results = {}
    for name in names:
        start = time.perf_counter()
        result = evaluate_one(name, encoder, loaded[name])  # with its per-item outcomes, for eval --compare
        encoder.forget_pictures()
        # a metric with nothing to average (every item skipped) has no value: null in JSON, never NaN
        result["metrics"] = {k: None if isinstance(v, float) and v != v else v for k, v in result["metrics"].items()}
        result["chance"] = chance_levels(name, loaded[name], result)
        results[name] = {"benchmark": name, "rule": BENCHMARKS[name].rule,
                         "model": encoder.clip.identity, "model_label": encoder.clip.label,
                         "model_hash": encoder.clip.hash, "items": counts(loaded[name])[0],
                         "benchmark_files_sha256": loaded[name]["benchmark_files_sha256"],
                         **({"data_root": loaded[name]["data_root"]} if "data_root" in loaded[name] else {}),
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
