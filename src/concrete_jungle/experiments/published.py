"""A study's outputs in a compact form anyone can re-check, and the report computed from them alone.

``<study>/published/`` holds ``design.json`` (the rules' inputs and choices, the validation curve), ``world.json``
(the world's settings and test counts), ``recipes.json`` (how each metric is made from the answers, `stats`),
``answers.jsonl.gz`` (one line per model, seed and answer: row, seed, series, item key, its test scene, value)
and ``run.json`` (the run time). `concrete-jungle study report DIR` rebuilds every table, interval and verdict
from these files: no model, no world, seconds.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from ..records import atomic_write_json


def publish(folder: Path, design: dict, world_info: dict, items: dict, seconds: float) -> None:
    """Write the study's published files; ``items[(row, seed)]["outcomes"]`` are a model's test answers."""
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / "design.json", design)
    atomic_write_json(folder / "world.json", world_info)
    atomic_write_json(folder / "recipes.json", next(iter(items.values()))["outcomes"]["metrics"])
    atomic_write_json(folder / "run.json", {"seconds": seconds})
    tmp = folder / ".answers.jsonl.gz.tmp"
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=9) as f:
        for (row, seed), result in items.items():
            for name, data in result["outcomes"]["series"].items():
                for key, unit, value in zip(data["keys"], data["units"], data["values"]):
                    f.write(json.dumps([row, seed, name, key, unit, value], ensure_ascii=False) + "\n")
    tmp.rename(folder / "answers.jsonl.gz")


def load(folder: str | Path) -> tuple[dict, dict, dict, float]:
    """(design, world settings, items as `publish` took them, seconds) read back from ``folder``."""
    folder = Path(folder)
    missing = [n for n in ("design.json", "world.json", "recipes.json", "answers.jsonl.gz", "run.json")
               if not (folder / n).is_file()]
    if missing:
        raise ValueError(f"{folder} is not a study's published folder: {', '.join(missing)} missing (a study writes "
                         "them to <out>/published)")
    recipes = json.loads((folder / "recipes.json").read_text())
    items: dict = {}
    with gzip.open(folder / "answers.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            row, seed, name, key, unit, value = json.loads(line)
            series = items.setdefault((row, seed), {"outcomes": {"series": {}, "metrics": recipes}})
            data = series["outcomes"]["series"].setdefault(name, {"keys": [], "units": [], "values": []})
            data["keys"].append(key)
            data["units"].append(unit)
            data["values"].append(value)
    return (json.loads((folder / "design.json").read_text()), json.loads((folder / "world.json").read_text()), items,
            json.loads((folder / "run.json").read_text())["seconds"])
