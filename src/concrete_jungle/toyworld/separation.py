"""How well each planted-pair score tells good pairs from bad ones, with the toy world's viewer as the judge.

A pair is **good** when its negative caption is false of the anchor's scene and true of the negative picture's
scene, as `viewer.reads_true` reads them (the viewer reads things, their attributes and relations; it does not read
the light or the mood). The anchor's scene is the world's (`scenes.jsonl`, by the sample id); the negative
picture's is the one the editor says it drew (`faulty.FaultyToyEditor`'s record, by the edit's seed). Both are
checked against the stored pictures: each scene, rendered and stored as the plant stores pictures, must give the
stored pixels, so a verdict is about the picture that was trained on, not about the editor's word.

Each score's separation is the ROC AUC of the good pairs against the bad ones (the chance that a good pair is on
the good side of a bad one, ties counting half), with the score turned so that its gate's side is up (``>=`` for
the agreements, ``<=`` for the similarities), and a stratified bootstrap 95 % interval.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from ..concretebatch import encode_jpeg, iter_records
from ..records import read_jsonl
from .faulty import FAULTS
from .viewer import reads_true
from .world import Scene, parse_caption, render, word_kind

# the side of each score a gate keeps (docs/method.md §3): +1, higher is good; -1, lower is good
DIRECTIONS = {"agreement": 1, "agreement_anchor": 1, "agreement_negative": 1, "image_sim": -1,
              "clip_image_sim": -1, "clip_text_sim": -1, "text_sim": -1}
GOOD = "good"
TRUE_OF_ANCHOR = "reads true of the anchor"
NOT_OF_PICTURE = "not true of its picture"


class VerdictError(ValueError):
    """A dataset, world or editor record that do not belong together."""


def stored(scene: Scene) -> np.ndarray:
    """The pixels a reader of a ConcreteBatch gets for the scene's picture (rendered, stored as JPEG, decoded)."""
    return np.asarray(Image.open(io.BytesIO(encode_jpeg(render(scene)))).convert("RGB"))


def pair_verdicts(dataset: str | Path, world: str | Path, record: str | Path) -> list[dict]:
    """One verdict per pair of ``dataset`` (planted from ``world`` by a `FaultyToyEditor` that wrote ``record``):
    id, the edited word's kind, the editor's fault (None, keep, repaint), whether the negative caption is false of
    the anchor and true of its picture, ``good``, ``cause`` (good, the fault, `TRUE_OF_ANCHOR` or `NOT_OF_PICTURE`)
    and the pair's recorded scores."""
    scenes = {row["id"]: parse_caption(row["captions"][0], row["layout"]) for row in read_jsonl(
        Path(world) / "scenes.jsonl")}
    drawn = {line["seed"]: line for line in read_jsonl(record)}  # a resumed plant may repeat a line: the same one
    verdicts = []
    for r in iter_records(dataset):
        meta = r["meta"]
        missing = f"no scene in {world}" if meta["id"] not in scenes else \
            f"no line in {record}" if meta["seed"] not in drawn else None
        if missing:
            raise VerdictError(f"pair {meta['id']} of {dataset}: {missing} for it; give the world and the editor's "
                               "record the dataset was planted with")
        line = drawn[meta["seed"]]
        anchor = scenes[meta["id"]]
        negative = anchor if line["fault"] == "keep" else parse_caption(line["drawn"], line["layout"])
        for what, scene, picture in (("anchor", anchor, r["image"]), ("negative", negative, r["neg_image"])):
            if not np.array_equal(stored(scene), np.asarray(picture.convert("RGB"))):
                raise VerdictError(f"pair {meta['id']}: the {what} picture stored in {dataset} is not the scene "
                                   f"{'the world' if what == 'anchor' else record} names for it")
        false_of_anchor = not reads_true(r["neg_caption"], anchor)
        true_of_picture = reads_true(r["neg_caption"], negative)
        cause = line["fault"] or (TRUE_OF_ANCHOR if not false_of_anchor else NOT_OF_PICTURE if not true_of_picture
                                  else GOOD)
        verdicts.append({"id": meta["id"], "seed": meta["seed"], "kind": word_kind(meta["keyword"]),
                         "fault": line["fault"],
                         "false_of_anchor": false_of_anchor, "true_of_picture": true_of_picture,
                         "good": false_of_anchor and true_of_picture, "cause": cause,
                         "scores": meta.get("scores") or {}})
    return verdicts


def roc_auc(scores, good) -> float:
    """The ROC AUC of ``scores`` for telling ``good`` (True) from bad: P(good > bad) + P(tie) / 2."""
    return float(_aucs(np.asarray(scores, float)[None], np.asarray(good, bool))[0])


def _aucs(scores: np.ndarray, good: np.ndarray) -> np.ndarray:
    """Row-wise AUC of ``scores`` (rows × pairs) against one labelling, from the good pairs' average ranks."""
    from scipy.stats import rankdata

    n_good, n_bad = int(good.sum()), int((~good).sum())
    if not n_good or not n_bad:
        raise VerdictError(f"an AUC needs good and bad pairs; there are {n_good} good and {n_bad} bad")
    ranks = rankdata(scores, axis=1)
    return (ranks[:, good].sum(axis=1) - n_good * (n_good + 1) / 2) / (n_good * n_bad)


def auc_interval(scores, good, resamples: int = 2000, seed: int = 0) -> list[float]:
    """A 95 % percentile interval of the AUC over ``resamples`` stratified bootstrap draws (the good and the bad
    pairs each resampled with replacement, so every draw has both)."""
    scores, good = np.asarray(scores, float), np.asarray(good, bool)
    rng = np.random.default_rng(seed)
    g, b = np.flatnonzero(good), np.flatnonzero(~good)
    draws = np.concatenate([rng.choice(g, (resamples, g.size)), rng.choice(b, (resamples, b.size))], axis=1)
    labels = np.r_[np.ones(g.size, bool), np.zeros(b.size, bool)]
    return [float(x) for x in np.percentile(_aucs(scores[draws], labels), [2.5, 97.5])]


def separation(verdicts: list[dict], resamples: int = 2000, seed: int = 0) -> dict:
    """Per score the pairs recorded, its direction, and the AUC with its interval of the good pairs against all
    bad ones and against each cause of bad on its own (a cause with no pair is left out)."""
    causes = bad_causes(verdicts)
    names = sorted({s for v in verdicts for s, x in v["scores"].items() if x is not None}, key=score_order)
    out = {}
    for name in names:
        scored = [v for v in verdicts if v["scores"].get(name) is not None]
        direction = DIRECTIONS.get(name, 1)
        row = {"direction": ">=" if direction > 0 else "<=", "pairs": len(scored), "against": {}}
        for against in ["all bad", *causes]:
            chosen = [v for v in scored if v["good"] or (not v["good"] and against in ("all bad", v["cause"]))]
            good = [v["good"] for v in chosen]
            if all(good) or not any(good):
                continue
            values = [direction * v["scores"][name] for v in chosen]
            row["against"][against] = {"auc": roc_auc(values, good), "ci95": auc_interval(values, good, resamples,
                                                                                          seed),
                                       "good": sum(good), "bad": len(good) - sum(good)}
        out[name] = row
    return out


def gate_shares(verdicts: list[dict], gate_sets: list[str]) -> dict[str, dict[str, list[int]]]:
    """Per set of gates (``agreement>=0.0,image_sim<1.0``: a pair passes when it passes all), per cause: [pairs the
    gates keep, pairs]."""
    from ..plant.scoring import gate_reason, parse_gates

    causes = [GOOD, *bad_causes(verdicts)]
    out = {}
    for text in gate_sets:
        gates = parse_gates(text.split(","))
        out[text] = {c: [sum(gate_reason(gates, v["scores"]) is None for v in verdicts if v["cause"] == c),
                         sum(v["cause"] == c for v in verdicts)] for c in causes}
    return out


def gate_shares_markdown(table: dict[str, dict[str, list[int]]]) -> str:
    causes = list(dict.fromkeys(c for row in table.values() for c in row))
    lines = ["| gates | " + " | ".join(f"{c} kept" for c in causes) + " |", "|" + " --- |" * (1 + len(causes))]
    lines += [f"| `{text}` | " + " | ".join(f"{k} / {n} ({k / n:.0%})" for k, n in (row[c] for c in causes)) + " |"
              for text, row in table.items()]
    return "\n".join(lines) + "\n"


def medians(verdicts: list[dict]) -> dict[str, dict[str, float]]:
    """Per score, its median over the pairs of each cause (good first)."""
    causes = [GOOD, *bad_causes(verdicts)]
    names = sorted({s for v in verdicts for s in v["scores"]}, key=score_order)
    return {name: {cause: float(np.median(values)) for cause in causes if (values := [
        v["scores"][name] for v in verdicts if v["cause"] == cause and v["scores"].get(name) is not None])}
        for name in names}


def medians_markdown(table: dict[str, dict[str, float]]) -> str:
    causes = list(dict.fromkeys(c for row in table.values() for c in row))
    lines = ["| score | " + " | ".join(causes) + " |", "|" + " --- |" * (1 + len(causes))]
    lines += [f"| `{name}` | " + " | ".join("–" if c not in row else f"{row[c]:.3f}" for c in causes) + " |"
              for name, row in table.items()]
    return "\n".join(lines) + "\n"


def bad_causes(verdicts: list[dict]) -> list[str]:
    """The causes of bad pairs present: the editor's faults first, then the captions'."""
    order = [*FAULTS, TRUE_OF_ANCHOR, NOT_OF_PICTURE]
    present = {v["cause"] for v in verdicts} - {GOOD}
    return sorted(present, key=lambda c: (order.index(c) if c in order else len(order), c))


def score_order(name: str) -> tuple:
    """The scores in `DIRECTIONS`' order, then any other by name."""
    return (0, list(DIRECTIONS).index(name), "") if name in DIRECTIONS else (1, 0, name)


def counts(verdicts: list[dict]) -> dict:
    """Pairs per cause, and per edited word's kind among the good ones and those that read true of the anchor."""
    by_cause: dict[str, int] = {}
    for v in verdicts:
        by_cause[v["cause"]] = by_cause.get(v["cause"], 0) + 1
    kinds: dict[str, dict[str, int]] = {}
    for v in verdicts:
        if v["fault"] is None:
            kinds.setdefault(v["kind"], {}).setdefault(v["cause"], 0)
            kinds[v["kind"]][v["cause"]] += 1
    return {"pairs": len(verdicts), "by_cause": by_cause, "unfaulted_by_kind": kinds}


def separation_markdown(table: dict) -> str:
    """The AUC table: a row per score, a column per comparison (all bad, then each cause)."""
    columns = list(dict.fromkeys(a for row in table.values() for a in row["against"]))
    lines = ["| score (good side) | pairs | " + " | ".join(f"AUC good vs {c} [95 % CI]" for c in columns) + " |",
             "|" + " --- |" * (2 + len(columns))]
    for name, row in table.items():
        cells = []
        for c in columns:
            x = row["against"].get(c)
            cells.append("–" if x is None else f"{x['auc']:.3f} [{x['ci95'][0]:.3f}, {x['ci95'][1]:.3f}]")
        lines.append(f"| `{name}` ({row['direction']}) | {row['pairs']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
