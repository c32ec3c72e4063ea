"""Karpathy split files (``dataset_coco.json``, ``dataset_flickr30k.json``): ``images[].sentences[].raw``, ``split``,
``filepath``/``filename``; id = ``cocoid`` (else ``imgid``)."""

from __future__ import annotations

from collections.abc import Iterator

from .base import CaptionSample, ReadOptions, SourceError, SourceFile


def looks_like(data) -> bool:
    return (isinstance(data, dict) and isinstance(data.get("images"), list) and "annotations" not in data
            and bool(data["images"]) and isinstance(data["images"][0], dict) and "sentences" in data["images"][0])


def read(file: SourceFile, options: ReadOptions) -> Iterator[CaptionSample]:
    data = file.json
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise SourceError(f"{file.path}: not a Karpathy split file (no 'images' list)")
    splits = set(options.split.replace("+", ",").split(",")) if options.split else None
    for n, img in enumerate(data["images"]):
        if splits is not None and img.get("split") not in splits:
            continue
        sid = str(img.get("cocoid", img.get("imgid", img.get("filename", n))))
        caps = [s.get("raw", "") for s in img.get("sentences", []) if isinstance(s, dict)]
        image = "/".join(p for p in (img.get("filepath"), img.get("filename")) if p) or None
        yield CaptionSample(sid, caps, image, None if caps else "no captions")
