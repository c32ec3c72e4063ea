"""What'sUp (Kamath et al. 2023): spatial relations (on, under, left of, right of, in front of, behind).

Data: the What'sUp release, unchanged. Controlled-A (``controlled_images_dataset.json`` + ``controlled_images/``)
and Controlled-B (``controlled_clevr_dataset.json`` + ``controlled_clevr/``): items ``{image_path,
caption_options}`` of four captions, the first right; the image is found by its file name in the subset's folder.
COCO-QA and GQA-based VG-QA, one and two objects (``coco_qa_{one,two}_obj.json``, ``vg_qa_{one,two}_obj.json``):
items ``[image id, right caption, wrong caption]``, images ``coco/val2017/<id:012d>.jpg`` and
``whatsup/vg_images/<id>.jpg``.

The official rule (`amitakamath/whatsup_vlms`, ``dataset_zoo/aro_datasets.py``): each picture is converted to RGB,
the captions are scored in their listed order and the pick is numpy's argmax (`choice.picks`), so a tie goes to
the right caption, listed first. Reported per subset: accuracy over items; for Controlled-A and -B also the pair
accuracy (both images of an opposite pair right: left/right, and on/under or in-front/behind, out of
items / 2) and the set accuracy (all four images of an object pair right, out of items / 4). The four images of
one object pair are one unit of resampling (`stats`).
"""

from __future__ import annotations

from pathlib import Path

from ..stats import reported, series
from .choice import picks
from .encoding import BenchmarkDataError, Crop, Encoder, check_images, image_path, load_json_file

CONTROLLED = {"controlled_a": ("controlled_images_dataset.json", "controlled_images", ("on", "under")),
              "controlled_b": ("controlled_clevr_dataset.json", "controlled_clevr", ("in-front", "behind"))}
QA = {"coco_qa_one": "coco_qa_one_obj.json", "coco_qa_two": "coco_qa_two_obj.json",
      "vg_qa_one": "vg_qa_one_obj.json", "vg_qa_two": "vg_qa_two_obj.json"}
LAYOUT = ("<root>/whatsup/{controlled_images_dataset,controlled_clevr_dataset}.json with controlled_images/ and "
          "controlled_clevr/; <root>/whatsup/{coco,vg}_qa_{one,two}_obj.json with <root>/coco/val2017/ and "
          "<root>/whatsup/vg_images/ (the What'sUp release)")


def object_pair(name: str) -> tuple[str, str]:
    """(the object pair, the preposition) of a controlled image's file name, as the official code reads them:
    ``mug_left_of_plate.jpeg`` -> ``("mug/plate", "left")``."""
    parts = name.split("_")
    return f"{parts[0]}/{parts[-1].rsplit('.', 1)[0]}", parts[1]


def load(root: str | Path, coco_images: str | Path, skip_missing: bool = False) -> dict:
    """Items per subset present: (key, Crop, caption options with the right one first, unit)."""
    root = Path(root)
    data: dict[str, list[tuple]] = {}
    for subset, (name, folder, _) in CONTROLLED.items():
        if (root / name).is_file():
            raw = _listed(root / name)
            data[subset] = []
            for n, item in enumerate(raw):
                if not isinstance(item, dict) or "image_path" not in item or len(item.get("caption_options", [])) != 4:
                    raise BenchmarkDataError(f"{root / name}: item {n} needs image_path and four caption_options; "
                                             f"expected layout: {LAYOUT}")
                file = Path(item["image_path"]).name
                unit, _ = object_pair(file)
                data[subset].append((file, Crop(image_path(root / folder, file)), list(item["caption_options"]),
                                     f"{subset}/{unit}"))
    for subset, name in QA.items():
        if (root / name).is_file():
            raw = _listed(root / name)
            folder = Path(coco_images) if subset.startswith("coco") else root / "vg_images"
            data[subset] = []
            for n, item in enumerate(raw):
                if not isinstance(item, list) or len(item) != 3:
                    raise BenchmarkDataError(f"{root / name}: item {n} is not [image id, right caption, wrong "
                                             f"caption]; expected layout: {LAYOUT}")
                file = f"{int(item[0]):012d}.jpg" if subset.startswith("coco") else f"{item[0]}.jpg"
                data[subset].append((str(n), Crop(image_path(folder, file)), [item[1], item[2]], file))
    if not data:
        raise BenchmarkDataError(f"{root} holds no What'sUp file; expected layout: {LAYOUT}")
    problems = check_images([it[1].path for items in data.values() for it in items], LAYOUT, skip_missing)
    return {"items": {s: [it for it in items if it[1].path not in problems] for s, items in data.items()},
            "skipped": {s: sum(it[1].path in problems for it in items) for s, items in data.items()}}


def _listed(path: Path) -> list:
    raw = load_json_file(path, LAYOUT)
    if not isinstance(raw, list):
        raise BenchmarkDataError(f"{path}: What'sUp files are a list of items; expected layout: {LAYOUT}")
    return raw


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Accuracy per subset, and pair and set accuracy of the controlled subsets; ``outcomes`` per item (`stats`)."""
    answers, recipes = {}, {}
    for subset, items in data["items"].items():
        right = picks(encoder, [it[1] for it in items], [it[2] for it in items]) == 0  # the right caption is first
        answers[subset] = series([it[0] for it in items], [it[3] for it in items], right)
        recipes[subset] = {"mean": subset}
        if subset not in CONTROLLED:
            continue
        by_object: dict[str, dict[str, bool]] = {}
        for it, ok in zip(items, right):
            unit, preposition = object_pair(it[0])
            by_object.setdefault(unit, {})[preposition] = bool(ok)
        opposite = (("left", "right"), CONTROLLED[subset][2])
        pairs = [(f"{unit}/{a}-{b}", f"{subset}/{unit}", got.get(a, False) and got.get(b, False))
                 for unit, got in by_object.items() for a, b in opposite]
        sets = [(unit, f"{subset}/{unit}", len(got) == 4 and all(got.values())) for unit, got in by_object.items()]
        for kind, rows in (("pair", pairs), ("set", sets)):
            answers[f"{subset}/{kind}"] = series(*zip(*rows)) if rows else series([], [], [])
            recipes[f"{subset}/{kind}"] = {"mean": f"{subset}/{kind}"}
    outcomes = {"series": answers, "metrics": recipes}
    return {"metrics": reported(outcomes), "n": {s: len(v) for s, v in data["items"].items()},
            "skipped": data["skipped"], "outcomes": outcomes}
