"""A Hugging Face dataset saved with ``datasets.save_to_disk`` (a folder with ``state.json`` and Arrow files): the
same columns as Parquet (`sources.parquet`), read in batches from the memory-mapped files, images located by row
(`stores`). A Hub-style dataset of Parquet files (``data/train-*.parquet``) is read as Parquet: pass its folder; a
``DatasetDict`` folder is refused naming its splits (pass one split's folder). An Arrow file that is truncated or
damaged is an error naming it. Needs ``datasets`` (``pip install 'concrete-jungle[stores]'``); nothing is fetched."""

from __future__ import annotations

from collections.abc import Iterator

from .base import CaptionSample, ReadOptions, SourceError, SourceFile
from .parquet import pick_column, pick_image_column, row_samples
from .stores import CAPTION_COLUMNS, ID_COLUMNS, StoreError, damaged_dataset, saved_dataset, store_name

BATCH = 1000


def read(file: SourceFile, options: ReadOptions) -> Iterator[CaptionSample]:
    path = file.path
    try:
        ds = saved_dataset(str(path))
    except StoreError as e:
        raise SourceError(str(e)) from None
    names = list(ds.features)
    caption = pick_column(names, options.columns.get("caption"), CAPTION_COLUMNS, "caption", path)
    ident = pick_column(names, options.columns.get("id"), ID_COLUMNS, "id", path, required=False)
    image = pick_image_column(ds.features.arrow_schema, options.columns.get("image"), path)
    store = store_name(path, options.root)
    text_only = ds.select_columns([c for c in (caption, ident) if c])
    for start in range(0, len(text_only), BATCH):
        try:
            batch = text_only[start: start + BATCH]
        except Exception as e:  # pyarrow's own errors for an Arrow file damaged past what loading it read
            raise SourceError(damaged_dataset(str(path), e)) from None
        ids = batch[ident] if ident else [None] * len(batch[caption])
        yield from row_samples(store, store, start, batch[caption], ids, caption, image, options.columns.get("image"))
