"""CountBench (Paiss et al. 2023, "Teaching CLIP to Count to Ten", ICCV): 540 LAION pictures, 60 for each count from
two to ten, each with its caption, which names the count as a word; can the model tell the count from the picture?

Data, either of:

- the release, ``CountBench.json`` of github.com/teaching-clip-to-count/teaching-clip-to-count.github.io (commit
  4c83108): a list of ``{image_url, text, number}``; the pictures are web addresses only, fetched by you into
  ``images/<position>.jpg`` (the item's position in the list, from 0; any picture format under that name);
- the Hugging Face dataset ``nielsr/countbench`` (the same 540 rows with the pictures inside: split train, one
  Parquet file ``data/train-*.parquet`` with ``image_url, text, number, image``), downloaded into the folder and read
  offline with pyarrow (`two_by_two.release_rows`), written once into ``examples.jsonl`` (``id`` (the row's index),
  ``image_url``, ``text``, ``number``, ``image``: a file name under ``images/``, or null for a row without its
  picture) with each picture as its bytes are in the dataset.

The rule, as the counting-CLIP evaluations score a contrastive model (Paiss et al. §4; their code is not published,
the project repository holds the JSON alone; read from github.com/SforAiDl/CountCLIP, the paper's replication,
``model.ipynb`` ``generate_caps`` and ``get_preds``, commit a15672d, and github.com/UW-Madison-Lee-Lab/CLIP_Counting,
``clip_count_utils.py`` ``sentence_augmentation`` and ``run_on_countbench``, commit 9c92400): the caption, lower-cased,
with its count's number word replaced by each of "two" ... "ten" in turn gives nine options; the picture (converted to
RGB first) picks the option it scores highest, the first of equal scores (``argmax``, ``list.index(max)``), so the
predicted count is 2 + its position, and an item is right when that is its ``number``. Both replications replace the
word as a substring (``str.replace``), which also rewrites it inside another word ("ten" in "stencils", in one of the
540 captions, position 33): here only whole words are replaced, every one of them. CountCLIP also cuts each caption to
its first 77 characters, and CLIP_Counting replaces the first number word of the list two ... ten that the caption
holds, not always its own count's (21 captions name another count too): neither is done here. A caption without its
count's word as a whole word has no options: left out, counted and named in a note (the release holds none).

Reported: ``accuracy`` over all items (the papers' counting accuracy), per count ``number/<n>``, and the confusion
matrix (``confusion``: rows the true count, columns the predicted, 2 to 10) with the mean absolute error of the
predicted count, as the replications plot and report them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ...outcomes import reported, series
from ...records import atomic_write_jsonl, file_digest
from .. import two_by_two
from ..chance import pick_chance
from ..checks import BenchmarkDataError, check_images, image_path, items_of, load_json_file, shown, text_of, unit_of
from ..choice import subset_picks
from ..encoding import Crop, Encoder
from ..validity import blind_block

NUMBER_WORDS = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")  # the options' order
COUNTS = range(2, 2 + len(NUMBER_WORDS))
RELEASE = "CountBench.json"
LAYOUT = ("<root>/countbench/ holding the dataset nielsr/countbench as downloaded (huggingface-cli download "
          "nielsr/countbench --repo-type dataset --local-dir <root>/countbench: its train split's Parquet file), from "
          "which <root>/countbench/examples.jsonl (id, image_url, text, number, image) and images/ are written once; "
          f"or the release's {RELEASE} (image_url, text, number) with the pictures fetched by you into "
          "<root>/countbench/images/<position in the list>.jpg")


class Item(NamedTuple):
    key: str  # the row's position in the release
    image: Crop
    options: tuple[str, ...]  # the caption with each count of `COUNTS`, in order
    number: int


def options_of(text: str, number: int) -> tuple[str, ...] | None:
    """The caption, lower-cased, with every whole word of ``number``'s word replaced by each count's word in turn;
    None when the caption holds no such word."""
    lowered = text.lower()
    word = re.compile(rf"\b{NUMBER_WORDS[number - COUNTS[0]]}\b")
    if not word.search(lowered):
        return None
    return tuple(word.sub(w, lowered) for w in NUMBER_WORDS)


def write_layout(rows, folder: Path) -> Path:
    """``folder/examples.jsonl`` and ``folder/images/`` from the dataset's rows, in order (``id`` = the row index),
    each picture as its ``{"bytes", "path"}`` are (`two_by_two.save_image`), null where the row has none."""
    records = []
    for n, row in enumerate(rows):
        picture = row.get("image")
        there = isinstance(picture, dict) and (picture.get("bytes") is not None or picture.get("path"))
        records.append({"id": n, "image_url": row.get("image_url"), "text": row.get("text"),
                        "number": row.get("number"),
                        "image": two_by_two.save_image(picture, folder / "images") if there else None})
    atomic_write_jsonl(folder / "examples.jsonl", records)  # last: a run stopped midway leaves no examples.jsonl
    return folder


def release_records(folder: Path) -> tuple[list[tuple[str, dict, str | None]], Path]:
    """``(key, row, picture file name or None)`` of every row, from ``examples.jsonl`` or the release's JSON (never
    both: two copies), and the file read."""
    written, release = folder / "examples.jsonl", folder / RELEASE
    if written.is_file() and release.is_file():
        raise BenchmarkDataError(f"{folder} holds both {written.name} and {release.name}: two copies of CountBench; "
                                 "keep one")
    if written.is_file():
        rows = two_by_two.jsonl_records(written, "id", ("text",), LAYOUT, "download the dataset there")
        for n, row in enumerate(rows, start=1):
            if row.get("image") is not None:
                text_of(row["image"], written, f"line {n}", "image")
        return [(str(row["id"]), row, row.get("image")) for row in rows], written
    if not release.is_file():
        raise BenchmarkDataError(f"{folder} holds neither {RELEASE} nor the dataset's examples.jsonl; expected "
                                 f"layout: {LAYOUT}")
    rows = items_of(load_json_file(release, LAYOUT), release, dict, LAYOUT)
    for key, row in rows:
        text_of(row.get("text"), release, f"item {key}", "text")
    return [(str(key), row, f"{key}.jpg") for key, row in rows], release


def load(folder: str | Path, skip_missing: bool = False) -> dict:
    """The items whose caption names its count and whose picture is usable (every picture checked before any model
    loads); ``filtered``: items whose caption does not name its count as a word (named in a note); ``skipped``: items
    without a usable picture (a row of the dataset without one is one, as a missing file is)."""
    folder = Path(folder)
    notes = two_by_two.written_from_release(folder, write_layout, split="train")
    records, path = release_records(folder)
    items, unnamed, pictureless = [], [], []
    for key, row, picture in records:
        number = row.get("number")
        if isinstance(number, bool) or not isinstance(number, int) or number not in COUNTS:
            raise BenchmarkDataError(f"{path}: item {key} has number {shown(number)}, not a count from 2 to 10; "
                                     f"expected layout: {LAYOUT}")
        options = options_of(row["text"], number)
        if options is None:
            unnamed.append(key)
        elif picture is None:
            pictureless.append(key)
        else:
            items.append(Item(key, Crop(image_path(folder / "images", picture)), options, number))
    if pictureless and not skip_missing:
        raise BenchmarkDataError(f"{path}: item {pictureless[0]} has no picture (image is null: the dataset's row "
                                 "holds none); pass --skip-missing to count and skip such items")
    problems, sha256 = check_images([it.image.path for it in items], LAYOUT, skip_missing)
    usable = [it for it in items if it.image.path not in problems]
    if unnamed:
        notes.append(f"{len(unnamed)} item(s) left out: the caption does not name its count as a word "
                     f"(item {', '.join(unnamed[:5])}{', ...' if len(unnamed) > 5 else ''})")
    return {"items": usable, "skipped": len(items) - len(usable) + len(pictureless), "filtered": len(unnamed),
            "notes": notes, "files": {path: file_digest(path)} | sha256}


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """`load` of ``<root>/countbench``."""
    return load(Path(root) / "countbench", skip_missing=skip_missing)


def outcomes_of(items: list[Item], right: np.ndarray) -> dict:
    """Series of the answers ``right`` (an item's pick its own count): over all items and per true count."""
    keys, units = [it.key for it in items], [unit_of(it.image.path) for it in items]
    answers = {"accuracy": series(keys, units, right.tolist())}
    for count in COUNTS:
        rows = [n for n, it in enumerate(items) if it.number == count]
        if rows:
            answers[f"number/{count}"] = series([keys[r] for r in rows], [units[r] for r in rows],
                                                right[rows].tolist())
    return {"series": answers, "metrics": {name: {"mean": name} for name in answers}}


def confusion(truth: np.ndarray, predicted: np.ndarray) -> dict:
    """How often each true count (row) was taken for each count (column), and the mean absolute error of the
    predicted count (None without items)."""
    counts = np.zeros((len(COUNTS), len(COUNTS)), dtype=np.int64)
    np.add.at(counts, (truth - COUNTS[0], predicted - COUNTS[0]), 1)
    error = float(np.abs(predicted - truth).mean()) if len(truth) else None
    return {"labels": list(COUNTS), "rows": "true count", "columns": "predicted count", "counts": counts.tolist(),
            "mean_absolute_error": error}


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Counting accuracy overall and per count, the confusion matrix, ``outcomes`` per item (`stats`) and the blind
    baseline (``blind``: every picture replaced by the mean picture, `choice.subset_picks`)."""
    items = data["items"]
    chosen = subset_picks(encoder, {"all": ([it.image for it in items], [list(it.options) for it in items])})
    truth = np.array([it.number for it in items], dtype=np.int64)
    predicted = chosen["picks"]["all"] + COUNTS[0]
    outcomes = outcomes_of(items, predicted == truth)
    blind = outcomes_of(items, chosen["blind"]["all"] + COUNTS[0] == truth)
    return {"metrics": reported(outcomes), "n": len(items), "skipped": data["skipped"], "filtered": data["filtered"],
            "outcomes": outcomes, "confusion": confusion(truth, predicted),
            "blind": blind_block(blind, chosen["pictures"])}


def item_chances(data: dict) -> dict:
    """Each item's chance (`chance.pick_chance`): its own count among the nine options, the first of equals."""
    odds = [(it.key, pick_chance(list(it.options), it.number - COUNTS[0]), it.number) for it in data["items"]]
    out = {"accuracy": [(key, chance) for key, chance, _ in odds]}
    for count in COUNTS:
        picked = [(key, chance) for key, chance, number in odds if number == count]
        if picked:
            out[f"number/{count}"] = picked
    return out
