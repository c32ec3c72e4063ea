"""A Hugging Face dataset saved with ``datasets.save_to_disk`` (a folder with ``state.json`` and Arrow files): the
same columns as Parquet (`sources.parquet`), read in batches from the memory-mapped files, images located by row
(`stores`). A Hub-style dataset of Parquet files (``data/train-*.parquet``) is read as Parquet: pass its folder.
Needs ``datasets`` (``pip install 'concrete-jungle[stores]'``); nothing is fetched."""

from __future__ import annotations

from collections.abc import Iterator

from .stores import CAPTION_COLUMNS, ID_COLUMNS, IMAGE_COLUMNS, saved_dataset
from .base import CaptionSample, ReadOptions, SourceFile
from .parquet import pick_column, row_samples

BATCH = 1000


def read(file: SourceFile, options: ReadOptions) -> Iterator[CaptionSample]:
    path = file.path
    ds = saved_dataset(str(path))
    names = list(ds.features)
    caption = pick_column(names, options.columns.get("caption"), CAPTION_COLUMNS, "caption", path)
    ident = pick_column(names, options.columns.get("id"), ID_COLUMNS, "id", path, required=False)
    image = pick_column(names, options.columns.get("image"), IMAGE_COLUMNS, "image", path, required=False)
    text_only = ds.select_columns([c for c in (caption, ident) if c])
    for start in range(0, len(text_only), BATCH):
        batch = text_only[start: start + BATCH]
        ids = batch[ident] if ident else [None] * len(batch[caption])
        yield from row_samples(path.name, path.name, start, batch[caption], ids, caption, image,
                               options.columns.get("image"))
