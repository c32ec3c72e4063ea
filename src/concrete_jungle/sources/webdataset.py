"""WebDataset tar shards, as img2dataset writes them: ``KEY.jpg`` (or png, webp), ``KEY.txt``, ``KEY.json``.

A sample is the members sharing a key (the name up to the first dot of its file name, webdataset's rule); its
caption is ``KEY.txt``, or a field of ``KEY.json`` named by ``--columns caption=FIELD``; its id is the key (with the
shard's name in front where the key was already read from an earlier shard); its image is located in the shard
(`stores`), never unpacked. A sample without an image, and each row of img2dataset's metadata Parquet beside the
shard (``000000.parquet``) whose download failed, is a skip with its reason; a damaged shard yields what comes
before the damage and one skip saying where it stopped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from .stores import IMAGE_EXTENSIONS, locator, scan_tar
from .base import CaptionSample, ReadOptions, SourceFile


def split_key(name: str) -> tuple[str, str]:
    """(key, extension) of a member name: ``a/b/000123.neg.jpg`` -> (``a/b/000123``, ``neg.jpg``)."""
    folder, _, base = name.rpartition("/")
    stem, _, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext.lower()


def failed_downloads(shard: Path) -> Iterator[CaptionSample]:
    """The failed rows of img2dataset's metadata file beside ``shard``, as skips with img2dataset's reason."""
    meta = shard.with_suffix(".parquet")
    if not meta.is_file():
        return
    import pyarrow.parquet as pq

    table = pq.read_table(meta)
    if "status" not in table.column_names:
        return
    for row in table.select([c for c in ("key", "status", "error_message") if c in table.column_names]).to_pylist():
        if row.get("status") != "success":
            why = row.get("error_message") or row.get("status")
            yield CaptionSample(str(row.get("key")), error=f"no image: img2dataset could not download it ({why})")


def read(file: SourceFile, options: ReadOptions) -> Iterator[CaptionSample]:
    yield from name_repeated(read_shard(file.path, options.columns.get("caption")), file.path, options.seen_ids)


def read_shard(path: Path, field: str | None) -> Iterator[tuple[CaptionSample, bool]]:
    """The shard's samples on their own, each with whether its id is a key that a repeat in an earlier shard
    renames (`name_repeated`): what a worker can read without knowing the other shards."""
    members, damage = scan_tar(path)
    groups: dict[str, dict[str, str]] = {}
    for name in members:
        key, ext = split_key(name)
        groups.setdefault(key, {})[ext] = name
    fd = os.open(path, os.O_RDONLY)
    try:
        def text(key: str, ext: str) -> bytes | None:
            name = groups[key].get(ext)
            if name is None:
                return None
            offset, size = members[name]
            return os.pread(fd, size, offset)

        for key, exts in groups.items():
            caption, why = _caption(text(key, "json") if field else text(key, "txt"), key, field)
            image = next((exts[ext] for ext in IMAGE_EXTENSIONS if ext in exts), None)
            if why or image is None:
                why = why or "no image in the shard for this key (jpg, jpeg, png or webp)"
                yield CaptionSample(key, error=why), True
                continue
            yield CaptionSample(key, [caption], locator(path.name, image)), True
    finally:
        os.close(fd)
    for sample in failed_downloads(path):
        yield sample, False
    if damage:
        why = f"the shard is damaged: {damage}; the rest is not read"
        yield CaptionSample(f"{path.name}#damaged", error=why), False


def name_repeated(samples: Iterator[tuple[CaptionSample, bool]], path: Path, seen: set[str]) -> Iterator[CaptionSample]:
    """A shard's samples with a key already read from an earlier shard named ``<shard stem>/<key>``."""
    for sample, keyed in samples:
        if keyed:
            sample.id = sample.id if sample.id not in seen else f"{path.stem}/{sample.id}"
            seen.add(sample.id)
        yield sample


def _caption(raw: bytes | None, key: str, field: str | None) -> tuple[str | None, str | None]:
    """The caption of a key from its ``.txt``, or from the field of its ``.json``; else the reason."""
    if field:
        try:
            value = json.loads(raw) if raw is not None else None
        except ValueError:
            return None, f"{key}.json is not valid JSON"
        caption = value.get(field) if isinstance(value, dict) else None
        return (caption, None) if isinstance(caption, str) else (None, f"{key}.json has no text field {field!r}")
    if raw is None:
        return None, "no caption (.txt) in the shard for this key"
    return raw.decode("utf-8", errors="replace"), None
