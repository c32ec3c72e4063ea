"""The official SugarCrepe JSON (a dict of ``{filename, caption, negative_caption}``): the positive captions,
de-duplicated by caption text across all files read (the 7 subsets hold 4,345 unique positives); id = image stem
+ a hash of the caption."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

from .base import CaptionSample, ReadOptions, SourceError, SourceFile


def looks_like(data) -> bool:
    if not isinstance(data, dict) or not data:
        return False
    first = next(iter(data.values()))
    return isinstance(first, dict) and {"filename", "caption", "negative_caption"} <= first.keys()


def read(file: SourceFile, options: ReadOptions) -> Iterator[CaptionSample]:
    data, path, seen = file.json, file.path, options.seen_captions
    if not isinstance(data, dict):
        raise SourceError(f"{path}: SugarCrepe JSON must be a dict keyed by item index")
    for key, item in data.items():  # iterate keys: some official subsets are not contiguous
        caption = item.get("caption") if isinstance(item, dict) else None
        if not isinstance(caption, str):
            yield CaptionSample(f"{path.stem}/{key}", error="no caption field")
            continue
        if caption in seen:
            continue
        seen.add(caption)
        digest = hashlib.sha1(caption.encode("utf-8")).hexdigest()[:10]
        image = item.get("filename")
        yield CaptionSample(f"{Path(image or 'sc').stem}-{digest}", [caption], image)
