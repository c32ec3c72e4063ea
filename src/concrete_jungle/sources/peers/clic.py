"""CLIC's training pictures (github.com/AmitPeleg/CLIC at dc845c7, ``data_loading.py`` ``CombineCsvDataset`` and
``utils/data_utils.py``), made from any caption file or store `sources.read_samples` reads: two pictures side by
side, their captions joined.

The samples are paired in a seeded order (``seed``: each with the next); a record per pair (id
``<sample>+<sample>``), in the released order of its parts:

- its picture (made by the import, `join_pictures`): both resized to 112 x 224 when the first picture is wider
  than high (the released ``get_ratio``), else 224 x 112, and stacked along their short side, the first on top or
  left at random (the released code draws a partner of the first's aspect; here the first's aspect decides);
- p1 and p2, the two first captions joined in either order (``get_p1_p2``), the anchor caption and its first other
  positive; then, with ``positives`` P > 2, P - 2 more: the i-th other caption of each picture joined in random
  order (``random_concat``), as many as both pictures have;
- its negative (made by the import with spaCy, `swap_negative`): a word of one caption swapped with a word of the
  same part of speech of the other, the two joined in random order (``get_hard_negative``).

A sample the caption reader skips, or without an image, is a reject with its reason; an odd last sample, without
a partner, too.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from pathlib import Path

from .. import read_samples
from .base import FormatNeeds, PeerOptions, PeerRecord

NEEDS = FormatNeeds(suffixes=None, pictures="images_or_stores")  # any caption file or store
HALF, FULL = 112, 224  # the released transforms' sizes
# the parts of speech the released code never swaps (``same_type_words``)
EXCLUDED_POS = frozenset({"AUX", "DET", "INTJ", "PART", "PUNCT", "SYM", "X", "SCONJ", "CCONJ"})


def joined(texts: list[str]) -> str:
    """The released ``concat_texts``: each text without trailing spaces and ending in a period, joined by a space."""
    return " ".join(t.rstrip(" ") + ("" if t.rstrip(" ").endswith(".") else ".") for t in texts)


def read_all(paths: list[Path], options: PeerOptions) -> Iterator[PeerRecord]:
    """Every pair of the samples of ``paths`` as a record (module docstring)."""
    samples = []
    for sample in read_samples(paths, fmt=options.caption_format, split=options.split):
        captions = [c for c in sample.captions if c and c.strip()]
        why = sample.error or (None if captions else "no caption") or (None if sample.image else
                                                                        "no image file named for this sample")
        if why:
            yield PeerRecord(sample.id, source={"sample": sample.id}, error=why)
        else:
            samples.append((sample, captions))
    rng = random.Random(options.seed)
    rng.shuffle(samples)
    for (first, first_captions), (second, second_captions) in zip(samples[0::2], samples[1::2]):
        yield pair_record(first, first_captions, second, second_captions, options.positives, rng)
    if len(samples) % 2:
        yield PeerRecord(samples[-1][0].id, source={"sample": samples[-1][0].id},
                         error="no partner picture left (an odd number of samples)")


def pair_record(first, first_captions, second, second_captions, positives: int, rng: random.Random) -> PeerRecord:
    c1, c2 = first_captions[0], second_captions[0]
    more = [joined(rng.sample([a, b], 2)) for a, b in zip(first_captions[1:], second_captions[1:])]
    return PeerRecord(f"{first.id}+{second.id}", caption=joined([c1, c2]), image=first.image,
                      positives=([joined([c2, c1])] + more)[: max(positives - 1, 0)],
                      source={"samples": [first.id, second.id]},
                      fields={"images": [first.image, second.image], "captions": [c1, c2],
                              "second_first": rng.random() < 0.5, "negative_seed": rng.randrange(2**32)})


def join_pictures(first, second, second_first: bool):
    """The pair's picture (PIL): both resized (bicubic, to the exact size, as the released Resize) to 112 x 224
    when the first is wider than high, else 224 x 112, stacked along their short side."""
    from PIL import Image

    wide = first.width >= first.height
    size = (FULL, HALF) if wide else (HALF, FULL)  # PIL sizes are (width, height)
    parts = [p.convert("RGB").resize(size, Image.Resampling.BICUBIC) for p in (first, second)]
    if second_first:
        parts.reverse()
    out = Image.new("RGB", (FULL, FULL))
    out.paste(parts[0], (0, 0))
    out.paste(parts[1], (0, HALF) if wide else (HALF, 0))
    return out


def swap_negative(doc1, doc2, rng: random.Random) -> str:
    """The released ``get_hard_negative`` on two parsed captions: a part of speech both have (not one of
    `EXCLUDED_POS`), words they do not share, one of each swapped, the two joined in random order; without such a
    part of speech, any two words."""
    by_pos = [{}, {}]
    for pos, doc in zip(by_pos, (doc1, doc2)):
        for token in doc:
            pos.setdefault(token.pos_, [])
            if token.text not in pos[token.pos_]:
                pos[token.pos_].append(token.text)
    common = []
    for tag in sorted(set(by_pos[0]) & set(by_pos[1]) - EXCLUDED_POS):
        shared = set(by_pos[0][tag]) & set(by_pos[1][tag])
        left = [w for w in by_pos[0][tag] if w not in shared], [w for w in by_pos[1][tag] if w not in shared]
        if left[0] and left[1]:
            common.append(left)
    if common:
        words1, words2 = rng.choice(common)
        word1, word2 = rng.choice(words1), rng.choice(words2)
    else:
        word1, word2 = rng.choice([t.text for t in doc1]), rng.choice([t.text for t in doc2])
    negatives = [swapped(doc1.text, word1, word2), swapped(doc2.text, word2, word1)]
    rng.shuffle(negatives)
    return joined(negatives)


def swapped(text: str, word: str, by: str) -> str:
    """``text`` with each whole-word ``word`` replaced by ``by`` (quotes and periods around a word kept)."""
    word, by = word.strip("'."), by.strip("'.")
    return re.sub(rf"\b{re.escape(word)}\b", lambda _: by, text)
