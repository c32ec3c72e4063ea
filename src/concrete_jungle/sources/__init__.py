"""Caption sources: read the caption files users have into one stream of `CaptionSample`s.

One module per format, each with ``read(file, options)`` yielding samples (and, for JSON formats, ``looks_like(data)``
for detection); detected from the file, or set with ``--format``:

- ``karpathy``: COCO/Flickr Karpathy split file (``dataset_coco.json``);
- ``coco``: COCO ``captions_*.json``;
- ``sugarcrepe``: the official SugarCrepe JSON (positives, de-duplicated);
- ``jsonl``: one object per line with ``id`` and ``caption`` or ``captions``, optional ``image``;
- ``csv``: a header with ``id``, one or more ``caption*`` columns, optional ``image``;
- ``webdataset``: tar shards as img2dataset writes them (``KEY.jpg``, ``KEY.txt``, ``KEY.json``);
- ``parquet``: Parquet with the image bytes inside (img2dataset, the Hugging Face Hub);
- ``hf``: a ``datasets.save_to_disk`` folder.

The three stores hold their images: a sample names its image by a locator inside the store (`stores`), and no
``--images`` folder is needed. Inputs may use brace notation (``shards/{000000..000099}.tar``); a folder is read
for every caption file and store in it (img2dataset's metadata Parquet and ``_stats.json`` beside a shard are the
shard's, not inputs); a file named twice (a folder and a shard in it) is read once.

A new format is a module here with the same ``read`` and an entry in `READERS`. A file that cannot be read
raises `SourceError` naming the file and the fix. A single bad record (a malformed JSONL line, a record without
captions, text that is not UTF-8, a sample of a damaged shard) is yielded with ``error`` set, so the caller can log
it as skipped and go on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from . import coco, csv_table, hf, jsonl, karpathy, parquet, stores, sugarcrepe, webdataset
from .base import (
    CaptionSample,
    ReadOptions,
    SourceError,
    SourceFile,
    UnsafePathError,
    anchor_caption,
    expand_named,
    join_under,
)

__all__ = ["FORMATS", "CaptionSample", "SourceError", "UnsafePathError", "anchor_caption", "expand_paths",
           "join_under", "read_samples"]

READERS = {"karpathy": karpathy, "coco": coco, "sugarcrepe": sugarcrepe, "jsonl": jsonl, "csv": csv_table,
           "webdataset": webdataset, "parquet": parquet, "hf": hf}
FORMATS = tuple(READERS)
STORES = ("webdataset", "parquet", "hf")  # files read on their own: an engine may read them in parallel
JSON_FORMATS = ("coco", "karpathy", "sugarcrepe")  # detection order of a .json file's content


def _kind_from_suffix(path: Path) -> str:
    """The format from the extension (a saved dataset: its folder); ``json`` means the content decides (see
    `_json_kind`)."""
    if stores.is_saved_dataset(path):
        return "hf"
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        return suffix[1:]
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix == ".tar":
        return "webdataset"
    if suffix == ".parquet":
        return "parquet"
    raise SourceError(f"cannot detect the format of {path} from its extension; set --format to one of {FORMATS}")


def _json_kind(file: SourceFile) -> str:
    data = file.json
    for kind in JSON_FORMATS:
        if READERS[kind].looks_like(data):
            return kind
    keys = sorted(data)[:8] if isinstance(data, dict) else type(data).__name__
    raise SourceError(
        f"cannot detect the caption format of {file.path} (top level: {keys}); expected a Karpathy split file "
        f"(images[].sentences), COCO captions (images + annotations) or SugarCrepe JSON; "
        f"set --format to one of {FORMATS}"
    )


INPUT_SUFFIXES = (".json", ".jsonl", ".csv", ".tsv", ".tar", ".parquet")
STATS = "_stats.json"  # img2dataset's counts of a shard, beside it


def expand_paths(paths: list[str | Path]) -> list[Path]:
    """The distinct input files of ``paths`` in the order first named: files named directly (brace notation
    expanded), plus every input inside a named directory (sorted); a saved Hugging Face dataset is its folder. A file
    named twice (a folder and a shard in it, one file by two paths) is read once."""
    def found_at(p: Path) -> list[Path]:
        if stores.is_saved_dataset(p):
            return [p]
        if p.is_dir():
            return _folder_inputs(p)
        if p.exists():
            return [p]
        raise SourceError(f"captions file not found: {p}")

    return expand_named(paths, found_at)


def _folder_inputs(folder: Path) -> list[Path]:
    """The caption files and stores in ``folder``, sorted, without img2dataset's metadata beside its shards
    (``00000.parquet`` beside ``00000.tar``, ``00000_stats.json`` beside either): those are the shard's, not
    inputs."""
    if (folder / "dataset_dict.json").is_file():
        try:
            splits = list(json.loads((folder / "dataset_dict.json").read_text(encoding="utf-8"))["splits"])
        except (ValueError, KeyError, TypeError):
            splits = sorted(q.name for q in folder.iterdir() if stores.is_saved_dataset(q))
        raise SourceError(f"{folder} holds a DatasetDict (splits {', '.join(map(str, splits))}), not one dataset; "
                          f"pass one split's folder: {folder}/{splits[0] if splits else '<split>'}")
    found = sorted(q for q in folder.iterdir() if q.suffix.lower() in INPUT_SUFFIXES or stores.is_saved_dataset(q))
    shards = {q.stem for q in found if q.suffix == ".tar"}
    stored = shards | {q.stem for q in found if q.suffix == ".parquet"}
    found = [q for q in found if not (q.suffix == ".parquet" and q.stem in shards)
             and not (q.name.endswith(STATS) and q.name[: -len(STATS)] in stored)]
    if not found:
        raise SourceError(f"directory {folder} holds no caption file or store (.json, .jsonl, .csv, .tar, .parquet, a "
                          "save_to_disk folder)")
    return found


def read_samples(paths: list[str | Path], fmt: str | None = None, split: str | None = None,
                 columns: dict[str, str] | None = None, map_files=None) -> Iterator[CaptionSample]:
    """All samples of ``paths`` in file order. ``split`` filters Karpathy files (``train`` or ``train,restval``);
    ``columns`` names a store's caption, image and id columns. ``map_files``: an engine's way of reading the store
    files (WebDataset, Parquet, saved datasets) elsewhere and in parallel: it takes the `read_store_file` tasks
    and yields their results in order; the samples are the same as read here."""
    if fmt is not None and fmt not in FORMATS:
        raise SourceError(f"unknown format {fmt!r}; choose one of {FORMATS}")
    unknown = sorted(set(columns or {}) - {"caption", "image", "id"})
    if unknown:
        raise SourceError(f"--columns: unknown {unknown}; name caption, image or id, e.g. caption=text")
    files = expand_paths(paths)
    kinds = [fmt or _kind_from_suffix(path) for path in files]
    # the stores' locators are relative to the folder they all lie under: same-named stores in two folders differ
    root = stores.stores_folder([path for kind, path in zip(kinds, files) if kind in STORES])
    options = ReadOptions(split=split, columns=dict(columns or {}), root=root)
    stored = [(kind, str(path), split, options.columns, root and str(root)) for kind, path in zip(kinds, files)
              if kind in STORES]
    parts = iter(map_files(stored)) if map_files is not None and stored else None
    for kind, path in zip(kinds, files):
        file = SourceFile(path)
        if kind == "json":
            kind = _json_kind(file)
        if split is not None and kind != "karpathy":  # other formats have no split: it would be ignored
            raise SourceError(f"--split {split} chooses images of a Karpathy split file; {path} is {kind}, which has "
                              "no splits: leave out --split (or pass the split's own file)")
        if parts is not None and kind in STORES:  # read elsewhere, put in order here
            read = next(parts)
            samples = webdataset.name_repeated(iter(read), stores.store_name(path, root), options.seen_ids) \
                if kind == "webdataset" else (sample for sample, _ in read)
        else:
            samples = READERS[kind].read(file, options)
        yield from map(_valid_text, samples)


def read_store_file(task: tuple) -> list[tuple[CaptionSample, bool]]:
    """One store file's samples, read on their own (in any process: an engine's worker): ``task`` is (format, path,
    split, columns) and, last, the folder the stores of the read lie under (`stores.stores_folder`; without it the
    store is named by its file name); each sample comes with whether a repeated WebDataset key renames it
    (`read_samples` does, in file order)."""
    kind, path, split, columns, root = (*task, None)[:5]
    root = Path(root) if root else None
    if kind == "webdataset":
        return list(webdataset.read_shard(Path(path), columns.get("caption"), stores.store_name(Path(path), root)))
    options = ReadOptions(split=split, columns=dict(columns), root=root)
    return [(sample, False) for sample in READERS[kind].read(SourceFile(Path(path)), options)]


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _valid_text(sample: CaptionSample) -> CaptionSample:
    """The sample, or a skipped one when its text cannot be written as UTF-8: JSON may escape a lone surrogate
    (``"\\ud800"``), which no UTF-8 file can hold. Its id is kept readable, the surrogate written as an escape."""
    if sample.error is None and not all(map(_encodable, [sample.id, sample.image or "", *sample.captions])):
        return CaptionSample(sample.id.encode("utf-8", "backslashreplace").decode("utf-8"),
                             error="not valid Unicode text (a lone surrogate such as \\ud800)")
    return sample
