"""What every peer reader shares: the record it yields, where an image of a released file is, and how a file is
expanded into its inputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..base import SourceError


@dataclass
class PeerNegative:
    """One negative as its format releases it: its caption, its picture (a name under the import's image root or a
    locator inside a store; None for a caption-only negative), its ``kind`` (the format's own name for how it was
    made) and every other field the format gives it, as released. No peer's format rates its negatives: the import
    rates each from the words it changed (`plant.changed_words`)."""

    caption: str
    image: str | None = None
    kind: str | None = None
    fields: dict = field(default_factory=dict)
    error: str | None = None  # why this negative cannot be used (the record keeps its other negatives)


@dataclass
class PeerRecord:
    """One anchor of a peer's training set. ``source`` says where it was read (``file`` and its ``line``,
    ``index`` or tar ``key``); ``fields`` holds every field of the released record, as released, except those
    its negatives carry one by one; ``error`` is why a record cannot be read (it then goes to the rejects)."""

    id: str
    caption: str = ""
    image: str | None = None
    negatives: list[PeerNegative] = field(default_factory=list)
    fields: dict = field(default_factory=dict)
    source: dict = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class PeerOptions:
    """What a reader may need beyond its files: ``hard_images`` adds NegCLIP's hard-image negatives; ``split``
    and ``caption_format`` choose what `coco_swaps` reads from a caption file (`sources.read_samples`)."""

    hard_images: bool = False
    split: str | None = None
    caption_format: str | None = None
    root: Path | None = None  # the folder a store's locators are relative to (set by `read_records`)


def relative_name(path: str) -> str:
    """A released image path as a name under the import's image root. VisMin writes its paths from the root of
    its data folder (``/coco/images/train2017/...``): the leading slash goes, and the name is then checked by
    `sources.join_under` like any other, so a ``..`` still cannot leave the root."""
    return path.lstrip("/")


def expand_inputs(paths: list[str | Path], suffixes: tuple[str, ...], what: str) -> list[Path]:
    """The files of ``paths`` in the order named (brace notation expanded; a folder gives its files with one of
    ``suffixes``, sorted); a file named twice is read once."""
    import os

    from braceexpand import braceexpand

    out, seen = [], set()
    for p in (Path(q) for given in paths for q in braceexpand(str(given))):
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.suffix.lower() in suffixes and q.is_file())
            if not found:
                raise SourceError(f"{p} holds no {what} file ({', '.join(suffixes)})")
        elif p.is_file():
            found = [p]
        else:
            raise SourceError(f"{what} file not found: {p}")
        for q in found:
            real = os.path.realpath(q)
            if real not in seen:
                seen.add(real)
                out.append(q)
    return out
