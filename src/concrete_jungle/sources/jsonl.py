"""JSONL: one object per line with ``id`` and ``caption`` (string) or ``captions`` (list), optional ``image``.
A malformed line or record, or a line that is not UTF-8, is yielded as a skipped sample with its reason."""

from __future__ import annotations

import json
from collections.abc import Iterator

from .base import CaptionSample, ReadOptions, SourceFile, not_utf8


def _record_sample(record, where: str) -> CaptionSample:
    if not isinstance(record, dict):
        return CaptionSample(where, error="record is not a JSON object")
    sid = record.get("id", record.get("image_id", record.get("key")))
    if sid is None or str(sid).strip() == "":
        return CaptionSample(where, error="record has no 'id'")
    caps = record.get("captions", record.get("caption"))
    if isinstance(caps, str):
        caps = [caps]
    if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
        return CaptionSample(str(sid), error="record has no 'caption' string or 'captions' list")
    image = record.get("image", record.get("filename"))
    if image is not None and not isinstance(image, str):
        return CaptionSample(str(sid), error="record's 'image' is not a file name")
    return CaptionSample(str(sid), caps, image)


def read(file: SourceFile, options: ReadOptions) -> Iterator[CaptionSample]:
    path = file.path
    with open(path, "rb") as f:
        end = 0
        for lineno, raw in enumerate(f, start=1):
            start, end = end, end + len(raw)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:  # a guessed character would change the caption: the line is a skip
                yield CaptionSample(f"{path.name}:{lineno}", error=not_utf8(path, lineno, raw, e, start))
                continue
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                yield CaptionSample(f"{path.name}:{lineno}", error=f"malformed JSON on line {lineno}: {e.msg}")
                continue
            yield _record_sample(record, f"{path.name}:{lineno}")
