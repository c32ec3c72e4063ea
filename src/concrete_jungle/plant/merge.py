"""`concrete-jungle plant merge DIR`: join the parts of a run split with --num-shards into one dataset."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import PlantError
from ..records import atomic_write_json, differing
from .stages import ManifestTally, part_of
from .streams import AtomicJsonl


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
    shards = set()
    for p in parts:  # read a row at a time, twice: checked here, written below
        index = int(p.stem.split("-")[1])
        foreign = []
        for row in part_rows(p, index):
            if part_of(row["id"], k) != index and len(foreign) < 3:
                foreign.append(row["id"])
            if row["status"] == "ok":
                shards.add(row["shard"])
        if foreign:
            raise PlantError(f"{p} holds ids that belong to other parts ({foreign}): it comes from another "
                             f"run; run part {index} again")
    settings = {p.name: json.loads(p.read_text()) for p in sorted(out.glob("keywords-*-of-*.config.json"))}
    if len({json.dumps(v, sort_keys=True) for v in settings.values()}) > 1:
        first = next(iter(settings.values()))
        odd = sorted(n for n, v in settings.items() if v != first)
        differ = sorted({key for v in settings.values() for key in v if v.get(key) != first.get(key)})
        raise PlantError(f"the parts were made with different settings ({differing(differ)}; e.g. {odd[:2]} "
                         f"against {next(iter(settings))}); they are not one dataset")
    # every id is in its own part (checked above), so no id is in two parts; an id the input repeats is in one
    # part, its repeat a "duplicate id" reject of the keyword stage
    absent = sorted(shards - {p.name for p in out.glob("shard-*.tar")})
    if absent:
        raise PlantError(f"the manifests name shards that do not exist: {absent[:5]}")
    tally = ManifestTally()
    with AtomicJsonl(out / "manifest.jsonl") as manifest, AtomicJsonl(out / "rejects.jsonl") as rejects:
        for p in parts:
            for row in part_rows(p, int(p.stem.split("-")[1])):
                manifest.write(row)
                if row["status"] != "ok":
                    rejects.write(row)
                tally.add(row)
    summary = tally.summary() | {"parts": k} | gate_counts(out, k)
    atomic_write_json(out / "summary.json", summary)
    return summary


def gate_counts(out: Path, k: int) -> dict:
    """The parts' gates and, summed over the parts, the scored pairs each gate left undecided (its score None), as
    a single run's summary holds them; nothing for a run without scores."""
    parts = [json.loads((out / f"summary-{i:05d}-of-{k:05d}.json").read_text()) for i in range(k)]
    if not any("gates_undecided" in p for p in parts):
        return {}
    undecided: dict[str, int] = {}
    for p in parts:
        for gate, n in p.get("gates_undecided", {}).items():
            undecided[gate] = undecided.get(gate, 0) + n
    return {"gates": next(p["gates"] for p in parts if "gates" in p), "gates_undecided": undecided}


def part_rows(path: Path, index: int):
    """The rows of a part's manifest, one at a time; a damaged one is an error naming the part to run again."""
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line.decode("utf-8"))
                    row["id"]  # a row without an id, or not an object, is damage too
                    yield row
    except (ValueError, KeyError, TypeError) as e:
        raise PlantError(f"{path} is damaged ({type(e).__name__}: {e}); run part {index} again "
                         f"(--shard-index {index}) to remake it") from None
