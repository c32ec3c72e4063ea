"""`concrete-jungle plant merge DIR`: join the parts of a run split with --num-shards into one dataset."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from ..errors import PlantError
from ..records import atomic_write_json, atomic_write_jsonl, differing, read_jsonl
from .stages import part_of, summarize_manifest


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
    beyond = sorted(i for i in found if i >= k)
    if beyond:
        raise PlantError(f"{out} holds part(s) {beyond} of a run of {k} parts: indices run 0..{k - 1}; they come "
                         "from another run: remove them")
    # a part has finished when its summary is written (after its manifest)
    missing = sorted(i for i in range(k) if i not in found or not (out / f"summary-{i:05d}-of-{k:05d}.json").is_file())
    if missing:
        raise PlantError(f"parts {missing} of {k} have not finished in {out}; run them (--shard-index) first")
    rows = []
    for p in parts:
        index = int(p.stem.split("-")[1])
        try:
            part_rows = read_jsonl(p)
            part_ids = [r["id"] for r in part_rows]
        except (ValueError, KeyError, TypeError) as e:
            raise PlantError(f"{p} is damaged ({type(e).__name__}: {e}); run part {index} again "
                             f"(--shard-index {index}) to remake it") from None
        foreign = [i for i in part_ids if part_of(i, k) != index]
        if foreign:
            raise PlantError(f"{p} holds ids that belong to other parts ({foreign[:3]}): it comes from another "
                             f"run; run part {index} again")
        rows += part_rows
    settings = {p.name: json.loads(p.read_text()) for p in sorted(out.glob("keywords-*-of-*.config.json"))}
    if len({json.dumps(v, sort_keys=True) for v in settings.values()}) > 1:
        first = next(iter(settings.values()))
        odd = sorted(n for n, v in settings.items() if v != first)
        differ = sorted({key for v in settings.values() for key in v if v.get(key) != first.get(key)})
        raise PlantError(f"the parts were made with different settings ({differing(differ)}; e.g. {odd[:2]} "
                         f"against {next(iter(settings))}); they are not one dataset")
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
