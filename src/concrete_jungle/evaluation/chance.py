"""Chance levels (docs/method.md §7): the score a model that scores every option at random is expected to get on
each benchmark's headline metrics, computed from the benchmark's own items, and the chance-normalised score.

A model scores a text by its tokens and a picture by its pixels, so two options that read alike get the same
score, and the benchmark's tie rule decides between them. Random scoring here means: every distinct text (and
picture) gets an independent random score. A pick among k distinct options is then right with probability 1/k,
unless an option listed before the right one reads as it does (numpy's argmax gives a tie to the first: the pick is
then never the right one). Each item gets its own probability; the metric's recipe (`outcomes.metric_values`: the
means, the macro averages, their filters) turns them into the metric's chance level, so the level follows the items
the metric was computed on.
"""

from __future__ import annotations

import re

from ..outcomes import metric_values

# what open_clip's tokenizer reads of a text: lower case, words, single digits and runs of other symbols, whatever
# the spacing between them ("a dog, running" and "a dog , running" are one text to it)
PIECES = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d|[^\W\d_]+|\d|(?:[^\s\w]|_)+")

# a Winoground item's two captions and two images give four scores s(caption, image), distinct at random. Text: each
# image prefers its caption, two independent halves: 1/4; image: likewise, 1/4; group: both, that is s00 and s11 are
# the two largest of the four: 1 of the 6 ways to choose two of four
WINOGROUND = {"text": 1 / 4, "image": 1 / 4, "group": 1 / 6}


def reading(text: str) -> tuple[str, ...]:
    """The pieces a CLIP tokenizer splits ``text`` into: two texts of the same pieces score alike."""
    return tuple(PIECES.findall(text.lower()))


def pick_chance(options: list[str], right: int) -> float:
    """The probability that the pick among ``options`` (the first of equal scores wins) is ``options[right]`` when
    every distinct text scores at random: 1/k of k distinct texts, or 0 when an option before it reads alike."""
    read = [reading(o) for o in options]
    return 0.0 if read[right] in read[:right] else 1 / len(set(read))


def below_chance(others: list[str], text: str) -> float:
    """The probability that ``text`` scores strictly below every one of ``others`` (SugarCrepe++'s ITT: the
    negative below both positives): 1/k of the k distinct texts, or 0 when it reads as one of them (a tie)."""
    read = [reading(o) for o in others]
    return 0.0 if reading(text) in read else 1 / len(set(read) | {reading(text)})


def item_chances(name: str, data: dict) -> dict[str, float | list[tuple[str, float]]]:
    """Per series of the benchmark's outcomes that a headline metric reads: each item's key and chance of being
    right, in the series' order, or one number for every item of the series, by the benchmark module's own
    ``item_chances``. Series not listed, and benchmarks without one, have no level."""
    from importlib import import_module

    from .names import module_of

    module = import_module(f".{module_of(name)}", __package__)
    return module.item_chances(data) if hasattr(module, "item_chances") else {}


def expected_average_precision(positives: int, total: int) -> float:
    """The expected AP of a random ranking of ``total`` items of which ``positives`` are right: a positive at rank r
    (uniform) has on average (r - 1)(R - 1)/(N - 1) positives above it, so E[AP] = (1/N) Σ_r [1 + (r - 1)(R - 1)/(N
    - 1)] / r = (1/N) [H_N + (R - 1)/(N - 1) (N - H_N)], H_N the N-th harmonic number."""
    harmonic = sum(1 / r for r in range(1, total + 1))
    share = (positives - 1) / (total - 1) if total > 1 else 0.0
    return (harmonic + share * (total - harmonic)) / total


def levels(name: str, data: dict, result: dict, keys: list[str]) -> dict[str, float | None]:
    """The chance level of each of ``keys`` (headline metrics of ``name``'s ``result``, computed on ``data``): its
    recipe applied to the items' chances. None where the metric has no value or its series no chance level."""
    if name == "coco_probe":  # mAP over the classes with a positive, each ranking the val images
        labels = data["splits"]["val"][1]
        counts = [int(c) for c in labels.sum(0).tolist() if c > 0]
        return {"mAP": sum(expected_average_precision(c, len(labels)) for c in counts) / len(counts)
                if counts else None}
    chances = item_chances(name, data)
    outcomes = result.get("outcomes") or {"series": {}, "metrics": {}}
    series = {}
    for s, answers in outcomes["series"].items():
        chance, subset = chances.get(s), chances.get(s.split("/")[0])
        if chance is None and isinstance(subset, list):  # a part (ARO's vg_relation/on): items of its subset
            by_key = dict(subset)
            chance = [(k, by_key.get(k)) for k in answers["keys"]]
        if isinstance(chance, list) and [k for k, _ in chance] == answers["keys"] and \
                all(c is not None for _, c in chance):
            series[s] = {"values": [c for _, c in chance]}
        elif isinstance(chance, float):
            series[s] = {"values": [chance] * len(answers["keys"])}
    # a recall at 1 is the share of ranks below 1: its chance series holds each query's chance of rank 0 instead
    # and a level is the expected score itself, not rounded as a benchmark may round its scores
    recipes = {k: {x: y for x, y in r.items() if x not in ("below", "percent_decimals")}
               for k, r in outcomes["metrics"].items()}
    out: dict[str, float | None] = {}
    for key in keys:
        recipe = outcomes["metrics"].get(key)
        if result["metrics"].get(key) is None or recipe is None or recipe.get("below", 1) != 1:
            out[key] = None  # no value; or a recall beyond 1, which the chances of a first place do not give
            continue
        try:
            out[key] = metric_values({"series": series, "metrics": recipes}, names=[key])[key]
        except KeyError:  # a series the recipe reads has no chance level
            out[key] = None
    return out


def normalised(score: float | None, chance: float | None) -> float | None:
    """(score - chance) / (1 - chance): 0 at chance, 1 for a perfect score (scores as fractions); None where either
    is unknown or chance is already perfect."""
    if score is None or chance is None or chance >= 1:
        return None
    return (score - chance) / (1 - chance)
