"""CSV (or TSV): a header with ``id``, one or more ``caption*`` columns, optional ``image``. A row whose text is not
UTF-8 is a skip naming the line and byte; a header that is not UTF-8 is an error."""

from __future__ import annotations

import csv
from collections.abc import Iterator

from .base import CaptionSample, ReadOptions, SourceError, SourceFile, not_utf8


def _lines(f, bad: dict[int, str], path) -> Iterator[str]:
    """The file's lines as text; a line that is not UTF-8 is decoded with its bytes kept as escapes (so the csv
    parser still sees its quotes and separators) and its reason put in ``bad`` by line number."""
    end = 0
    for lineno, raw in enumerate(f, start=1):
        start, end = end, end + len(raw)
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as e:
            bad[lineno] = not_utf8(path, lineno, raw, e, start)
            yield raw.decode("utf-8", "surrogateescape")


def read(file: SourceFile, options: ReadOptions) -> Iterator[CaptionSample]:
    path = file.path
    bad: dict[int, str] = {}
    with open(path, "rb") as f:
        dialect = "excel-tab" if path.suffix.lower() == ".tsv" else "excel"
        reader = csv.DictReader(_lines(f, bad, path), dialect=dialect)
        header = reader.fieldnames or []
        if bad:
            raise SourceError(f"{path}: cannot read its header: {bad[min(bad)]}")
        id_col = next((c for c in ("id", "image_id", "key") if c in header), None)
        cap_cols = [c for c in header if c.lower().startswith("caption")]
        if id_col is None or not cap_cols:
            raise SourceError(
                f"{path}: a caption CSV needs an 'id' column and at least one 'caption' column; its header is {header}"
            )
        image_col = next((c for c in ("image", "filename") if c in header), None)
        after = reader.line_num  # the row read next starts on the line after this one
        for lineno, row in enumerate(reader, start=2):
            first, after = after + 1, reader.line_num
            why = next((bad[n] for n in range(first, after + 1) if n in bad), None)
            if why:
                yield CaptionSample(f"{path.name}:{first}", error=why)
                continue
            cells = len(header) + len(row.get(None) or []) - sum(v is None for k, v in row.items() if k is not None)
            if cells != len(header):  # a comma too many or too few shifts every later column: nothing is guessed
                yield CaptionSample(f"{path.name}:{first}", error=f"row has {cells} cells, its header "
                                    f"{len(header)}; quote a cell that holds the delimiter")
                continue
            caps = [row[c] for c in cap_cols if row.get(c)]
            sid = (row.get(id_col) or "").strip()
            if not sid:
                yield CaptionSample(f"{path.name}:{lineno}", error="row has no id")
                continue
            yield CaptionSample(sid, caps, row.get(image_col) if image_col else None)
