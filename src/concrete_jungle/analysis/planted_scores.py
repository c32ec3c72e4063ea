"""The scores a plant recorded on its pairs (`plant --score`, docs/method.md §3 "Scores and gates"), summarised per
dataset for `analyze`: the distribution of each score over the records read, the model that made it, and the pairs
the plant's gates rejected (from its summary.json; they are not in the shards)."""

from __future__ import annotations

import json
import math
from pathlib import Path

QUANTILES = {"p05": 0.05, "p25": 0.25, "median": 0.5, "p75": 0.75, "p95": 0.95}


def quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values, interpolated linearly between the two nearest (numpy's default)."""
    at = q * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def score_distributions(metas: list[dict]) -> dict[str, dict]:
    """Per score the records' metadata hold: how many pairs have it (``pairs``) and how many cannot (``null``: an
    image score of a text-only negative), mean, standard deviation, min, quantiles, max and the model(s) that made
    it. Empty when no record was scored."""
    values: dict[str, list[float]] = {}
    nulls: dict[str, int] = {}
    models: dict[str, set[str]] = {}
    for meta in metas:
        for score, value in (meta.get("scores") or {}).items():
            values.setdefault(score, [])
            if value is None:
                nulls[score] = nulls.get(score, 0) + 1
            else:
                values[score].append(float(value))
            models.setdefault(score, set()).add((meta.get("score_models") or {}).get(score, "unknown"))
    out = {}
    for score in sorted(values):
        ordered = sorted(values[score])
        n = len(ordered)
        row: dict = {"pairs": n, "null": nulls.get(score, 0), "model": ", ".join(sorted(models[score]))}
        if n:
            mean = sum(ordered) / n
            row |= {"mean": mean, "sd": math.sqrt(sum((v - mean) ** 2 for v in ordered) / (n - 1)) if n > 1 else 0.0,
                    "min": ordered[0], **{k: quantile(ordered, q) for k, q in QUANTILES.items()}, "max": ordered[-1]}
        out[score] = row
    return out


def gated_pairs(root: str | Path) -> dict[str, int]:
    """The plant's rejects by gate (``gate agreement>=0.0 failed``: count), from the dataset's summary.json."""
    path = Path(root) / "summary.json"
    if not path.is_file():
        return {}
    reasons = json.loads(path.read_text()).get("rejects_by_reason") or {}
    return {reason: n for reason, n in reasons.items() if reason.startswith("gate ")}


COLUMNS = ("mean", "sd", "min", *QUANTILES, "max")


def planted_scores_markdown(distributions: dict[str, dict], gated: dict[str, dict[str, int]]) -> str:
    """The report's section: one table per scored dataset, and the pairs its gates rejected."""
    lines = ["## Scores recorded by the plant", "",
             "Each pair's scores as `plant --score` computed them when it made the pair (docs/method.md §3), over the "
             "records read here; a gated pair is not in the dataset, only counted."]
    for name, scores in distributions.items():
        lines += ["", f"**{name}**", "", "| score | pairs | " + " | ".join(COLUMNS) + " | model |",
                  "| --- | ---: |" + " ---: |" * len(COLUMNS) + " --- |"]
        for score, row in scores.items():
            cells = [f"{row[c]:.4f}" if c in row else "-" for c in COLUMNS]
            pairs = f"{row['pairs']}" + (f" (+{row['null']} n/a)" if row["null"] else "")
            lines.append(f"| {score} | {pairs} | " + " | ".join(cells) + f" | {row['model']} |")
        rejected = gated.get(name) or {}
        lines += ["", "Gated: " + ("; ".join(f"{reason}: {n}" for reason, n in rejected.items()) or "none")]
    return "\n".join(lines)
