"""Validity checks of the choice benchmarks (docs/method.md §7, "Validity checks"): what a score can be won with
that is not composition.

- **Bag of words**: an item whose caption and negative hold the same words (as a CLIP tokenizer reads them,
  punctuation aside) cannot be told apart by a model that reads words without their order; SugarCrepe reports its
  subsets split into such items and the rest (`bag_split`).
- **Blind baseline**: the benchmark's own rule applied with every picture replaced by the benchmark's mean picture
  (`blind`): the options the text tower prefers whatever the picture, scored as the model is scored. Only where a
  picture chooses among texts: where a text chooses among pictures, a blind model has nothing to choose by, and the
  metric is named ``not_applicable`` (its blind level is chance, `TEXT_TO_IMAGE`).
- **Micro and macro averages**, labelled (`averages`): a macro average is the mean of its subsets' scores, a micro
  average the mean over all their items; they differ where subsets differ in size.
"""

from __future__ import annotations

import re
from typing import Callable

import torch
import torch.nn.functional as F

from ..outcomes import metric_values
from .chance import reading

MACRO, MICRO = "macro (mean of subsets)", "micro (mean of items)"
# why a text -> image choice has no blind baseline (docs/method.md §7)
TEXT_TO_IMAGE = ("a caption choosing among pictures: a model with no picture information scores every picture "
                 "alike, so it can only guess; its blind level is the chance level")
WORD = re.compile(r"[^\W_]")  # a piece of letters or digits: a word, not punctuation


def bag_of_words(text: str) -> tuple[str, ...]:
    """The words of ``text`` as a CLIP tokenizer reads them (`chance.reading`: lower case, punctuation split off and
    left out here), sorted: two texts of one bag read alike to a model that ignores word order."""
    return tuple(sorted(piece for piece in reading(text) if WORD.match(piece)))


def bag_split(keys: list[str], captions: list[str], negatives: list[str]) -> dict[str, list[str]]:
    """The item keys whose caption and negative are of one bag of words (``bow_identical``) and the others
    (``bow_differs``), each in the items' order."""
    split: dict[str, list[str]] = {"bow_identical": [], "bow_differs": []}
    for key, caption, negative in zip(keys, captions, negatives):
        same = bag_of_words(caption) == bag_of_words(negative)
        split["bow_identical" if same else "bow_differs"].append(key)
    return split


def mean_picture(pictures: torch.Tensor, names: list) -> torch.Tensor:
    """The benchmark's mean picture: the normalised mean of the features of its distinct pictures (``names[i]``
    names the picture of row i; a picture shown by several items counts once)."""
    first: dict = {}
    for row, name in enumerate(names):
        first.setdefault(name, row)
    if not first:
        raise ValueError("the benchmark has no picture to average")
    return F.normalize(pictures[list(first.values())].mean(0), dim=-1)


def blind(rule: Callable, mean: torch.Tensor, items: int, *texts):
    """``rule(pictures, *texts)``, a benchmark's own decision from the features of its items' pictures and options,
    with every item's picture replaced by ``mean`` (`mean_picture`): what the text tower alone prefers, decided by
    the benchmark's own comparisons, so under its own tie rule."""
    return rule(mean.expand(items, -1), *texts)


def blind_block(outcomes: dict | None, pictures: int, metrics: list[str] | None = None,
                not_applicable: list[str] = ()) -> dict:
    """The ``blind`` block of a result: the metrics of ``outcomes`` (the blind answers, under the recipes of the
    model's), the parts left out, or only ``metrics``; ``pictures``: how many distinct pictures the mean picture
    averages; ``not_applicable``: the result's metrics of a text -> image choice (`TEXT_TO_IMAGE`), which have no
    blind baseline."""
    recipes = (outcomes or {}).get("metrics", {})
    names = [m for m in (metrics or recipes) if not recipes[m].get("part")]
    block = {"metrics": metric_values(outcomes, names=names) if names else {}, "pictures": pictures}
    return block | ({"not_applicable": list(not_applicable)} if not_applicable else {})


def blind_of_parts(rule: Callable, features: dict[str, tuple], pictures: list, outcomes_of: Callable,
                   not_applicable: list[str] = ()) -> dict:
    """The ``blind`` block of a benchmark scored part by part: ``features[part]`` = (its pictures' features, then the
    texts as ``rule`` reads them), ``pictures`` names every row's picture (all parts, in order) for `mean_picture`,
    ``outcomes_of(answers)`` the outcomes of answers per part."""
    mean = mean_picture(torch.cat([f[0] for f in features.values()]), pictures)
    answers = {part: blind(rule, mean, len(f[0]), *f[1:]) for part, f in features.items()}
    return blind_block(outcomes_of(answers), len(set(pictures)), not_applicable=not_applicable)


def averages(recipes: dict) -> dict[str, str]:
    """Each averaged metric of ``recipes`` with its label: a macro average (`stats`: ``macro``) as the mean of
    subsets, a micro average (``micro``) as the mean of items."""
    return {name: MACRO if "macro" in recipe else MICRO for name, recipe in recipes.items()
            if ("macro" in recipe or "micro" in recipe) and not recipe.get("part")}
