"""Images that live inside a store (WebDataset tar shards, Parquet files, a Hugging Face ``save_to_disk`` folder),
named by a *locator*: ``<store>::<where>``, the store's file or folder name relative to the image root and the
place of the image in it (a tar member's name; a Parquet or dataset row, followed by ``::<column>`` when the image
column was named with ``--columns image=...``).

The caption readers (`sources.webdataset`, `sources.parquet`, `sources.hf`) write locators where a caption file
would name an image file, so every stage after them (the keyword records, resume, the reject log) works as for a
folder of images; `read_located` reads the bytes back. A store is opened once per process and kept: a tar's member
index (name -> offset, size) is built by one pass over its headers (`tar_archive`), a Parquet file reads the row group
holding the row (and keeps the last one), a saved dataset is memory-mapped.

The stores of one read are named relative to the folder they all lie under (`stores_folder`): ``00000.tar`` for
shards in one folder, ``a/00000.tar`` and ``b/00000.tar`` for same-named shards in two, so a locator always names
the store its sample was read from.
"""

from __future__ import annotations

import bisect
import os
from functools import lru_cache
from pathlib import Path

from ..files.tar_archive import TarScan, scan_tar

SEP = "::"
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")  # a WebDataset sample's image, in the order looked for
CAPTION_COLUMNS = ("caption", "text", "txt")  # img2dataset, Hugging Face, WebDataset
IMAGE_COLUMNS = ("image", "jpg", "img")
ID_COLUMNS = ("key", "id", "__key__")


class StoreError(ValueError):
    """A locator that names no image of its store; the message says which and why."""


def is_located(name: str | None) -> bool:
    return bool(name) and SEP in name


def locator(store: str, where: str | int) -> str:
    return f"{store}{SEP}{where}"


def row_locator(store: str, row: int, column: str | None = None) -> str:
    """A row's image; ``column`` when it is not the one found by default (`IMAGE_COLUMNS`)."""
    return locator(store, f"{row}{SEP}{column}" if column else row)


def read_named(root: str | Path, name: str):
    """(image, its bytes): the image a data file names under ``root``, a file (read by the safe opener,
    `images.read_image`) or an image inside a store; `images.ImageRejected`, `StoreError` or
    `sources.UnsafePathError` with the reason otherwise."""
    from ..images import image_from_bytes, read_image
    from .base import join_under

    if is_located(name):
        data = read_located(root, name)
        return image_from_bytes(data, name), data
    return read_image(join_under(root, name))


def split_locator(root: str | Path, name: str) -> tuple[Path, str]:
    """(the store's path under ``root``, the place in it); the store must be a name inside ``root``."""
    from .base import join_under

    store, _, where = name.partition(SEP)
    return join_under(root, store), where


def read_located(root: str | Path, name: str) -> bytes:
    """The bytes of the image ``name`` locates under ``root``."""
    store, where = split_locator(root, name)
    if not store.exists():
        raise StoreError(f"the store {store} does not exist (named by {name!r})")
    if store.suffix == ".tar":
        index = tar_index(str(store))
        if where in index.repeated:
            raise StoreError(f"{store} holds its member {where!r} {len(index.repeated[where])} times")
        if where not in index.members:
            raise StoreError(f"{store} has no member {where!r}")
        offset, size = index.members[where]
        data = os.pread(_shard_fd(str(store)), size, offset)  # one call: no open, seek and close an image
        if len(data) != size:
            raise StoreError(f"{store} is cut short inside {where!r}")
        return data
    row, _, column = where.partition(SEP)
    if store.suffix == ".parquet":
        return parquet_image(str(store), int(row), column or None)
    if store.is_dir():
        return saved_dataset_image(str(store), int(row), column or None)
    raise StoreError(f"{store} is not a store this project reads (.tar, .parquet or a save_to_disk folder)")


@lru_cache(maxsize=8)
def tar_index(path: str) -> TarScan:
    """`scan_tar`'s index of a shard, kept for the process (a few shards: inputs are read in order)."""
    return scan_tar(path)


@lru_cache(maxsize=8)
def _shard_fd(path: str) -> int:
    """A read-only descriptor of a shard, kept open for the process (read with `os.pread`, which has no file
    position, so DataLoader workers that inherit it cannot disturb each other)."""
    return os.open(path, os.O_RDONLY)


def image_bytes(value) -> bytes | None:
    """An image cell: raw bytes, or Hugging Face's ``{"bytes", "path"}``."""
    if isinstance(value, dict):
        value = value.get("bytes")
    return bytes(value) if isinstance(value, (bytes, bytearray, memoryview)) else None


def image_column(names: list[str]) -> str | None:
    """The image column found by default."""
    return next((c for c in IMAGE_COLUMNS if c in names), None)


@lru_cache(maxsize=16)
def _parquet_file(path: str):
    import pyarrow.parquet as pq

    return pq.ParquetFile(path)


@lru_cache(maxsize=16)
def _parquet_layout(path: str) -> tuple[frozenset[str], list[int]]:
    """A Parquet file's column names and the first row of each row group (and the row count last), read once:
    the schema and metadata cost more than reading one image."""
    file = _parquet_file(path)
    starts = [0]
    for group in range(file.num_row_groups):
        starts.append(starts[-1] + file.metadata.row_group(group).num_rows)
    return frozenset(file.schema_arrow.names), starts


_last_group: dict = {}  # (path, row group) -> that group's image column, the last one read in this process


def parquet_image(path: str, row: int, column: str | None = None) -> bytes:
    """The image bytes of ``row`` in a Parquet file: its row group read once, the image column only."""
    names, starts = _parquet_layout(path)
    column = column or image_column(list(names))
    if column is None or column not in names:
        raise StoreError(f"{path} has no image column {column or ' or '.join(IMAGE_COLUMNS)}")
    if not 0 <= row < starts[-1]:
        raise StoreError(f"{path} has {starts[-1]} rows; row {row} does not exist")
    group = bisect.bisect_right(starts, row) - 1
    key = (path, group, column)
    if key not in _last_group:
        try:
            images = _parquet_file(path).read_row_group(group, columns=[column]).column(0).to_pylist()
        except Exception as e:  # pyarrow's own errors (OSError, ArrowInvalid) for a damaged column chunk
            raise StoreError(f"{path}: row group {group} of column {column!r} cannot be read ({type(e).__name__}: "
                             f"{e}); the file is damaged: download or write it again") from None
        _last_group.clear()
        _last_group[key] = images
    data = image_bytes(_last_group[key][row - starts[group]])
    if data is None:
        raise StoreError(f"no image bytes in column {column!r} (row {row} of {path})")
    return data


@lru_cache(maxsize=4)
def saved_dataset(path: str):
    """A `datasets.save_to_disk` folder, memory-mapped."""
    try:
        import datasets
    except ImportError:
        raise StoreError("reading a Hugging Face dataset folder needs `datasets`: pip install "
                         "'concrete-jungle[stores]'") from None
    try:
        ds = datasets.load_from_disk(path)
    except Exception as e:  # pyarrow's own errors (OSError, ArrowInvalid) for a truncated or damaged Arrow file
        raise StoreError(damaged_dataset(path, e)) from None
    if isinstance(ds, datasets.DatasetDict):
        raise StoreError(f"{path} holds several splits ({', '.join(ds)}); pass the folder of one: {path}/<split>")
    return ds


def damaged_dataset(path: str, error: Exception) -> str:
    """The message for a saved dataset that cannot be read: the Arrow file that fails, and the fix."""
    import pyarrow as pa

    for arrow in sorted(Path(path).glob("*.arrow")):
        try:
            with pa.memory_map(str(arrow)) as source:
                for _ in pa.ipc.open_stream(source):  # memory-mapped batches: their layout is read, not copied
                    pass
        except Exception as e:
            return (f"{path}: its file {arrow.name} is truncated or damaged ({type(e).__name__}: {e}); save the "
                    "dataset again with save_to_disk (or copy it again)")
    return (f"{path}: the saved dataset cannot be read ({type(error).__name__}: {error}); save it again with "
            "save_to_disk (or copy it again)")


@lru_cache(maxsize=4)
def _saved_images(path: str, column: str | None):
    """An image column of a saved dataset as its memory-mapped Arrow array (``{bytes, path}`` as stored): a row is
    read without `datasets`' per-row formatting and decoding."""
    ds = saved_dataset(path)
    column = column or image_column(list(ds.features))
    if column is None or column not in ds.features:
        return None
    # a saved dataset is stored flat; one with an indices mapping (a selection) is flattened once
    return (ds if ds._indices is None else ds.flatten_indices()).data.table.column(column)


def saved_dataset_image(path: str, row: int, column: str | None = None) -> bytes:
    images = _saved_images(path, column)
    if images is None or not 0 <= row < len(images):
        raise StoreError(f"{path} has no image at row {row}")
    data = image_bytes(images[row].as_py())
    if data is None:
        raise StoreError(f"no image bytes (row {row} of {path})")
    return data


def is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and (path / "state.json").is_file() and (path / "dataset_info.json").is_file()


def is_store(path: Path) -> bool:
    return path.suffix in (".tar", ".parquet") or is_saved_dataset(path)


def stores_folder(paths: list[Path]) -> Path | None:
    """The folder all of ``paths`` (stores) lie under, the root their locators are relative to; None for none."""
    folders = [os.path.dirname(os.path.abspath(p)) for p in paths]
    return Path(os.path.commonpath(folders)) if folders else None


def store_name(path: Path, root: Path | None) -> str:
    """A store's name in its locators and ids: its path relative to ``root`` (`stores_folder`), else its name."""
    if root is None:
        return path.name
    return Path(os.path.relpath(os.path.abspath(path), root)).as_posix()


def store_root(paths: list[Path]) -> Path | None:
    """The image root of ``paths`` when every input is a store: the folder they all lie under (`stores_folder`);
    else None."""
    if not paths or not all(map(is_store, paths)):
        return None
    return stores_folder(paths)
