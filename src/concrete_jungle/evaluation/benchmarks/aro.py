"""ARO (Yuksekgonul et al. 2023): does the model know who does what to whom (VG-Relation) and which thing has
which attribute (VG-Attribution)?

Data: the ARO release, unchanged: ``visual_genome_relation.json`` and ``visual_genome_attribution.json`` (lists of
``image_path``, ``bbox_x/y/w/h``, ``true_caption``, ``false_caption`` and ``relation_name`` or ``attributes``)
and ``images/``. The official rule (`mertyg/vision-language-models-are-bows`, ``dataset_zoo/aro_datasets.py`` and
its "Replicate ARO!" notebook): each picture is converted to RGB and cut to its box; the captions are scored in the
order [false, true] and the pick is numpy's argmax (`choice.picks`), so a tie is wrong. VG-Relation is the mean of
the per-relation accuracies over the relations that are not in the notebook's list of symmetric relations (whose
two captions can both be true); VG-Attribution the mean of the per-attribute-pair accuracies over the pairs with at
least 25 items. The list of symmetric relations is not part of the data release: put it in
``aro/vg_relation_symmetric.txt`` (one relation a line, copied from the notebook); without it the macro mean is
over every relation and is reported under another name, ``VG-Relation (all relations)``. The micro accuracies
(over items) are reported beside.

A box wholly outside its picture is cut, as PIL cuts it, to black pixels, and the official code scores the item on
that crop: so do we, and count such items (``boxes_outside_image``, with a note in the result). A box that is not
four numbers, or less than a pixel wide or high, is an error (its crop would fail in the run).
"""

from __future__ import annotations

from pathlib import Path

from ...outcomes import reported, series
from ...records import file_digest
from ..chance import pick_chance
from ..checks import (
    BenchmarkDataError,
    boxes_outside,
    check_images,
    image_path,
    items_of,
    load_json_file,
    numbered_lines,
    pixel_box,
    text_of,
    unit_of,
)
from ..choice import subset_picks
from ..encoding import Crop, Encoder
from ..validity import averages, blind_block

FILES = {"vg_relation": "visual_genome_relation.json", "vg_attribution": "visual_genome_attribution.json"}
SYMMETRIC = "vg_relation_symmetric.txt"
MIN_ATTRIBUTE_ITEMS = 25  # the official evaluate_scores drops attribute pairs with fewer items
LAYOUT = ("<root>/aro/{visual_genome_relation,visual_genome_attribution}.json and <root>/aro/images/<image_path> "
          "(the ARO release); optional <root>/aro/vg_relation_symmetric.txt (the ARO notebook's symmetric relations, "
          "one a line)")


def load(root: str | Path, skip_missing: bool = False) -> dict:
    """Items per subset present (relation or attribution): (key, Crop, false caption, true caption, group); per
    subset, how many items have a box wholly outside their image (``boxes_outside_image``)."""
    root = Path(root)
    found = {s: root / name for s, name in FILES.items() if (root / name).is_file()}
    if not found:
        raise BenchmarkDataError(f"{root} holds neither {' nor '.join(FILES.values())}; expected layout: {LAYOUT}")
    items, skipped, files = {}, {}, {}
    for subset, path in found.items():
        raw = load_json_file(path, LAYOUT)
        if not isinstance(raw, list):
            raise BenchmarkDataError(f"{path}: ARO files are a list of items; expected layout: {LAYOUT}")
        files[path] = file_digest(path)
        rows = [_row(subset, path, n, item, root) for n, item in items_of(raw, path, dict, LAYOUT)]
        problems, sha256 = check_images([r[1].path for r in rows], LAYOUT, skip_missing)
        files |= sha256
        items[subset] = [r for r in rows if r[1].path not in problems]
        skipped[subset] = len(rows) - len(items[subset])
    symmetric = root / SYMMETRIC
    excluded = None
    if symmetric.is_file():
        excluded = sorted({line for _, line in numbered_lines(symmetric)})
        files[symmetric] = file_digest(symmetric)
    outside_counts, notes = boxes_outside({s: [(r[0], r[1]) for r in rows] for s, rows in items.items()})
    return {"items": items, "skipped": skipped, "symmetric": excluded, "boxes_outside_image": outside_counts,
            "notes": notes, "files": files}


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """`load` of ``<root>/aro``."""
    return load(root / "aro", skip_missing=skip_missing)


def _row(subset: str, path: Path, n: int, item: dict, root: Path) -> tuple:
    """One item: (key, Crop, false caption, true caption, group), every field checked as the run will use it."""
    missing = [f for f in ("image_path", "bbox_x", "bbox_y", "bbox_w", "bbox_h", "true_caption", "false_caption")
               if f not in item]
    attributes = item.get("attributes")
    group = item.get("relation_name") if subset == "vg_relation" else (
        "_".join(map(str, attributes[:2])) if isinstance(attributes, list) and len(attributes) >= 2 else None)
    if missing or group is None:
        raise BenchmarkDataError(f"{path}: item {n} lacks {missing or ['relation_name or attributes']}; "
                                 f"expected layout: {LAYOUT}")
    for field in ("image_path", "false_caption", "true_caption"):
        text_of(item[field], path, f"item {n}", field)
    box = pixel_box(item, path, f"item {n}")
    return (str(n), Crop(image_path(root / "images", item["image_path"]), box), item["false_caption"],
            item["true_caption"], str(group))


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Macro and micro accuracy of each subset; ``outcomes`` per relation or attribute pair (`stats`); the labelled
    averages (``averages``) and the blind baseline (``blind``: `choice.subset_picks`)."""
    chosen = subset_picks(encoder, {s: ([it[1] for it in items], [[it[2], it[3]] for it in items])
                                    for s, items in data["items"].items()})
    outcomes = outcomes_of(data, {s: p == 1 for s, p in chosen["picks"].items()})  # the true caption is second
    blind = outcomes_of(data, {s: p == 1 for s, p in chosen["blind"].items()})
    return {"metrics": reported(outcomes), "n": {s: len(v) for s, v in data["items"].items()},
            "skipped": data["skipped"], "boxes_outside_image": data["boxes_outside_image"], "notes": data["notes"],
            "outcomes": outcomes, "averages": averages(outcomes["metrics"]),
            "blind": blind_block(blind, chosen["pictures"])}


def outcomes_of(data: dict, answers_of: dict) -> dict:
    """The outcomes of the answers ``answers_of[subset]`` (each item right or not): a series per subset and per
    relation or attribute pair, with the recipes of the macro and micro accuracies."""
    answers, recipes = {}, {}
    for subset, items in data["items"].items():
        right = answers_of[subset]
        keys, units = [it[0] for it in items], [unit_of(it[1].path) for it in items]
        answers[subset] = series(keys, units, right)
        groups: dict[str, list[int]] = {}
        for n, it in enumerate(items):
            groups.setdefault(it[4], []).append(n)
        for group, rows in sorted(groups.items()):
            answers[f"{subset}/{group}"] = series([keys[r] for r in rows], [units[r] for r in rows], right[rows])
            recipes[f"{subset}/{group}"] = {"mean": f"{subset}/{group}", "part": True}
        if subset == "vg_relation":
            kept = [g for g in sorted(groups) if data["symmetric"] is None or g not in data["symmetric"]]
            name = "VG-Relation" if data["symmetric"] is not None else "VG-Relation (all relations)"
        else:
            kept = [g for g in sorted(groups) if len(groups[g]) >= MIN_ATTRIBUTE_ITEMS]
            name = "VG-Attribution"
        recipes[name] = {"macro": [f"{subset}/{g}" for g in kept]}
        recipes[f"{name.split(' (')[0]} (micro)"] = {"micro": [subset]}  # every item of the file
    return {"series": answers, "metrics": recipes}


def item_chances(data: dict) -> dict:
    """Each item's chance (`chance.levels`): [false caption, true caption], the true one second, so a tie is
    wrong."""
    return {s: [(row[0], pick_chance([row[2], row[3]], 1)) for row in rows] for s, rows in data["items"].items()}
