"""VisMin's training set as released (github.com/rabiulcste/vismin, README "Dataset"; written by
``data_maker/prepare_hn_data_clip.py``): a JSON list (``train.json``), or JSON Lines (its per-category files), of
samples with ``image_path``, ``caption``, ``image_id``, ``source`` and ``negatives``: one dict per edit with
``edited_image_path``, ``edited_caption``, ``category`` (object, attribute, counting, relation), ``sub_category``,
``input_phrase``, ``edited_phrase`` and ``edit_id``; some samples add ``region_negatives`` (crops of the edited
regions with a phrase each).

Each sample is one record; each entry of ``negatives`` one negative with its own picture (``kind`` its category,
every field of the entry kept). ``region_negatives`` and every other field stay in the record's fields. The image
paths are written from the root of VisMin's data folder (``/coco/images/train2017/...``): they are read under
``--images`` (`base.relative_name`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from .base import FormatNeeds, PeerNegative, PeerOptions, PeerRecord, checked_records, json_items, relative_name

NEEDS = FormatNeeds(suffixes=(".json", ".jsonl"), pictures="images")


def _items(path: Path) -> Iterator[tuple[dict, object]]:
    """(where, item) for every sample of the file, as the file holds it; a JSONL line that does not parse is an
    item of its own reason."""
    yield from json_items(path, "; is it VisMin's train.json?", "VisMin's training JSON is a list of samples")


def read(path: Path, options: PeerOptions) -> Iterator[PeerRecord]:
    for record, item in checked_records(path, _items(path), _problem, "a sample is a JSON object"):
        if item is not None:
            record.caption, record.image = item["caption"], relative_name(item["image_path"])
            record.fields = {k: v for k, v in item.items() if k != "negatives"}
            record.negatives = [_negative(n) for n in item["negatives"]]
        yield record


def _problem(item: dict) -> str | None:
    if not isinstance(item.get("image_path"), str) or not item["image_path"].strip():
        return "no image_path"
    if not isinstance(item.get("negatives"), list) or not item["negatives"]:
        return "no negatives (an empty or missing list)"
    return None


def _negative(entry) -> PeerNegative:
    if not isinstance(entry, dict):
        return PeerNegative("", error=f"a negative is a JSON object; this one is a {type(entry).__name__}")
    negative = PeerNegative(entry.get("edited_caption") if isinstance(entry.get("edited_caption"), str) else "",
                            kind=str(entry.get("category", "")) or None, fields=dict(entry))
    path = entry.get("edited_image_path")
    if not negative.caption.strip():
        negative.error = "no edited_caption"
    elif not isinstance(path, str) or not path.strip():
        negative.error = "no edited_image_path"
    else:
        negative.image = relative_name(path)
    return negative
