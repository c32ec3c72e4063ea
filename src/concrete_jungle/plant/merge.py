"""`concrete-jungle plant merge DIR`: join the parts of a run split with --num-shards into one dataset."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ..errors import PlantError
from ..records import atomic_write_json, atomic_write_jsonl, read_jsonl
from .stages import summarize_manifest


def merge_parts(out: str | Path) -> dict:
    """Check that every part of a sharded run finished and join their manifests into the dataset's own."""
    out = Path(out)
    parts = sorted(out.glob("manifest-*-of-*.jsonl"))
    if not parts:
        raise PlantError(f"{out} holds no part manifests (manifest-<i>-of-<K>.jsonl); nothing to merge")
    counts = {int(p.stem.split("-of-")[1]) for p in parts}
    if len(counts) != 1:
        raise PlantError(f"{out} mixes parts of runs with different --num-shards: {sorted(counts)}")
    k = counts.pop()
    found = {int(p.stem.split("-")[1]) for p in parts}
    missing = sorted(set(range(k)) - found)
    if missing:
        raise PlantError(f"parts {missing} of {k} have not finished in {out}; run them (--shard-index) first")
    rows = [row for p in parts for row in read_jsonl(p)]
    ids = Counter(r["id"] for r in rows)
    twice = [i for i, n in ids.items() if n > 1]
    if twice:
        raise PlantError(f"sample ids in more than one part: {twice[:5]}; the parts come from different runs")
    absent = sorted({r["shard"] for r in rows if r["status"] == "ok"} - {p.name for p in out.glob("shard-*.tar")})
    if absent:
        raise PlantError(f"the manifests name shards that do not exist: {absent[:5]}")
    atomic_write_jsonl(out / "manifest.jsonl", rows)
    atomic_write_jsonl(out / "rejects.jsonl", [r for r in rows if r["status"] != "ok"])
    summary = summarize_manifest(rows) | {"parts": k}
    atomic_write_json(out / "summary.json", summary)
    return summary
