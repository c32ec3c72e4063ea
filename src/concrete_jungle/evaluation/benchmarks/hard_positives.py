"""Hard Positives (Kamath et al. 2024, "The Hard Positive Truth about Vision-Language Compositionality"): a model that
prefers the caption c to its hard negative c_n should also prefer c_p, c rephrased to stay true, to c_n.

Data: the release (github.com/amitakamath/hard_positives), unchanged: two folders of JSON lists, item k of a file in
``data/`` (the original caption c as ``true_caption``, the hard negative c_n as ``false_caption``) pairing with item
k of the file of the same name in ``swapped_data/`` (the hard positive c_p as ``true_caption`` beside the
negative), each item naming its Visual Genome picture (``image_id``, ``image_path``). REPLACE:
``vl_checklist_attributes.json`` and ``vl_checklist_relations.json``, the whole picture at the ``image_path`` the
file names (``data/VG_100K{,_2}/<id>.jpg``, relative to the release's folder, as the official code opens it);
SWAP: ``visual_genome_attribution.json``, ARO's VG-Attribution format, the picture ``data/images/<image_path>`` cut
to its box (``bbox_x/y/w/h``; a box wholly outside its picture is cut to black pixels and scored so, as the official
code does, and counted, ``boxes_outside_image`` with a note, as ARO's). Each picture is converted to RGB first, as the
release's loaders read it.

The official rule, from the release's ``run_eval.py`` and ``dataset_zoo/aro_datasets.py`` (commit 33addaa): both
files of a pair are scored with the captions in the order [false, true] as cosine similarities, s(·) against the
item's picture; with c_n' the negative of the ``swapped_data/`` item (the same text as c_n in every released REPLACE
item), per item

- **original**: s(c_n) < s(c) (``orig_acc``),
- **hard_positive**: s(c_n') < s(c_p) (``mod_acc``),
- **augmented**: s(c_n') < s(c_p) and s(c_n') < s(c) (the count printed first, "(c, c'') > c'"),
- **brittle**: s(c) > s(c_n') > s(c_p) (printed second, "c > c' > c''"),

every comparison strict, so a tie is wrong. The code prints the counts of the last two; a share is that count over
the file's items. Table 1 of the paper (the README) reports SWAP and REPLACE, REPLACE the mean of its two files:
reported here per file (``swap/augmented``, ...), ``REPLACE/<measure>`` (both REPLACE files read), each measure's
mean over SWAP and REPLACE (``augmented``, the headline; a macro average, over the two whose files were read) and
its mean over all items (``all items (micro)/<measure>``); beside them the blind baseline (`validity.blind`).

One departure: the official code reads the SWAP pictures of ``swapped_data/`` from ``swapped_data/images/``, a second
copy of the same picture archive; here each item's picture is read once, from ``data/images/``, and both files must
name the same picture and box at each position (an error otherwise).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch

from ...outcomes import reported, series
from ...records import file_digest
from ..chance import below_chance, pick_chance
from ..checks import (
    BenchmarkDataError,
    boxes_outside,
    check_images,
    image_path,
    items_of,
    load_json_file,
    pixel_box,
    text_of,
    unit_of,
)
from ..encoding import Crop, Encoder
from ..validity import averages, blind, blind_block, mean_picture

FILES = {"swap": "visual_genome_attribution.json", "replace_att": "vl_checklist_attributes.json",
         "replace_rel": "vl_checklist_relations.json"}
REPLACE = ("replace_att", "replace_rel")
MEASURES = ("original", "hard_positive", "augmented", "brittle")
BOX = ("bbox_x", "bbox_y", "bbox_w", "bbox_h")
LAYOUT = ("<root>/hard_positives/{data,swapped_data}/{visual_genome_attribution,vl_checklist_attributes,"
          "vl_checklist_relations}.json (the hard_positives release; item k of data/ pairs with item k of "
          "swapped_data/), the REPLACE pictures at the image_path the files name under <root>/hard_positives/ "
          "(data/VG_100K/<id>.jpg, data/VG_100K_2/<id>.jpg), the SWAP pictures in "
          "<root>/hard_positives/data/images/<image_path> (ARO's VG images)")


class Item(NamedTuple):
    key: str  # the item's position in both files
    picture: Crop
    caption: str  # c, data/'s true_caption
    negative: str  # c_n, data/'s false_caption
    hard_positive: str  # c_p, swapped_data/'s true_caption
    paired_negative: str  # c_n', swapped_data/'s false_caption


def load(root: str | Path, skip_missing: bool = False) -> dict:
    """Items per subset whose pair of files is in ``root`` (``swap``, ``replace_att``, ``replace_rel``), every
    picture checked before any model loads; ``negatives_differ``: per subset, the items whose two files give the
    negative differently (none in the released REPLACE files)."""
    root = Path(root)
    found = {s: name for s, name in FILES.items() if (root / "data" / name).is_file()}
    if not found:
        raise BenchmarkDataError(f"{root / 'data'} holds none of {', '.join(FILES.values())}; expected layout: "
                                 f"{LAYOUT}")
    items, files = {}, {}
    for subset, name in found.items():
        original, swapped = root / "data" / name, root / "swapped_data" / name
        if not swapped.is_file():
            raise BenchmarkDataError(f"{swapped} not found: {original} is scored against its pair in swapped_data/ "
                                     f"(the hard positives); expected layout: {LAYOUT}")
        pair = [_items(path) for path in (original, swapped)]
        files |= {path: file_digest(path) for path in (original, swapped)}
        if len(pair[0]) != len(pair[1]):
            raise BenchmarkDataError(f"{original} holds {len(pair[0])} items and {swapped} {len(pair[1])}; item k of "
                                     "one pairs with item k of the other: use the release's files unchanged")
        items[subset] = [_item(subset, n, first, second, root, original, swapped)
                         for n, (first, second) in enumerate(zip(*pair))]
    problems, sha256 = check_images([it.picture.path for rows in items.values() for it in rows], LAYOUT, skip_missing)
    usable = {s: [it for it in rows if it.picture.path not in problems] for s, rows in items.items()}
    outside_counts, notes = boxes_outside({s: [(it.key, it.picture) for it in rows] for s, rows in usable.items()})
    return {"items": usable,
            "skipped": {s: sum(it.picture.path in problems for it in rows) for s, rows in items.items()},
            "negatives_differ": {s: sum(it.negative != it.paired_negative for it in rows) for s, rows in items.items()},
            "boxes_outside_image": outside_counts, "notes": notes, "files": files | sha256}


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """`load` of ``<root>/hard_positives``."""
    return load(root / "hard_positives", skip_missing=skip_missing)


def _items(path: Path) -> list[dict]:
    raw = load_json_file(path, LAYOUT)
    if not isinstance(raw, list):
        raise BenchmarkDataError(f"{path}: the release's files are a list of items; expected layout: {LAYOUT}")
    return [item for _, item in items_of(raw, path, dict, LAYOUT)]


def _item(subset: str, n: int, first: dict, second: dict, root: Path, original: Path, swapped: Path) -> Item:
    """Item ``n`` of a pair of files, every field checked as the run uses it, and both naming one picture."""
    fields = ("image_path", "true_caption", "false_caption") + (BOX if subset == "swap" else ())
    for item, path in ((first, original), (second, swapped)):
        missing = [f for f in fields if f not in item]
        if missing:
            raise BenchmarkDataError(f"{path}: item {n} lacks {', '.join(missing)}; every item needs "
                                     f"{', '.join(fields)}")
        for field in ("image_path", "true_caption", "false_caption"):
            text_of(item[field], path, f"item {n}", field)
    if subset == "swap":
        boxes = [pixel_box(item, path, f"item {n}") for item, path in ((first, original), (second, swapped))]
        picture = Crop(image_path(root / "data" / "images", first["image_path"]), boxes[0])
    else:
        boxes = [None, None]
        picture = Crop(image_path(root, first["image_path"]))
    if (first["image_path"], boxes[0]) != (second["image_path"], boxes[1]):
        shown = " and box" if subset == "swap" else ""
        raise BenchmarkDataError(f"{swapped}: item {n} names another picture{shown} than item {n} of {original}; "
                                 "the two files pair item by item: use the release's files unchanged")
    return Item(str(n), picture, first["true_caption"], first["false_caption"], second["true_caption"],
                second["false_caption"])


def judged(pictures: torch.Tensor, caption, negative, hard_positive, paired_negative) -> dict[str, list[bool]]:
    """The rule: per measure, each item's answer from the features of its picture and its four texts (rows), each
    score its own dot product (two equal texts score exactly alike), every comparison strict."""
    c, n, p, n2 = ((pictures * texts).sum(-1) for texts in (caption, negative, hard_positive, paired_negative))
    return {"original": (c > n).tolist(), "hard_positive": (p > n2).tolist(),
            "augmented": ((p > n2) & (c > n2)).tolist(), "brittle": ((c > n2) & (n2 > p)).tolist()}


def recipes(subsets: list[str]) -> dict:
    """Each measure per subset, REPLACE (both its files read), its mean over SWAP and REPLACE and over all items."""
    out = {f"{s}/{m}": {"mean": f"{s}/{m}"} for s in subsets for m in MEASURES}
    replace = all(s in subsets for s in REPLACE)
    if replace:
        out |= {f"REPLACE/{m}": {"macro": [f"{s}/{m}" for s in REPLACE], "complete": True} for m in MEASURES}
    parts = ["swap"] * ("swap" in subsets) + ["REPLACE"] * replace
    out |= {m: {"macro": [f"{part}/{m}" for part in parts]} for m in MEASURES}
    return out | {f"all items (micro)/{m}": {"micro": [f"{s}/{m}" for s in subsets]} for m in MEASURES}


def outcomes_of(data: dict, answers: dict[str, list[bool]]) -> dict:
    """The outcomes of ``answers`` (per measure, every item's, in the subsets' order): a series per subset and
    measure, with the metrics' recipes."""
    out, at = {}, 0
    for subset, rows in data["items"].items():
        keys, units = [it.key for it in rows], [unit_of(it.picture.path) for it in rows]
        for measure in MEASURES:
            out[f"{subset}/{measure}"] = series(keys, units, answers[measure][at: at + len(rows)])
        at += len(rows)
    return {"series": out, "metrics": recipes(list(data["items"]))}


def evaluate(encoder: Encoder, data: dict) -> dict:
    """The four measures per file, REPLACE, their macro and micro averages; ``outcomes`` per item (`stats`); the
    labelled averages (``averages``) and the blind baseline (``blind``)."""
    items = [it for rows in data["items"].values() for it in rows]
    result = {"n": {s: len(rows) for s, rows in data["items"].items()}, "skipped": data["skipped"],
              "negatives_differ": data["negatives_differ"], "boxes_outside_image": data["boxes_outside_image"],
              "notes": data["notes"]}
    if not items:
        outcomes = outcomes_of(data, {m: [] for m in MEASURES})
        return result | {"metrics": reported(outcomes), "outcomes": outcomes, "averages": averages(outcomes["metrics"])}
    pictures = encoder.images([it.picture for it in items])
    texts = [encoder.texts([it[k] for it in items]) for k in (2, 3, 4, 5)]
    outcomes = outcomes_of(data, judged(pictures, *texts))
    names = [it.picture for it in items]
    blind_answers = blind(judged, mean_picture(pictures, names), len(items), *texts)
    return result | {"metrics": reported(outcomes), "outcomes": outcomes, "averages": averages(outcomes["metrics"]),
                     "blind": blind_block(outcomes_of(data, blind_answers), len(set(names)))}


def item_chances(data: dict) -> dict:
    """Each item's chance (`chance.levels`) of the measures ``original``, ``hard_positive`` (the true text
    second of two, so a tie is wrong) and ``augmented`` (c_n' strictly below both true texts: 1/k of the k distinct
    texts, 0 when it reads as one of them)."""
    out = {}
    for subset, rows in data["items"].items():
        out[f"{subset}/original"] = [(it.key, pick_chance([it.negative, it.caption], 1)) for it in rows]
        out[f"{subset}/hard_positive"] = [(it.key, pick_chance([it.paired_negative, it.hard_positive], 1))
                                          for it in rows]
        out[f"{subset}/augmented"] = [(it.key, below_chance([it.caption, it.hard_positive], it.paired_negative))
                                      for it in rows]
    return out
