"""What every peer reader shares: the record it yields, where an image of a released file is, and how a file is
expanded into its inputs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..base import SourceError, expand_named


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
    positives: list[str] = field(default_factory=list)  # the picture's other true captions, after ``caption``


@dataclass(frozen=True)
class PeerOptions:
    """What a reader may need beyond its files: ``hard_images`` adds NegCLIP's hard-image negatives; ``split``
    and ``caption_format`` choose what `coco_swaps` reads from a caption file (`sources.read_samples`), and
    ``positives`` how many of a picture's captions one record keeps (1: each caption a record of its own); ``seed``
    how `clic` pairs its pictures."""

    hard_images: bool = False
    split: str | None = None
    caption_format: str | None = None
    positives: int = 1
    seed: int = 0  # the pairing of `clic`
    root: Path | None = None  # the folder a store's locators are relative to (set by `read_records`)


@dataclass(frozen=True)
class FormatNeeds:
    """What an import of a format needs besides its reader, declared by the format's module as ``NEEDS``.

    ``suffixes``: the files it reads from a named folder; None: any caption file or store (`sources.expand_paths`).
    ``pictures``: where its records' pictures are: "images", files named under ``--images``; "inputs", inside its
    own input files (no ``--images``; a record's locators are relative to the folder they lie in); "images_or_stores",
    under ``--images``, else the folder its stores lie under. ``slot_types``: its negatives' fixed types, in batch
    slot order (a record without one leaves its slot empty instead of shifting the next type in)."""

    suffixes: tuple[str, ...] | None
    pictures: str
    slot_types: tuple[str, ...] = ()

    def __post_init__(self):
        if self.pictures not in ("images", "inputs", "images_or_stores"):
            raise ValueError(f"pictures must be images, inputs or images_or_stores, not {self.pictures!r}")


def relative_name(path: str) -> str:
    """A released image path as a name under the import's image root. VisMin writes its paths from the root of
    its data folder (``/coco/images/train2017/...``): the leading slash goes, and the name is then checked by
    `sources.join_under` like any other, so a ``..`` still cannot leave the root."""
    return path.lstrip("/")


def expand_inputs(paths: list[str | Path], suffixes: tuple[str, ...], what: str) -> list[Path]:
    """The files of ``paths`` in the order named (brace notation expanded; a folder gives its files with one of
    ``suffixes``, sorted); a file named twice is read once."""
    def found_at(p: Path) -> list[Path]:
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.suffix.lower() in suffixes and q.is_file())
            if not found:
                raise SourceError(f"{p} holds no {what} file ({', '.join(suffixes)})")
            return found
        if p.is_file():
            return [p]
        raise SourceError(f"{what} file not found: {p}")

    return expand_named(paths, found_at)


def json_items(path: Path, not_json: str, not_a_list: str):
    """(where, item) for every record of a JSON list or a JSONL file, as the file holds it; a JSONL line that does
    not parse is an item of its own reason (a ValueError). A JSON file that does not parse, or holds no list, is a
    `SourceError` ending in ``not_json`` or ``not_a_list`` (the format's own words)."""
    import json

    if path.suffix.lower() == ".jsonl":
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            for line_number, line in enumerate(f, start=1):
                if line.strip():
                    try:
                        yield {"file": str(path), "line": line_number}, json.loads(line)
                    except (ValueError, RecursionError) as e:  # RecursionError: nested deeper than json reads
                        yield {"file": str(path), "line": line_number}, ValueError(f"not a JSON line ({e})")
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: nested deeper than json reads
        raise SourceError(f"{path}: not a JSON file ({e}){not_json}") from None
    if not isinstance(data, list):
        raise SourceError(f"{path}: {not_a_list}; this file holds a {type(data).__name__}")
    for index, item in enumerate(data):
        yield {"file": str(path), "index": index}, item


def checked_records(path: Path, items, problem, not_an_object: str) -> Iterator[tuple[PeerRecord, dict | None]]:
    """For every (where, item) of ``items`` (`json_items`): a record named after ``path`` and the item's line or
    index, and the item, or None with the record's ``error`` set where it cannot be read: an item that did not
    parse, one that is not a dict (``not_an_object``: the format's words for what it must be), one without a
    caption, or what ``problem(item)`` (the format's own checks) says."""
    for where, item in items:
        record = PeerRecord(f"{path.name}#{where.get('line', where.get('index'))}", source=where)
        if isinstance(item, Exception):
            record.error = str(item)
        elif not isinstance(item, dict):
            record.error = f"{not_an_object}; this one is a {type(item).__name__}"
        elif not isinstance(item.get("caption"), str) or not item["caption"].strip():
            record.error = "no caption"
        else:
            record.error = problem(item)
        yield record, item if record.error is None else None
