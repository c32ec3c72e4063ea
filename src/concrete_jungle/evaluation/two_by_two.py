"""Benchmarks of two images and two captions, caption k true of image k (Winoground's form, which BiVLC,
VisMin-bench and NaturalBench-Retrieval share): the four similarities, the scores their official evaluations
compute, each item's chance of them, and the reading of their released files.

The similarity s(c, i) of caption c and image i is its own fp32 dot product of the two normalised features, so
two equal captions (or one image file named twice) score exactly alike. Every official evaluation of the three
compares with a strict ``>``, so a tie is wrong:

- image k picks its caption when s(k, k) > s(1 - k, k); the *text score* (BiVLC's I2T): both images do;
- caption k picks its image when s(k, k) > s(k, 1 - k); the *image score* (BiVLC's T2I): both captions do;
- the *group score*: both.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from ..outcomes import reported, series
from .chance import reading
from .checks import BenchmarkDataError, check_images, numbered_lines, shown, text_of
from .encoding import Crop, Encoder
from .validity import MICRO, averages, blind, blind_block, mean_picture

IMAGE_TO_TEXT = ("image_0", "image_1", "text")  # the answers of an image choosing between the two captions


class Pair(NamedTuple):
    """One item: its key, two images (a `Crop` where the official code converts to RGB first, else the file as
    opened), caption k true of image k, and the category it is reported under (None: in the scores over all items
    only)."""

    key: str
    images: tuple[Path | Crop, Path | Crop]
    captions: tuple[str, str]
    category: str | None


def path_of(image: Path | Crop) -> Path:
    return image.path if isinstance(image, Crop) else image


def features(encoder: Encoder, items: list[Pair]) -> tuple[list, list]:
    """The features of every item's image k (``images[k]``, a row an item) and caption k (``texts[k]``)."""
    return ([encoder.images([it.images[k] for it in items]) for k in (0, 1)],
            [encoder.texts([it.captions[k] for it in items]) for k in (0, 1)])


def scores(images, texts) -> np.ndarray:
    """``s[n, c, i]``: caption c of item n against its image i, from the features of `features`."""
    s = np.empty((len(texts[0]), 2, 2), dtype=np.float32)
    for c in (0, 1):
        for i in (0, 1):
            s[:, c, i] = (texts[c] * images[i]).sum(-1).numpy()
    return s


def similarities(encoder: Encoder, items: list[Pair]) -> np.ndarray:
    """``s[n, c, i]``: item n's caption c against its image i."""
    if not items:
        return np.empty((0, 2, 2), dtype=np.float32)
    return scores(*features(encoder, items))


def answers(s: np.ndarray) -> dict[str, np.ndarray]:
    """Each item's 0/1 answer per score, from its similarities ``s[n, c, i]`` (strict: a tie is wrong)."""
    picks = {"image_0": s[:, 0, 0] > s[:, 1, 0], "image_1": s[:, 1, 1] > s[:, 0, 1],  # an image picks its caption
             "caption_0": s[:, 0, 0] > s[:, 0, 1], "caption_1": s[:, 1, 1] > s[:, 1, 0]}  # a caption its image
    text = picks["image_0"] & picks["image_1"]
    image = picks["caption_0"] & picks["caption_1"]
    return picks | {"text": text, "image": image, "group": text & image}


def chances(item: Pair) -> dict[str, float]:
    """The item's chance of each answer of `answers` when every distinct text and image scores at random (docs/
    method.md §7): two captions that read alike, or one image file named twice, tie every comparison between them,
    which the strict rule counts wrong; otherwise a pick is right 1 time in 2, the text and the image score 1 in 4
    (two independent halves) and the group 1 in 6 (s(0, 0) and s(1, 1) the largest two of the four)."""
    same_captions = reading(item.captions[0]) == reading(item.captions[1])
    same_images = path_of(item.images[0]) == path_of(item.images[1])
    if same_captions or same_images:
        pick = {"image": 0.0 if same_captions else 0.5, "caption": 0.0 if same_images else 0.5}
        return {f"{side}_{k}": pick[side] for side in pick for k in (0, 1)} | {"text": 0.0, "image": 0.0,
                                                                                   "group": 0.0}
    return {"image_0": 0.5, "image_1": 0.5, "caption_0": 0.5, "caption_1": 0.5, "text": 1 / 4, "image": 1 / 4,
            "group": 1 / 6}


def units(items: list[Pair]) -> dict[str, str]:
    """Each item's unit of resampling (`stats`): items that share an image, directly or through others, are one
    unit (their answers are not independent), named by the first of its images (folder and file name)."""
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.setdefault(name, name) != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    def name(image) -> str:
        return "/".join(path_of(image).parts[-2:])

    for it in items:
        a, b = root(name(it.images[0])), root(name(it.images[1]))
        parent[max(a, b)] = min(a, b)
    return {it.key: root(name(it.images[0])) for it in items}


def outcomes(items: list[Pair], flags: dict[str, np.ndarray], names: dict[str, str]) -> dict:
    """Series of every answer in ``names`` (answer -> reported name) over all items and per category
    (``<category>/<name>``), each a mean of its items."""
    unit = units(items)
    categories: dict[str, list[int]] = {}
    for n, it in enumerate(items):
        if it.category is not None:
            categories.setdefault(it.category, []).append(n)
    rows = {"": list(range(len(items)))} | {f"{c}/": r for c, r in categories.items()}
    answers_ = {f"{prefix}{shown_name}": series([items[r].key for r in picked], [unit[items[r].key] for r in picked],
                                                flags[answer][picked].tolist())
                for prefix, picked in rows.items() for answer, shown_name in names.items()}
    return {"series": answers_, "metrics": {name: {"mean": name} for name in answers_}}


def item_chances(items: list[Pair], names: dict[str, str]) -> dict[str, list[tuple[str, float]]]:
    """Per series of `outcomes`: each item's key and chance, in the series' order."""
    odds = [chances(it) for it in items]
    out: dict[str, list[tuple[str, float]]] = {}
    for it, odd in zip(items, odds):
        for answer, shown_name in names.items():
            out.setdefault(shown_name, []).append((it.key, odd[answer]))
            if it.category is not None:
                out.setdefault(f"{it.category}/{shown_name}", []).append((it.key, odd[answer]))
    return out


def evaluate(encoder: Encoder, data: dict, names: dict[str, str], overall: str = "", per_category: bool = True,
             percent_decimals: int | None = None) -> dict:
    """The scores ``names`` (answer -> reported name) over all items (named ``<overall><name>``, ``overall`` a
    prefix such as ``micro/``) and, with ``per_category``, per category and their mean over the categories
    (``macro/<name>``; with ``percent_decimals``, each category's score rounded to that many decimals of a percent
    first, as VisMin's official script rounds them, and the mean of the unrounded scores beside it as ``macro/<name>
    (unrounded)``), with ``outcomes`` per item (`stats`), the labelled averages and the blind baseline
    (``blind``: both images of every item replaced by the mean picture, for the answers of an image choosing between
    the captions, `IMAGE_TO_TEXT`; the text score is 0 there by construction, one picture cannot prefer each caption
    in turn; the answers of a caption choosing between the images are ``not_applicable``)."""
    items = [it for rows in data["items"].values() for it in rows]
    categories = list(dict.fromkeys(it.category for it in items if it.category is not None))

    def shaped(answers: dict[str, np.ndarray], shown_names: dict[str, str]) -> dict:
        out = outcomes(items, answers, shown_names)
        if not per_category:  # one set: its per-category series would repeat the overall ones
            return {part: {k: v for k, v in out[part].items() if k in shown_names.values()}
                    for part in ("series", "metrics")}
        for name in shown_names.values():
            if overall:
                out["metrics"][f"{overall}{name}"] = out["metrics"].pop(name)
            out["metrics"][f"macro/{name}"] = {"macro": [f"{c}/{name}" for c in categories]}
            if percent_decimals is not None:
                for c in categories:
                    out["metrics"][f"{c}/{name} (unrounded)"] = {"mean": f"{c}/{name}", "part": True}
                    out["metrics"][f"{c}/{name}"]["percent_decimals"] = percent_decimals
                out["metrics"][f"macro/{name} (unrounded)"] = {"macro": [f"{c}/{name} (unrounded)"
                                                                         for c in categories]}
        return out

    images, texts = features(encoder, items) if items else ([], [])
    model = shaped(answers(scores(images, texts) if items else np.empty((0, 2, 2))), names)
    result = {"metrics": reported(model), "n": {c: len(rows) for c, rows in data["items"].items()},
              "skipped": data["skipped"], "outcomes": model}
    if per_category:
        result["averages"] = averages(model["metrics"]) | {f"{overall}{name}": MICRO for name in names.values()}
    if items:
        pictures = [path_of(it.images[k]) for k in (0, 1) for it in items]
        mean = mean_picture(torch.cat(images), pictures)
        seen = blind(lambda picture, *captions: scores((picture, picture), captions), mean, len(items), *texts)
        blind_outcomes = shaped(answers(seen), {a: n for a, n in names.items() if a in IMAGE_TO_TEXT})
        unseen = [m for m in result["metrics"] if m not in blind_outcomes["metrics"]]
        result["blind"] = blind_block(blind_outcomes, len(set(pictures)), not_applicable=unseen)
    return result


def checked(data: dict[str, list[Pair]], files: dict[Path, str], layout: str, skip_missing: bool) -> dict:
    """Items per category whose two images are usable (`checks.check_images`: every image read before any model
    loads), how many were skipped per category, and the digest of every file read."""
    problems, sha256 = check_images([path_of(image) for items in data.values() for it in items
                                     for image in it.images], layout, skip_missing)
    usable = {c: [it for it in items if not any(path_of(i) in problems for i in it.images)]
              for c, items in data.items()}
    return {"items": usable, "skipped": {c: len(data[c]) - len(usable[c]) for c in data},
            "files": files | sha256}


def key_of(value, path: Path, where: str, field: str, layout: str) -> str:
    """An item's key: a whole number or a text, as the released file gives it."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BenchmarkDataError(f"{path}: {where} has {field} {shown(value)}, not a whole number or a text; "
                                 f"expected layout: {layout}")
    return str(value)


def written_from_release(folder: Path, write, split: str = "test") -> list[str]:
    """``folder/examples.jsonl`` and ``folder/images/``: written once by ``write(rows, folder)`` from the Hugging Face
    download in ``folder`` (`release_rows` of ``split``) when the file is not there yet; a note saying so, or none."""
    if (folder / "examples.jsonl").is_file():
        return []
    rows, files = release_rows(folder, split)
    if not rows:
        return []
    write(rows, folder)
    shown_files = ", ".join(str(p.relative_to(folder)) for p in files[:3]) + (", ..." if len(files) > 3 else "")
    return [f"{folder / 'examples.jsonl'} and images/ were written from the downloaded dataset ({shown_files}), "
            "each image as its bytes are there; delete them to write them again"]


def jsonl_records(path: Path, key: str, fields: tuple[str, ...], layout: str, export: str,
                  noun: str = "item") -> list[dict]:
    """The objects of a JSON-lines file as released, each with a ``key`` unique as text (`key_of`: a whole number
    or a text) and every one of ``fields`` a text; an error naming the file, the line and the field otherwise
    (``export``: how to write the file; ``noun``: what the benchmark calls a record)."""
    if not path.is_file():
        raise BenchmarkDataError(f"{path} not found; expected layout: {layout} ({export})")
    records, lines = [], {}
    for n, line in numbered_lines(path):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise BenchmarkDataError(f"{path}, line {n}: not valid JSON ({e.msg}); expected layout: {layout}") from None
        if not isinstance(record, dict):
            raise BenchmarkDataError(f"{path}, line {n}: {shown(record)} is not an object; expected layout: {layout}")
        text = key_of(record.get(key), path, f"line {n}", key, layout)
        if text in lines:
            raise BenchmarkDataError(f"{path}: {key} {text} is on lines {lines[text]} and {n}; each {noun} needs a "
                                     "key of its own (results match items by it)")
        lines[text] = n
        for field in fields:
            text_of(record.get(field), path, f"line {n}", field)
        records.append(record)
    if not records:
        raise BenchmarkDataError(f"{path} holds no {noun}s; expected layout: {layout}")
    return records


def release_rows(folder: Path, split: str) -> tuple[list[dict], list[Path]]:
    """The rows of split ``split`` of a Hugging Face dataset downloaded under ``folder`` as the Hub gives it, read
    offline with pyarrow alone (no file's bytes reach pickle, NumPy or torch; an image stays ``{"bytes", "path"}``),
    and the files read: the split's Parquet files (``<split>-*.parquet`` or ``<split>/*.parquet``, anywhere below, in
    name order), or a ``save_to_disk`` folder's (``dataset_dict.json`` with ``<split>/``, its Arrow files in the order
    of its ``state.json``). ``([], [])`` when neither is there."""
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    def of_split(p: Path) -> bool:
        return p.name.startswith(f"{split}-") or p.stem == split or p.parent.name == split

    def read(path: Path, table) -> list[dict]:
        try:
            return table(path).to_pylist()
        except (OSError, ValueError) as e:  # pyarrow's errors are both
            raise BenchmarkDataError(f"{path} is not a readable file of the dataset ({e}); download it again") from None

    def stream(path: Path):
        with ipc.open_stream(path) as reader:  # save_to_disk writes Arrow's streaming format
            return reader.read_all()

    parquet = sorted(p for p in folder.rglob("*.parquet") if of_split(p))
    if parquet:
        return [row for p in parquet for row in read(p, pq.read_table)], parquet
    for index in sorted(folder.rglob("dataset_dict.json")):
        part = index.parent / split
        state = part / "state.json"
        try:
            names = [f["filename"] for f in json.loads(state.read_text(encoding="utf-8"))["_data_files"]]
        except (OSError, ValueError, KeyError, TypeError):
            names = sorted(p.name for p in part.glob("*.arrow"))
        files = [part / name for name in names]
        if files:
            return [row for path in files for row in read(path, stream)], files
    return [], []


EXTENSIONS = {"JPEG": ".jpg", "PNG": ".png", "WEBP": ".webp", "GIF": ".gif", "BMP": ".bmp", "TIFF": ".tif"}


def save_image(value: dict, folder: Path) -> str:
    """Write an image of a Hugging Face dataset read without decoding (``{"bytes", "path"}``) into ``folder`` as its
    bytes are, so the evaluation decodes the very file the official code decodes; named by its content (one picture
    of several items is one file). Returns the file name."""
    from io import BytesIO

    from PIL import Image

    data = value.get("bytes")
    if data is None:
        data = Path(value["path"]).read_bytes()
    with Image.open(BytesIO(data)) as image:
        extension = EXTENSIONS.get(image.format or "", ".img")
    name = hashlib.sha256(data).hexdigest()[:20] + extension
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / name).exists():
        (folder / name).write_bytes(data)
    return name
