"""Pair scorers: how good a planted pair is, computed as the plant makes it (docs/method.md §3, "Scores and gates").

A scorer takes `ScorePair`s (the anchor picture and caption, the negative picture and caption, as stored) and
returns, per score it declares, one number per pair, or None where the score does not apply to a pair (an image
score of a text-only negative, whose picture is the anchor's).

- ``bertscore``: ``text_sim``, BERTScore F1 of the negative caption against the caption, as Table 1 computes it
  (`bertscore.py`)
- ``dino``: ``image_sim``, the DINOv2 cosine of the anchor and negative pictures, Table 1's DINOScore (`dino.py`)
- ``open_clip``: ``agreement`` and its two margins under a CLIP model (`clip.py`)
- ``clip_sim``: ``clip_text_sim`` and ``clip_image_sim``, Table 1's CLIP similarities, under the same options
  (`clip.py`)
- ``pixel``: ``image_sim`` without a model, from the two pictures' pixels (`pixel.py`)
- any other class with this interface, by entry point (group ``concrete_jungle.scorers``) or
  ``package.module:Class`` (`plant/plugins.py`)

A scorer is a class with ``scores`` (a class attribute: the names of the scores it gives, read before it is built
so that gates can be checked), a constructor taking its options and ``device``, and on an instance ``name`` and
``version`` (what identifies its weights: recorded with every score) and ``score(pairs) -> {name: [value]}``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from PIL import Image

# scoring on with nothing named: the three scores of Table 1's kind, each by its default model
DEFAULT_SCORERS = {"bertscore": {}, "dino": {}, "open_clip": {}}


@dataclass(frozen=True)
class ScorePair:
    image: Image.Image
    caption: str
    neg_image: Image.Image | None  # None: a text-only negative (its picture is the anchor's)
    neg_caption: str


class Scorer(Protocol):
    scores: tuple[str, ...]
    name: str
    version: str

    def score(self, pairs: list[ScorePair]) -> dict[str, list[float | None]]: ...


def make_scorer(name: str, device: str, **options) -> Scorer:
    """A scorer by name (built-in, registered plugin, or ``package.module:Class``; see `plugins`) on ``device``."""
    from ..plugins import create

    return create("scorer", name, device=device, **options)


def weights_version(source: str, model) -> str:
    """What identifies a `transformers` model's weights: the Hub commit it was loaded from, else (a local folder)
    the sha256 of its weight files."""
    from ...records import file_digest

    commit = getattr(getattr(model, "config", None), "_commit_hash", None)
    if commit:
        return f"commit:{commit[:12]}"
    files = sorted(p for p in Path(source).glob("*") if p.suffix in (".safetensors", ".bin", ".pt", ".pth"))
    if not files:
        return "unknown"
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.name}:{file_digest(path)}\n".encode())
    return f"sha256:{digest.hexdigest()[:16]}"
