"""CSV (or TSV): a header with ``id``, one or more ``caption*`` columns, optional ``image``."""

from __future__ import annotations

import csv
from collections.abc import Iterator

from .base import CaptionSample, ReadOptions, SourceError, SourceFile


def read(file: SourceFile, options: ReadOptions) -> Iterator[CaptionSample]:
    path = file.path
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        dialect = "excel-tab" if path.suffix.lower() == ".tsv" else "excel"
        reader = csv.DictReader(f, dialect=dialect)
        header = reader.fieldnames or []
        id_col = next((c for c in ("id", "image_id", "key") if c in header), None)
        cap_cols = [c for c in header if c.lower().startswith("caption")]
        if id_col is None or not cap_cols:
            raise SourceError(
                f"{path}: a caption CSV needs an 'id' column and at least one 'caption' column; its header is {header}"
            )
        image_col = next((c for c in ("image", "filename") if c in header), None)
        for lineno, row in enumerate(reader, start=2):
            caps = [row[c] for c in cap_cols if row.get(c)]
            sid = (row.get(id_col) or "").strip()
            if not sid:
                yield CaptionSample(f"{path.name}:{lineno}", error="row has no id")
                continue
            yield CaptionSample(sid, caps, row.get(image_col) if image_col else None)
