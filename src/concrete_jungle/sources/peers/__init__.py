"""The peers' training sets, read as they are released: one module per format, each yielding `PeerRecord`s
(anchor caption and image, its negatives, every field the format carries, where the record was read) for
`plant.imported` to write as a ConcreteBatch:

- ``negclip``: NegCLIP's COCO negatives (``train_neg_clip.tsv``), `negclip`;
- ``tripletclip``: TripletCLIP's TripletData (WebDataset shards), `tripletclip`;
- ``vismin``: VisMin's training JSON, `vismin`;
- ``ce-clip``: CE-CLIP's COCO hard negatives (``processed_dataset*.npy`` from its ``prepare_dataset.sh``), `ceclip`;
- ``coco-swaps``: COCO-style captions; their negatives are made by rule swaps during the import, `coco_swaps`;
- ``clic``: COCO-style captions, two pictures side by side with their captions joined, as CLIC makes its batch;
  the joined picture and the swap negative are made during the import, `clic`.

A file that cannot be read as a whole raises `SourceError` naming it and the fix; a record that cannot be read is
yielded with ``error`` set (the import writes it to the rejects with that reason), never dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from ..base import SourceError
from ..stores import store_root, stores_folder
from . import ceclip, clic, coco_swaps, negclip, tripletclip, vismin
from .base import FormatNeeds, PeerNegative, PeerOptions, PeerRecord

__all__ = ["CAPTION_FILES", "FORMATS", "NAMES_IMAGE_FILES", "SLOT_TYPES", "FormatNeeds", "PeerNegative",
           "PeerOptions", "PeerRecord", "image_root", "input_files", "needs", "read_records"]

FORMATS = {"negclip": negclip, "tripletclip": tripletclip, "vismin": vismin, "ce-clip": ceclip,
           "coco-swaps": coco_swaps, "clic": clic}
# what each module declares (its NEEDS), by the questions the import asks of a format
SLOT_TYPES = {fmt: module.NEEDS.slot_types for fmt, module in FORMATS.items() if module.NEEDS.slot_types}
NAMES_IMAGE_FILES = tuple(fmt for fmt, module in FORMATS.items() if module.NEEDS.pictures == "images")
CAPTION_FILES = tuple(fmt for fmt, module in FORMATS.items() if module.NEEDS.suffixes is None)


def _module(fmt: str):
    if fmt not in FORMATS:
        raise SourceError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return FORMATS[fmt]


def needs(fmt: str) -> FormatNeeds:
    """What an import of ``fmt`` needs besides its reader (its module's ``NEEDS``)."""
    return _module(fmt).NEEDS


def input_files(fmt: str, inputs: list[str | Path]) -> list[Path]:
    """The files an import of ``fmt`` reads from ``inputs`` (files, folders, brace notation), in order."""
    suffixes = needs(fmt).suffixes
    if suffixes is None:
        from .. import expand_paths

        return expand_paths(inputs)
    from .base import expand_inputs

    return expand_inputs(inputs, suffixes, f"{fmt} input")


def image_root(fmt: str, files: list[Path], images: str | Path | None) -> Path | None:
    """The folder the records' image names are relative to: ``images`` (``--images``), or the folder the stores lie
    under when the format's pictures are inside them; None when there is none (then `import` asks for --images)."""
    pictures = needs(fmt).pictures
    if pictures == "inputs":
        return stores_folder(files)
    if images is not None:
        return Path(images)
    return store_root(files) if pictures == "images_or_stores" else None


def read_records(fmt: str, files: list[Path], options: PeerOptions = PeerOptions()) -> Iterator[PeerRecord]:
    """Every record of ``files`` (`input_files`) in file order."""
    module = _module(fmt)
    if module.NEEDS.pictures == "inputs":
        options = replace(options, root=stores_folder(files))
    names = file_names(files)
    records = module.read_all(files, options) if hasattr(module, "read_all") else (
        _named(record, path, names[path]) for path in files for record in module.read(path, options))
    for record in records:
        yield _valid_text(record)


def file_names(files: list[Path]) -> dict[Path, str]:
    """The name a file's record ids begin with: its file name, or, where two inputs share one (``a/train.json``
    and ``b/train.json``), its path from the folder they share, so that the second's records are not taken for
    duplicates of the first's."""
    import os

    names = [path.name for path in files]
    if len(set(names)) == len(names):
        return dict(zip(files, names))
    common = os.path.commonpath([os.path.abspath(path) for path in files])
    return {path: Path(os.path.relpath(os.path.abspath(path), common)).as_posix() for path in files}


def _named(record: PeerRecord, path: Path, name: str) -> PeerRecord:
    if name != path.name and record.id.startswith(f"{path.name}#"):
        record.id = name + record.id[len(path.name):]
    return record


def _valid_text(record: PeerRecord) -> PeerRecord:
    """The record, or a reject when its caption is empty or blank, or its text cannot be written as UTF-8 (a lone
    surrogate from a file that is not UTF-8, or JSON's ``\\ud800``); an empty or blank negative is marked
    unusable (the record keeps its other negatives): every format's records are held to the same rule."""
    if record.error is not None:
        return record
    if not isinstance(record.caption, str) or not record.caption.strip():
        return PeerRecord(record.id, source=record.source, error=f"no caption (it is {record.caption!r})")
    for negative in record.negatives:
        if negative.error is None and (not isinstance(negative.caption, str) or not negative.caption.strip()):
            negative.error = f"empty negative caption ({negative.caption!r})"
    try:
        json.dumps([record.id, record.caption, record.image, record.fields, record.positives,
                    [[n.caption, n.image, n.fields] for n in record.negatives]], ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return PeerRecord(record.id.encode("utf-8", "backslashreplace").decode("utf-8"), source=record.source,
                          error="not valid Unicode text (a lone surrogate such as \\ud800; is the file UTF-8?)")
    except (TypeError, ValueError, RecursionError) as e:
        return PeerRecord(record.id, source=record.source, error=f"a field is not JSON data ({e})")
    return record
