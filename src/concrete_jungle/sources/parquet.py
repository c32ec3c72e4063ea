"""Parquet files with the image bytes inside, as img2dataset (``--output_format parquet``) and the Hugging Face
Hub write them: a caption column (``caption``, ``text`` or ``txt``), an image column of bytes or ``{bytes, path}``
(``image``, ``jpg`` or ``img``) and an id column (``key``, ``id``; else the row number), each nameable with
``--columns caption=...,image=...,id=...``.

Read one row group at a time and only the caption and id columns, so memory holds one row group's text, never the
file's images; images are located by row (`stores`) and read when a stage needs them. A row group that cannot be
read is one skip with its reason (its rows are not read); the rows after it are. A column of image bytes under
another name is an error naming it (every row would be a skip without an image otherwise).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath

from .base import CaptionSample, ReadOptions, SourceError, SourceFile
from .stores import CAPTION_COLUMNS, ID_COLUMNS, IMAGE_COLUMNS, row_locator, store_name


def read(file: SourceFile, options: ReadOptions) -> Iterator[CaptionSample]:
    path = file.path
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SourceError(f"{path}: reading Parquet needs pyarrow: pip install 'concrete-jungle[stores]'") from None
    try:
        parquet = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises its own errors (ArrowInvalid, OSError) for a file that is not Parquet
        raise SourceError(f"{path}: not a readable Parquet file ({type(e).__name__}: {e})") from None
    names = parquet.schema_arrow.names
    caption = pick_column(names, options.columns.get("caption"), CAPTION_COLUMNS, "caption", path)
    ident = pick_column(names, options.columns.get("id"), ID_COLUMNS, "id", path, required=False)
    image = pick_image_column(parquet.schema_arrow, options.columns.get("image"), path)
    named = options.columns.get("image")  # a column named by the user travels in the locator
    store = store_name(path, options.root)
    row = 0
    for group in range(parquet.num_row_groups):
        rows = parquet.metadata.row_group(group).num_rows
        try:
            table = parquet.read_row_group(group, columns=[c for c in (caption, ident) if c])
        except Exception as e:  # a damaged row group: its rows are skipped, the file goes on
            yield CaptionSample(f"{store}#rowgroup{group}", error=f"{store}: row group {group} ({rows} rows) cannot "
                                                                  f"be read: {type(e).__name__}: {e}")
            row += rows
            continue
        captions = table.column(caption).to_pylist()
        ids = table.column(ident).to_pylist() if ident else [None] * rows
        yield from row_samples(store, str(PurePosixPath(store).with_suffix("")), row, captions, ids, caption, image,
                               named)
        row += rows


def row_samples(store: str, unnamed: str, start: int, captions: list, ids: list, column: str,
                image: str | None, named: str | None) -> Iterator[CaptionSample]:
    """The samples of consecutive rows from ``start``: a row without an id is ``<unnamed>/<row>``, a row without
    caption text a skip; the image (when the store has an ``image`` column) located by row in ``store``, with the
    column when the user ``named`` it."""
    for k, (text, sid) in enumerate(zip(captions, ids)):
        sid = str(sid) if sid is not None and str(sid).strip() else f"{unnamed}/{start + k}"
        text = [text] if isinstance(text, str) else text
        if not isinstance(text, list) or not text or not all(isinstance(t, str) for t in text):
            yield CaptionSample(sid, error=f"no caption text in column {column!r}")
            continue
        yield CaptionSample(sid, text, row_locator(store, start + k, named) if image else None)


def pick_column(names: list[str], chosen: str | None, defaults: tuple[str, ...], what: str, path,
            required: bool = True) -> str | None:
    if chosen:
        if chosen not in names:
            raise SourceError(f"{path} has no column {chosen!r} (--columns {what}=...); its columns: {names}")
        return chosen
    found = next((c for c in defaults if c in names), None)
    if found is None and required:
        raise SourceError(f"{path} has no {what} column (looked for {', '.join(defaults)}); its columns: {names}; "
                          f"name it with --columns {what}=COLUMN")
    return found


def pick_image_column(schema, chosen: str | None, path) -> str | None:
    """The image column of a store with this Arrow ``schema``: the one named with ``--columns image=``, else the
    first of `IMAGE_COLUMNS`; None for a store of text alone. A column of bytes under another name is an error
    naming it."""
    found = pick_column(schema.names, chosen, IMAGE_COLUMNS, "image", path, required=False)
    holding = [f.name for f in schema if _holds_bytes(f.type)]
    if found is None and holding:
        raise SourceError(f"{path} has no image column named {', '.join(IMAGE_COLUMNS[:-1])} or {IMAGE_COLUMNS[-1]}, "
                          f"but its column {holding[0]!r} holds bytes; name the image column with --columns "
                          f"image={holding[0]}")
    return found


def _holds_bytes(kind) -> bool:
    """Whether an Arrow type holds bytes: binary, or Hugging Face's image struct ``{bytes, path}``."""
    import pyarrow as pa

    if pa.types.is_struct(kind):
        return any(kind.field(i).name == "bytes" and _holds_bytes(kind.field(i).type) for i in range(kind.num_fields))
    return pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind)
