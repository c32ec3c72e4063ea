"""What every caption reader shares: the sample it yields, the file it reads, its errors and path rule."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path


class SourceError(ValueError):
    """A caption file that cannot be read as a whole."""


def expand_named(paths, found_at) -> list[Path]:
    """The files ``found_at(path)`` gives for each of ``paths`` (brace notation expanded), in the order named; a file
    named twice (a folder and a file in it, one file by two paths) is given once, where first named."""
    from braceexpand import braceexpand

    out: list[Path] = []
    seen: set[str] = set()
    for p in (Path(q) for given in paths for q in braceexpand(str(given))):
        for q in found_at(p):
            real = os.path.realpath(q)
            if real not in seen:
                seen.add(real)
                out.append(q)
    return out


class UnsafePathError(ValueError):
    """A file name from a data file that would read outside the folder it must be in."""


@dataclass
class CaptionSample:
    id: str
    captions: list[str] = field(default_factory=list)
    image: str | None = None  # path relative to the image root, or a locator inside a store (`stores`)
    error: str | None = None  # set for a record that cannot be used; the reason it is skipped


@dataclass
class ReadOptions:
    """What a reader may need beyond its file: ``split`` filters Karpathy files (``train`` or ``train,restval``);
    ``columns`` names a store's caption, image and id columns (``{"caption": "text"}``); ``root`` is the folder the
    stores of this read lie under, which their locators are relative to (`stores.stores_folder`); ``seen_captions``
    and ``seen_ids`` are shared by all files of one read (SugarCrepe de-duplicates across its subsets; WebDataset
    keys that repeat across shards get the shard's name)."""

    split: str | None = None
    columns: dict[str, str] = field(default_factory=dict)
    root: Path | None = None
    seen_captions: set[str] = field(default_factory=set)
    seen_ids: set[str] = field(default_factory=set)


class SourceFile:
    """One input file; a JSON file is parsed once, whether format detection or a reader asks first."""

    def __init__(self, path: Path):
        self.path = path

    @cached_property
    def json(self):
        try:
            with open(self.path, encoding="utf-8") as f:
                return json.load(f)
        except json.JSONDecodeError as e:
            raise SourceError(f"{self.path}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
        except UnicodeDecodeError as e:
            raise SourceError(f"{self.path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def not_utf8(path: Path, lineno: int, raw: bytes, error: UnicodeDecodeError, start: int) -> str:
    """Why line ``lineno`` of ``path`` (``raw``, from byte ``start`` of the file) is skipped: it is not UTF-8."""
    return (f"{path.name} is not UTF-8 text on line {lineno} (byte 0x{raw[error.start]:02x} at byte "
            f"{start + error.start} of the file); save it as UTF-8")


def join_under(root: str | Path, name: str) -> Path:
    """``root / name`` for a file name read from a captions or benchmark file, which must stay inside ``root``.

    The name must be relative and must not climb out with ``..``; this is checked on the name itself, not on
    the resolved path, so symbolic links the user made inside ``root`` keep working. Otherwise a data file
    could make `plant` copy any readable file of the machine into a shard.
    """
    norm = os.path.normpath(name)
    if os.path.isabs(norm) or norm == os.pardir or norm.startswith(os.pardir + os.sep):
        raise UnsafePathError(f"image path {name!r} points outside {root}; image names must be relative to it")
    return Path(root) / norm


_WORD = re.compile(r"\w+|[^\w\s]")


def anchor_caption(captions: list[str]) -> str | None:
    """The caption with the most word tokens (ties: the first), docs/method.md §1; ``None`` if all are blank.

    Tokens are counted with a word/punctuation regex instead of a full spaCy parse of every caption,
    which would cost one parse per caption instead of one per sample.
    """
    best, best_len = None, -1
    for caption in captions:
        n = len(_WORD.findall(caption)) if caption and caption.strip() else -1
        if n > best_len:
            best, best_len = caption, n
    return best if best_len > 0 else None
