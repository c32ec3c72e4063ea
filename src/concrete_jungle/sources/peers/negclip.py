"""NegCLIP's COCO negatives as released (``train_neg_clip.tsv``, ``valid_neg_clip.tsv`` in the temp_data folder of
github.com/mertyg/vision-language-models-are-bows; read by its trainer, github.com/vinid/neg_clip
``src/training/data.py`` ``CsvDataset``).

A tab-separated table written by pandas: an unnamed index column, then ``title`` (the COCO caption), ``filepath``
(its image, relative to the COCO folder), ``neg_caption`` (a Python list literal of the caption's swapped
negatives, one or more) and ``neg_image`` (a Python list literal of row numbers: the rows whose images NegCLIP
draws as hard image negatives). A ``.csv`` file is read comma-separated. Every negative caption becomes a
caption-only negative (NegCLIP's negatives have no picture of their own); with ``hard_images`` each ``neg_image``
row adds a negative with that row's image and caption (``kind: hard-image``), as NegCLIP's later trainer puts
them into the batch. A row that cannot be read is a record with its reason.
"""

from __future__ import annotations

import ast
import csv
from collections.abc import Iterator
from pathlib import Path

from ...records import csv_field_limit
from ..base import SourceError
from .base import FormatNeeds, PeerNegative, PeerOptions, PeerRecord

NEEDS = FormatNeeds(suffixes=(".tsv", ".csv"), pictures="images")
# csv's default cell limit: NegCLIP's cells are a caption, a path and two short lists, so a longer one is no such table
CELL_LIMIT = 128 * 1024
CAPTION, IMAGE, NEGATIVES, HARD_IMAGES = "title", "filepath", "neg_caption", "neg_image"


def _literal_list(text: str, kind: type, what: str) -> list:
    """A Python list literal of ``kind`` values, read without running code (`ast.literal_eval`)."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise ValueError(f"{what} is not a Python list literal: {text[:80]!r}") from None
    if not isinstance(value, list) or not all(isinstance(v, kind) and not isinstance(v, bool) for v in value):
        raise ValueError(f"{what} is not a list of {'captions' if kind is str else 'row numbers'}: {text[:80]!r}")
    return value


def _rows(path: Path) -> tuple[list[str], list[tuple[int, dict]]]:
    """(header, [(line the row starts on, row)]); text that is not UTF-8 is kept as escapes, to be rejected by row.
    A blank line (empty or spaces only) is no row, as pandas reads the table: ``neg_image`` numbers the rows
    NegCLIP's trainer reads, so counting a blank line would give every later reference another row's picture."""
    with csv_field_limit(CELL_LIMIT), open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
        reader = csv.reader(f, dialect="excel" if path.suffix.lower() == ".csv" else "excel-tab")
        try:
            header = next(reader, None)
            if header is None:
                raise SourceError(f"{path} is empty; expected NegCLIP's table ({CAPTION}, {IMAGE}, {NEGATIVES}, "
                                  f"{HARD_IMAGES})")
            missing = [c for c in (CAPTION, IMAGE, NEGATIVES) if c not in header]
            if missing:
                raise SourceError(f"{path} has no column {missing}; its header is {header}: is it NegCLIP's "
                                  "train_neg_clip.tsv?")
            twice = next((c for c in header if header.count(c) > 1), None)
            if twice is not None:
                raise SourceError(f"{path}: its header names the column {twice!r} twice ({header}); rename one, "
                                  "so that each cell is read under its own name")
            rows, line = [], reader.line_num
            for values in reader:
                if values and (len(values) > 1 or values[0].strip()):
                    rows.append((line + 1, dict(zip(header, values)) | ({"__extra__": values[len(header):]}
                                                                         if len(values) > len(header) else {})))
                line = reader.line_num
        except csv.Error as e:  # a field over csv's limit (128 KiB), a NUL byte
            raise SourceError(f"{path}, line {reader.line_num}: not read as a table ({e}); NegCLIP's cells are a "
                              "caption, a path and two short lists: is this its train_neg_clip.tsv?") from None
    return header, rows


def _text_problem(row: dict) -> str | None:
    bad = next((k for k, v in row.items() if isinstance(v, str) and any("\udc80" <= ch <= "\udcff" for ch in v)),
               None)
    return None if bad is None else f"not UTF-8 text in column {bad!r}; save the file as UTF-8"


def read(path: Path, options: PeerOptions) -> Iterator[PeerRecord]:
    header, rows = _rows(path)
    index_column = header[0] if header[0] not in (CAPTION, IMAGE, NEGATIVES, HARD_IMAGES) else None
    for number, (line, row) in enumerate(rows):
        name = row.get(index_column) if index_column is not None else None
        record = PeerRecord(f"{path.name}#{name if name not in (None, '') else number}",
                            source={"file": str(path), "line": line, "row": number}, fields=row)
        problem = _text_problem(row) or ("more cells than the header names" if "__extra__" in row else None)
        if not problem and len(row) < len(header):
            problem = f"fewer cells than the header names ({len(row)} of {len(header)})"
        try:
            if problem:
                raise ValueError(problem)
            if not row[CAPTION].strip():
                raise ValueError(f"no caption ({CAPTION} is empty)")
            if not row[IMAGE].strip():
                raise ValueError(f"no image path ({IMAGE} is empty)")
            captions = _literal_list(row[NEGATIVES], str, NEGATIVES)
            if not captions:
                raise ValueError(f"no negative caption ({NEGATIVES} is an empty list)")
            hard = _hard_images(row, len(rows), strict=options.hard_images)
        except ValueError as e:
            record.error = str(e)
            yield record
            continue
        # neg_image as the list it is; as released (text) when it does not read and no hard image is asked for
        record.fields = row | {NEGATIVES: captions} | ({HARD_IMAGES: hard} if hard is not None else {})
        record.caption, record.image = row[CAPTION], row[IMAGE]
        record.negatives = [PeerNegative(c, kind="swap") for c in captions]
        for j in hard if options.hard_images else []:
            other = rows[j][1]
            negative = PeerNegative(other.get(CAPTION, ""), other.get(IMAGE) or None, kind="hard-image",
                                    fields={"row": j, "line": rows[j][0]})
            if not negative.caption.strip() or not negative.image or _text_problem(other):
                negative.error = f"hard image row {j} has no usable caption and image"
            record.negatives.append(negative)
        yield record


def _hard_images(row: dict, n_rows: int, strict: bool) -> list[int] | None:
    """The rows ``neg_image`` names; when it is missing or does not read, an error if ``strict`` (hard images are
    asked for), else None."""
    try:
        if HARD_IMAGES not in row:
            raise ValueError(f"no {HARD_IMAGES} column: this file carries no hard images (leave out --hard-images)")
        rows = _literal_list(row[HARD_IMAGES], int, HARD_IMAGES)
        outside = [j for j in rows if not 0 <= j < n_rows]
        if outside:
            raise ValueError(f"{HARD_IMAGES} names rows {outside} outside the file's {n_rows} rows")
    except ValueError:
        if strict:
            raise
        return None
    return rows
