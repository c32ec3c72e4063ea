"""ARO's COCO-Order and Flickr30k-Order (Yuksekgonul et al. 2023): does the model prefer a caption to the same
words in a scrambled order?

Data: the Karpathy split files the retrieval benchmarks read (``coco/dataset_coco.json`` with ``coco/val2014/``,
``flickr30k/dataset_flickr30k.json`` with ``flickr30k/images/``), test split: every caption of every image is an
item. The official rule (`mertyg/vision-language-models-are-bows`, ``COCO_Order``/``Flickr30k_Order``): five
options, the caption then four perturbations of it: nouns shuffled among themselves and adjectives among
themselves; every other token shuffled; tokens shuffled within each trigram; the trigrams shuffled; each option
lower-cased, stripped of ``.!"()*#:;~`` and cut to 30 words (``pre_caption``); the picture converted to RGB;
numpy's argmax, so a tie goes to the caption, listed first. Reported: Precision@1, the share of items whose
caption wins.

Two departures, both so that every model is scored on the same items: the official code draws the shuffles
unseeded on each run (its items change from run to run), ours are drawn from a generator seeded by the item's
position (``SEED``), so the items are fixed; and the trigram shuffles split the caption with spaCy's tokenizer
where the official code uses NLTK's ``word_tokenize`` (its Punkt model is a separate download). Part-of-speech
tags come from spaCy's ``en_core_web_sm`` as in the official code.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..stats import reported, series
from .choice import picks
from .encoding import Crop, Encoder, unit_of
from .retrieval import load as load_karpathy

SEED = 0
MAX_WORDS = 30
NOUNS = {"NN", "NNS", "NNP", "NNPS"}
ADJECTIVES = {"JJ", "JJR", "JJS"}
SOURCES = {"coco_order": ("coco/dataset_coco.json", "coco"),
           "flickr30k_order": ("flickr30k/dataset_flickr30k.json", "flickr30k/images")}


def pre_caption(caption: str, max_words: int = MAX_WORDS) -> str:
    """The official caption cleaning: lower case, ``.!"()*#:;~`` to spaces, runs of spaces to one, cut."""
    caption = re.sub(r"\s{2,}", " ", re.sub(r"([.!\"()*#:;~])", " ", caption.lower())).rstrip("\n").strip(" ")
    return " ".join(caption.split(" ")[:max_words])


def trigrams(tokens: list[str]) -> list[list[str]]:
    return [tokens[i: i + 3] for i in range(0, len(tokens), 3)]


def perturbations(doc, rng: np.random.Generator) -> list[str]:
    """The four scrambled versions of a parsed caption, in the official order."""
    tokens = [t.text for t in doc]
    tags = [t.tag_ for t in doc]

    def shuffled(words: list[str], positions: list[int]) -> list[str]:
        out = list(words)
        for at, source in zip(positions, rng.permutation(positions).tolist()):
            out[at] = words[source]
        return out

    nouns = [i for i, tag in enumerate(tags) if tag in NOUNS]
    adjectives = [i for i, tag in enumerate(tags) if tag in ADJECTIVES]
    others = [i for i, tag in enumerate(tags) if tag not in NOUNS | ADJECTIVES]
    within = [w for group in trigrams(tokens) for w in shuffled(group, list(range(len(group))))]
    groups = trigrams(tokens)
    across = [w for k in rng.permutation(len(groups)).tolist() for w in groups[k]]
    return [" ".join(shuffled(shuffled(tokens, nouns), adjectives)), " ".join(shuffled(tokens, others)),
            " ".join(within), " ".join(across)]


def load(root: str | Path, skip_missing: bool = False) -> dict:
    """Per split file present: items (key, Crop, the five options with the caption first)."""
    from ..nlp import load_spacy
    from .encoding import BenchmarkDataError

    root = Path(root)
    found = {name: (root / f, root / images) for name, (f, images) in SOURCES.items() if (root / f).is_file()}
    if not found:
        raise BenchmarkDataError(f"neither {' nor '.join(str(root / f) for f, _ in SOURCES.values())} exists; "
                                 "ARO's order tasks read the Karpathy split files of coco_retrieval and retrieval")
    nlp = load_spacy()
    items, skipped, notes, files = {}, {}, [], {}
    for name, (split_file, images) in found.items():
        data = load_karpathy(split_file, images, skip_missing=skip_missing)
        notes += data["notes"]
        files |= data["files"]
        captions = [(path, n, caption) for path, caps in data["items"] for n, caption in enumerate(caps)]
        rows = []
        for k, ((path, n, caption), doc) in enumerate(zip(captions, nlp.pipe(c for _, _, c in captions))):
            options = [pre_caption(caption)] + [pre_caption(p) for p in
                                                perturbations(doc, np.random.default_rng([SEED, k]))]
            rows.append((f"{unit_of(path)}#{n}", Crop(path), options))
        items[name], skipped[name] = rows, data["skipped"]
    return {"items": items, "skipped": skipped, "notes": notes, "files": files}


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Precision@1 per task; ``outcomes`` per caption, its image the unit (`stats`)."""
    answers = {}
    for name, items in data["items"].items():
        right = picks(encoder, [it[1] for it in items], [it[2] for it in items]) == 0  # the caption is first
        answers[name] = series([it[0] for it in items], [unit_of(it[1].path) for it in items], right)
    outcomes = {"series": answers, "metrics": {name: {"mean": name} for name in answers}}
    return {"metrics": reported(outcomes), "n": {s: len(v) for s, v in data["items"].items()},
            "skipped": data["skipped"], "notes": data["notes"], "outcomes": outcomes}
