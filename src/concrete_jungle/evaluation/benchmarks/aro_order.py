"""ARO's COCO-Order and Flickr30k-Order (Yuksekgonul et al. 2023): does the model prefer a caption to the same
words in a scrambled order?

Data: the Karpathy split files the retrieval benchmarks read (``coco/dataset_coco.json`` with ``coco/val2014/``,
``flickr30k/dataset_flickr30k.json`` with ``flickr30k/flickr30k-images/`` or ``images/``), test split: every
caption of every image listed is an item, in the file's order. The official rule
(`mertyg/vision-language-models-are-bows`: ``main_aro.py``, ``COCO_Order``/``Flickr30k_Order`` in
``dataset_zoo/aro_datasets.py``, ``TextShuffler`` in ``dataset_zoo/perturbations.py``): five options, the caption
then four perturbations of it, in this order:

1. nouns shuffled among themselves, then adjectives among themselves (spaCy's tags; ``numpy.random.permutation``);
2. every other token shuffled (``numpy.random.permutation``);
3. the tokens of NLTK's ``word_tokenize`` shuffled within each trigram (``random.shuffle``, trigram by trigram);
4. the trigrams of those tokens shuffled (``random.shuffle``);

each option lower-cased, stripped of ``.!"()*#:;~`` and cut to 30 words (``pre_caption``); the picture converted to
RGB; numpy's argmax, so a tie goes to the caption, listed first. Reported: Precision@1, the share of items whose
caption wins.

The draws are the official ones: ``main_aro.py`` calls ``seed_all(1)`` (numpy's and Python's generators seeded
with 1) before it builds the dataset, and the dataset draws every caption's shuffles in turn, so its items are
fixed. We draw from a numpy ``RandomState(1)`` and a Python ``Random(1)`` per task, caption after caption in the
file's order, in the official order of calls: the items of an official run in which nothing else draws from the two
generators between the seed and the dataset. (A library imported for the first time after the seed can draw: the
official dataset imports spaCy after it, and a recent spaCy imports ``rich`` where it is installed, which takes 24
bits of Python's generator at import and so moves that run's two trigram shuffles.) The tokens are NLTK's own
``word_tokenize`` where its English Punkt model is installed (``nltk.download('punkt_tab')``); without it, nothing
is downloaded: Punkt's sentence splitting runs without its trained abbreviations, with a note counting the captions
where that can matter (those with a period before their end). Part-of-speech tags come from spaCy's
``en_core_web_sm``, as in the official code (its version decides the tags). The official code reads the captions
from BLIP's ``coco_karpathy_test.json`` and ``flickr30k_test.json``, made from the same Karpathy split: its items
are these where those files list the captions in the Karpathy file's order.
"""

from __future__ import annotations

import functools
import random
import re
from pathlib import Path

import numpy as np

from ...outcomes import reported, series
from ..chance import pick_chance
from ..checks import check_images, unit_of
from ..choice import subset_picks
from ..encoding import Crop, Encoder
from ..validity import blind_block
from .retrieval import LAYOUT, flickr30k_images, listings

SEED = 1  # main_aro.py's --seed default, given to seed_all before the dataset is built
MAX_WORDS = 30
NOUNS = {"NN", "NNS", "NNP", "NNPS"}
ADJECTIVES = {"JJ", "JJR", "JJS"}
SOURCES = {"coco_order": ("coco/dataset_coco.json", "coco"),
           "flickr30k_order": ("flickr30k/dataset_flickr30k.json", "flickr30k")}  # its pictures: `flickr30k_images`


def pre_caption(caption: str, max_words: int = MAX_WORDS) -> str:
    """The official caption cleaning: lower case, ``.!"()*#:;~`` to spaces, runs of spaces to one, cut."""
    caption = re.sub(r"\s{2,}", " ", re.sub(r"([.!\"()*#:;~])", " ", caption.lower())).rstrip("\n").strip(" ")
    return " ".join(caption.split(" ")[:max_words])


@functools.lru_cache(maxsize=1)
def _sentence_splitter():
    """(NLTK's English sentence splitter, True) when its Punkt model is installed, as ``word_tokenize`` splits;
    else (Punkt's algorithm without trained parameters, False). Nothing is downloaded."""
    from nltk.tokenize import sent_tokenize
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    try:
        sent_tokenize("A dog. A cat.")
    except LookupError:
        return PunktSentenceTokenizer().tokenize, False
    return sent_tokenize, True


def word_tokens(text: str) -> list[str]:
    """NLTK's ``word_tokenize``: the Treebank word tokenizer over each sentence."""
    from nltk.tokenize import NLTKWordTokenizer

    split, _ = _sentence_splitter()
    words = NLTKWordTokenizer()
    return [token for sentence in split(text) for token in words.tokenize(sentence)]


def trigrams(tokens: list[str]) -> list[list[str]]:
    return [tokens[i: i + 3] for i in range(0, len(tokens), 3)]


class Shuffler:
    """The four perturbations of each caption, drawn from numpy's and Python's generators seeded as the official
    run seeds them; one Shuffler per task, fed its captions in the file's order."""

    def __init__(self, seed: int = SEED):
        self.numpy, self.python = np.random.RandomState(seed), random.Random(seed)

    def _permuted(self, tokens: list[str], positions: list[int]) -> list[str]:
        """``tokens`` with those at ``positions`` permuted: ``numpy.random.permutation`` of their values (one draw
        per position after the first, as for the positions' indices)."""
        out = list(tokens)
        for at, source in zip(positions, self.numpy.permutation(len(positions)).tolist()):
            out[at] = tokens[positions[source]]
        return out

    def perturbations(self, caption: str, doc) -> list[str]:
        """The four scrambled versions of ``caption`` (``doc``: its spaCy parse), in the official order of draws."""
        tokens = [t.text for t in doc]
        nouns = [i for i, t in enumerate(doc) if t.tag_ in NOUNS]
        adjectives = [i for i, t in enumerate(doc) if t.tag_ in ADJECTIVES]
        others = [i for i, t in enumerate(doc) if t.tag_ not in NOUNS | ADJECTIVES]
        nouns_and_adjectives = self._permuted(self._permuted(tokens, nouns), adjectives)
        all_but = self._permuted(tokens, others)
        within = trigrams(word_tokens(caption))
        for group in within:
            self.python.shuffle(group)
        across = trigrams(word_tokens(caption))
        self.python.shuffle(across)
        return [" ".join(nouns_and_adjectives), " ".join(all_but), " ".join(" ".join(g) for g in within),
                " ".join(" ".join(g) for g in across)]


def options(captions: list[str], nlp) -> list[list[str]]:
    """Each caption's five options, the caption first, as the official dataset builds them (one task's captions in
    the file's order)."""
    shuffler = Shuffler()
    return [[pre_caption(caption)] + [pre_caption(p) for p in shuffler.perturbations(caption, doc)]
            for caption, doc in zip(captions, nlp.pipe(captions))]


def load(root: str | Path, skip_missing: bool = False) -> dict:
    """Per split file present: items (key, Crop, the five options with the caption first). The options are drawn
    for every caption listed, before images are checked: an item skipped for its image leaves the others as they
    are."""
    from ...nlp import load_spacy
    from ...records import file_digest
    from ..checks import BenchmarkDataError

    root = Path(root)
    found = {name: (root / f, flickr30k_images(root / images) if name == "flickr30k_order" else root / images)
             for name, (f, images) in SOURCES.items() if (root / f).is_file()}
    if not found:
        raise BenchmarkDataError(f"neither {' nor '.join(str(root / f) for f, _ in SOURCES.values())} exists; "
                                 "ARO's order tasks read the Karpathy split files of coco_retrieval and retrieval")
    nlp = load_spacy()
    items, skipped, notes, files = {}, {}, [], {}
    for name, (split_file, images) in found.items():
        listed = [(path, caption) for _, path, captions in listings(split_file, images) for caption in captions]
        counted: dict[Path, int] = {}
        rows = []
        for (path, caption), five in zip(listed, options([c for _, c in listed], nlp)):
            n = counted[path] = counted.get(path, -1) + 1  # an image listed twice: its captions numbered on
            rows.append((f"{unit_of(path)}#{n}", Crop(path), five))
        problems, sha256 = check_images([path for path, _ in listed], LAYOUT, skip_missing)
        items[name] = [row for row in rows if row[1].path not in problems]
        skipped[name] = len(rows) - len(items[name])
        files |= {split_file: file_digest(split_file)} | sha256
        notes += _tokenizer_note(name, [c for _, c in listed])
    return {"items": items, "skipped": skipped, "notes": notes, "files": files}


def _tokenizer_note(name: str, captions: list[str]) -> list[str]:
    """Without NLTK's Punkt model: how many captions have a period before their end, where its trained
    abbreviations could split the sentences otherwise."""
    if _sentence_splitter()[1]:
        return []
    inner = sum(bool(re.search(r"\.\s+\S", c)) for c in captions)
    return [f"{name}: NLTK's Punkt model for English is not installed, so the trigram shuffles split sentences by "
            f"Punkt's rules without its trained abbreviations; {inner} of {len(captions)} captions have a period "
            "before their end, where the model could split otherwise (install it for the official tokens: "
            "python -m nltk.downloader punkt_tab)"]


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Precision@1 per task; ``outcomes`` per caption, its image the unit (`stats`); the blind baseline
    (``blind``: `choice.subset_picks`)."""
    chosen = subset_picks(encoder, {s: ([it[1] for it in items], [it[2] for it in items])
                                    for s, items in data["items"].items()})

    def outcomes_of(picked: dict) -> dict:  # the caption is first
        answers = {name: series([it[0] for it in items], [unit_of(it[1].path) for it in items], picked[name] == 0)
                   for name, items in data["items"].items()}
        return {"series": answers, "metrics": {name: {"mean": name} for name in answers}}

    outcomes = outcomes_of(chosen["picks"])
    return {"metrics": reported(outcomes), "n": {s: len(v) for s, v in data["items"].items()},
            "skipped": data["skipped"], "notes": data["notes"], "outcomes": outcomes,
            "blind": blind_block(outcomes_of(chosen["blind"]), chosen["pictures"])}


def item_chances(data: dict) -> dict:
    """Each item's chance (`chance.levels`): the caption listed first, so a tie is right."""
    return {s: [(row[0], pick_chance(row[2], 0)) for row in rows] for s, rows in data["items"].items()}
