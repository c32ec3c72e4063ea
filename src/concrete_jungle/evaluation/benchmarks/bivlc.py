"""BiVLC (Miranda et al. 2024, "BiVLC: Extending Vision-Language Compositionality Evaluation with Text-to-Image
Retrieval"): 2,933 items of a COCO val2017 image and caption, SugarCrepe's negative caption and a negative image
generated from it, so that each item is scored both ways, image to text and text to image.

Data: the Hugging Face dataset ``imirandam/BiVLC`` (split ``test``; fields ``image``, ``caption``, ``negative_caption``,
``negative_image``, ``type`` (replace, swap, add), ``subtype`` (obj, att, rel)), downloaded into ``<root>/bivlc/`` (its
Parquet files) and read there offline with pyarrow (`two_by_two.release_rows`; or from the Hub by `export_hf`), written
once into ``<root>/bivlc/examples.jsonl`` (one object a line: ``id`` (the row's index in the dataset), ``caption``,
``negative_caption``, ``image``, ``negative_image`` (file names under ``<root>/bivlc/images/``), ``type``, ``subtype``),
each image as its bytes are in the dataset.

The official rule (github.com/IMirandaM/BiVLC, ``main_evaluation_BiVLC.py`` and ``evaluate_BiVLC`` in
``src/CLIP_fine_tuning/CLIP_utils.py``, commit 776023d): each image converted to RGB before the transform
(``preprocess(image.convert("RGB"))``), normalised features, and per item, with s(c, i) caption c against image i
(0 the positive, 1 the negative) and a strict ``>`` (a tie is wrong): Ipos_2T = s(0, 0) > s(1, 0), Ineg_2T =
s(1, 1) > s(0, 1), Tpos_2I = s(0, 0) > s(0, 1), Tneg_2I = s(1, 1) > s(1, 0); I2T = Ipos_2T and Ineg_2T, T2I =
Tpos_2I and Tneg_2I, group = I2T and T2I (`two_by_two`). Reported as the official script prints them: each score's
mean over all items (micro), and per ``type`` (replace, swap, add) the mean over that type's items; beside them,
labelled ``macro/``, the mean of the types' scores (not an official number). Items that share an image are one unit
of resampling (`two_by_two.units`).
"""

from __future__ import annotations

from pathlib import Path

from ...records import atomic_write_jsonl, file_digest
from .. import two_by_two
from ..checks import BenchmarkDataError, image_path
from ..encoding import Crop, Encoder
from ..two_by_two import Pair

LAYOUT = ("<root>/bivlc/ holding the dataset imirandam/BiVLC as downloaded (huggingface-cli download imirandam/BiVLC "
          "--repo-type dataset --local-dir <root>/bivlc: its test split's Parquet files), from which "
          "<root>/bivlc/examples.jsonl (id, caption, negative_caption, image, negative_image, type, subtype) and "
          "<root>/bivlc/images/ are written once")
EXPORT = ("download the dataset there, or write it from the Hub with "
          "concrete_jungle.evaluation.benchmarks.bivlc.export_hf")
TYPES = ("replace", "swap", "add")  # the official script's order
# answer of `two_by_two.answers` -> the official name
NAMES = {"image_0": "Ipos_2T", "image_1": "Ineg_2T", "caption_0": "Tpos_2I", "caption_1": "Tneg_2I", "text": "I2T",
         "image": "T2I", "group": "group"}


def export_hf(root: str | Path) -> Path:
    """Write ``imirandam/BiVLC`` (split test) into ``root`` (needs `datasets` and the Hub)."""
    try:
        from datasets import Image, load_dataset
    except ImportError:
        raise BenchmarkDataError("loading BiVLC from the hub needs `pip install datasets`") from None
    rows = load_dataset("imirandam/BiVLC", split="test")
    for column in ("image", "negative_image"):
        rows = rows.cast_column(column, Image(decode=False))  # the bytes as published, not a re-encoded picture
    return write_layout(rows, root)


def write_layout(rows, root: str | Path) -> Path:
    """``root/examples.jsonl`` and ``root/images/`` from the dataset's rows, in order (``id`` = the row index), each
    image as ``{"bytes", "path"}`` (`two_by_two.save_image`)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    records = []
    for n, row in enumerate(rows):
        files = {k: two_by_two.save_image(row[k], root / "images") for k in ("image", "negative_image")}
        records.append({"id": n, "caption": row["caption"], "negative_caption": row["negative_caption"]} | files
                       | {"type": row["type"], "subtype": row["subtype"]})
    atomic_write_jsonl(root / "examples.jsonl", records)  # last: a run stopped midway leaves no examples.jsonl
    return root


def load(root: str | Path, skip_missing: bool = False) -> dict:
    """Items per type, every image checked before any model loads; from the dataset as downloaded into ``root``
    (`two_by_two.written_from_release`) when ``examples.jsonl`` is not there."""
    root = Path(root)
    notes = two_by_two.written_from_release(root, write_layout)
    path = root / "examples.jsonl"
    records = two_by_two.jsonl_records(path, "id", ("caption", "negative_caption", "image", "negative_image", "type"),
                                       LAYOUT, EXPORT)
    data: dict[str, list[Pair]] = {}
    for r in records:
        images = tuple(Crop(image_path(root / "images", r[k])) for k in ("image", "negative_image"))
        pair = Pair(str(r["id"]), images, (r["caption"], r["negative_caption"]), r["type"])
        data.setdefault(r["type"], []).append(pair)
    order = [t for t in TYPES if t in data] + sorted(t for t in data if t not in TYPES)
    return two_by_two.checked({t: data[t] for t in order}, {path: file_digest(path)}, LAYOUT, skip_missing) | {
        "notes": notes}


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """`load` of ``<root>/bivlc``."""
    return load(Path(root) / "bivlc", skip_missing=skip_missing)


def evaluate(encoder: Encoder, data: dict) -> dict:
    """I2T, T2I, group and their four parts over all items and per type, their macro means over the types and the
    blind baseline (`two_by_two.evaluate`)."""
    return two_by_two.evaluate(encoder, data, NAMES)


def item_chances(data: dict) -> dict:
    """Each item's chance of every score (`two_by_two.chances`)."""
    return two_by_two.item_chances([it for rows in data["items"].values() for it in rows], NAMES)
