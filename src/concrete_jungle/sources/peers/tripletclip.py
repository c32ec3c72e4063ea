"""TripletCLIP's TripletData as released: WebDataset tar shards (``shard-{0..750}.tar``; the high-quality subset
is the Hugging Face dataset ``TripletCLIP/TripletCLIP-High-Quality``), read by its trainer
(github.com/tripletclip/TripletCLIP ``src/openclip/src/data.py`` ``TripletClipData``) as four members per key:
``KEY.image`` and ``KEY.neg_image`` (the pictures), ``KEY.caption`` and ``KEY.neg_caption`` (UTF-8 text).

Each key is one record with one negative that has its own picture. Members of other names are kept in the
record's fields (text as text, JSON parsed, anything else by its size and SHA-256). The pictures stay in the
shard: the record names them by locator (`sources.stores`). The tar is read by `files.tar_archive.scan_tar`, so a
damaged shard gives its whole records, a reject for the record the damage falls in and one for the damage itself.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from ...files.tar_archive import scan_tar
from ..stores import locator, store_name
from ..webdataset import group_members, split_key
from .base import FormatNeeds, PeerNegative, PeerOptions, PeerRecord

NEEDS = FormatNeeds(suffixes=(".tar",), pictures="inputs")  # TripletData holds its pictures
IMAGE, NEG_IMAGE, CAPTION, NEG_CAPTION = "image", "neg_image", "caption", "neg_caption"
MEMBERS = (IMAGE, NEG_IMAGE, CAPTION, NEG_CAPTION)


def read(path: Path, options: PeerOptions) -> Iterator[PeerRecord]:
    store = store_name(path, options.root)
    scan = scan_tar(path)
    groups, clashes = group_members(scan)
    fd = os.open(path, os.O_RDONLY)
    try:
        for key, exts in groups.items():
            yield _record(key, exts, lambda name: os.pread(fd, scan.members[name][1], scan.members[name][0]),
                          scan, store, path, clashes.get(key))
    finally:
        os.close(fd)
    if scan.damage:
        yield PeerRecord(f"{store}#damaged", source={"file": str(path)},
                         error=f"the shard {store} is damaged: {scan.damage}; nothing after that is read")


def _record(key: str, exts: dict[str, str], member, scan, store: str, path: Path, clash: str | None) -> PeerRecord:
    record = PeerRecord(f"{store}/{key}", source={"file": str(path), "key": key})
    repeated = next((name for name in exts.values() if name in scan.repeated), None)
    missing = [m for m in MEMBERS if m not in exts]
    if clash:
        record.error = f"{store} {clash}"
    elif scan.cut and split_key(scan.cut)[0] == key:
        record.error = f"the shard {store} is cut inside its member {scan.cut!r}: the record is not read"
    elif repeated:
        record.error = f"{store} holds its member {repeated!r} {len(scan.repeated[repeated])} times"
    elif missing:
        record.error = f"{store} holds no {', '.join(f'{key}.{m}' for m in missing)}"
    if record.error:
        return record
    texts = {}
    for ext in (CAPTION, NEG_CAPTION):
        try:
            texts[ext] = member(exts[ext]).decode("utf-8")
        except UnicodeDecodeError as e:
            record.error = f"{exts[ext]} in {store} is not UTF-8 text (at byte {e.start})"
            return record
    record.caption, record.image = texts[CAPTION], locator(store, exts[IMAGE])
    record.negatives = [PeerNegative(texts[NEG_CAPTION], locator(store, exts[NEG_IMAGE]), kind="tripletdata")]
    record.fields = {ext: _member_value(member(name)) for ext, name in exts.items() if ext not in MEMBERS}
    record.fields["members"] = sorted(exts.values())
    return record


def _member_value(data: bytes):
    """A member that is not one of the four, as its field: JSON parsed, text as text, other bytes described."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    try:
        return json.loads(text)
    except ValueError:
        return text
