"""CE-CLIP's COCO hard negatives as its ``data/prepare_dataset.sh`` writes them (github.com/lezhang7/
Enhance-FineGrained, ``data/dataset.py``): ``generated_data/coco_train/processed_dataset<i>.npy``, NumPy arrays
of COCO caption annotations (``image_id``, ``id``, ``caption``) each with four rewritten captions --
``relation_aug_caption`` (two nouns swapped; ``###`` when the caption has too few), ``adj_aug_caption``,
``noun_aug_caption`` and ``verb_aug_caption`` (one word masked and refilled by a masked language model) -- and
``valid_caption``, five flags (the caption and the four, in that order) that mark the rewrites to use. Its
trainer (``src/training/data.py`` ``NpyDataset``, the version that read these files) takes the image
``<split>/COCO_<split>_<image_id, 12 digits>.jpg`` with ``val2014`` when the file's path holds ``val``, else
``train2014``: the same name is read under ``--images``.

Each annotation is one record with a caption-only negative per valid rewrite (``kind``: relation, adj, noun,
verb); the whole annotation is kept in the record's fields. The same records as a JSON list or JSON Lines are
read too.

The ``.npy`` files hold Python objects, which NumPy stores with pickle; unpickling runs whatever the file names,
and NumPy builds arrays from whatever state the file gives. They are read by `object_npy`, which parses the
header itself and unpickles with stand-ins that build plain Python values and refuse anything else, so a file
made to run code or to corrupt memory is a `SourceError`, and no byte of it reaches NumPy.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from .base import FormatNeeds, PeerNegative, PeerOptions, PeerRecord, checked_records, json_items
from .object_npy import load_object_array

KINDS = ("relation", "adj", "noun", "verb")  # the order of valid_caption[1:] and of CE-CLIP's batch
NEEDS = FormatNeeds(suffixes=(".npy", ".json", ".jsonl"), pictures="images", slot_types=KINDS)
NO_CAPTION = "###"  # what CE-CLIP writes where a caption has no relation rewrite


def _items(path: Path) -> Iterator[tuple[dict, object]]:
    if path.suffix.lower() == ".npy":
        for index, item in enumerate(load_object_array(path)):
            yield {"file": str(path), "index": index}, item
        return
    yield from json_items(path, "", "CE-CLIP's records are a list")


VAL = re.compile(r"(?<![a-z])val", re.IGNORECASE)  # "val2014", "coco_val", "val/"; not "interval/"


def image_name(path: Path, image_id: int) -> str:
    """CE-CLIP's image of an annotation (its trainer's rule, the split from the records file's path, taken where
    "val" begins a word of it, so that a folder such as ``interval/`` does not send a train file to val2014)."""
    split = "val2014" if VAL.search(str(path)) else "train2014"
    return f"{split}/COCO_{split}_{image_id:012d}.jpg"


def read(path: Path, options: PeerOptions) -> Iterator[PeerRecord]:
    for record, item in checked_records(path, _items(path), _problem, "a record is a dict"):
        if item is not None:
            record.caption, record.image, record.fields = item["caption"], image_name(path, item["image_id"]), item
            record.negatives = [PeerNegative(item[f"{kind}_aug_caption"], kind=kind, fields={"valid_position": i + 1})
                                for i, kind in enumerate(KINDS) if item["valid_caption"][i + 1]]
            if not record.negatives:
                record.error = "no valid rewrite (valid_caption marks none of the four)"
        yield record


def _problem(item: dict) -> str | None:
    if not isinstance(item.get("image_id"), int) or isinstance(item["image_id"], bool) or item["image_id"] < 0:
        return f"image_id {item.get('image_id')!r} is not a COCO image id"
    flags = item.get("valid_caption")
    if not isinstance(flags, list) or len(flags) != 1 + len(KINDS) or not all(f in (0, 1) for f in flags):
        return f"valid_caption {flags!r} is not five 0/1 flags"
    for i, kind in enumerate(KINDS):
        caption = item.get(f"{kind}_aug_caption")
        if flags[i + 1] and (not isinstance(caption, str) or not caption.strip() or caption == NO_CAPTION):
            return f"{kind}_aug_caption is marked valid but holds no caption ({caption!r})"
    return None
