"""COCO ``captions_*.json``: ``images`` + ``annotations`` grouped per ``image_id``."""

from __future__ import annotations

from collections.abc import Iterator

from .base import CaptionSample, ReadOptions, SourceFile


def looks_like(data) -> bool:
    return isinstance(data, dict) and isinstance(data.get("images"), list) and "annotations" in data


def read(file: SourceFile, options: ReadOptions) -> Iterator[CaptionSample]:
    data = file.json
    files = {img["id"]: img.get("file_name") for img in data["images"]}
    grouped: dict[int, list[str]] = {i: [] for i in files}
    for ann in data["annotations"]:
        grouped.setdefault(ann["image_id"], []).append(ann.get("caption", ""))
    for image_id, caps in grouped.items():
        yield CaptionSample(str(image_id), caps, files.get(image_id), None if caps else "no captions")
