"""What'sUp (Kamath et al. 2023): spatial relations (on, under, left of, right of, in front of, behind).

Data: the What'sUp release, unchanged. Controlled-A (``controlled_images_dataset.json`` + ``controlled_images/``)
and Controlled-B (``controlled_clevr_dataset.json`` + ``controlled_clevr/``): items ``{image_path,
caption_options}`` of four captions, the first right; the image is found by its file name in the subset's folder.
COCO-QA and GQA-based VG-QA, one and two objects (``coco_qa_{one,two}_obj.json``, ``vg_qa_{one,two}_obj.json``):
items ``[image id, right caption, wrong caption]``, images ``<id:012d>.jpg`` in the release's ``val2017/`` (or
COCO's own ``coco/val2017/``) and ``whatsup/vg_images/<id>.jpg``. The release is its Google Drive folder, as
``dataset_zoo/aro_datasets.py`` downloads it into ``data/``: the JSON files, with ``controlled_images.tar.gz``,
``controlled_clevr.tar.gz`` and ``vg_images.tar.gz`` untarred and ``val2017.zip`` unzipped beside them. An id
must name its image exactly: a COCO id is a whole number (``1.7`` is an error, not image 1), a VG id a whole
number or the file name without ``.jpg``.

The official rule (`amitakamath/whatsup_vlms`, ``dataset_zoo/aro_datasets.py``): each picture is converted to RGB,
the captions are scored in their listed order and the pick is numpy's argmax (`choice.picks`), so a tie goes to
the right caption, listed first. Reported per subset: accuracy over items; for Controlled-A and -B also the pair
accuracy (both images of an opposite pair right: left/right, and on/under or in-front/behind, out of
items / 2) and the set accuracy (all four images of an object pair right, out of items / 4). The four images of
one object pair are one unit of resampling (`stats`).
"""

from __future__ import annotations

from pathlib import Path

from ...outcomes import reported, series
from ...records import file_digest
from ..chance import pick_chance
from ..checks import BenchmarkDataError, check_images, image_path, items_of, load_json_file, shown, text_of
from ..choice import subset_picks
from ..encoding import Crop, Encoder
from ..validity import averages, blind_block

CONTROLLED = {"controlled_a": ("controlled_images_dataset.json", "controlled_images", ("on", "under")),
              "controlled_b": ("controlled_clevr_dataset.json", "controlled_clevr", ("in-front", "behind"))}
QA = {"coco_qa_one": "coco_qa_one_obj.json", "coco_qa_two": "coco_qa_two_obj.json",
      "vg_qa_one": "vg_qa_one_obj.json", "vg_qa_two": "vg_qa_two_obj.json"}
LAYOUT = ("<root>/whatsup/{controlled_images_dataset,controlled_clevr_dataset}.json with controlled_images/ and "
          "controlled_clevr/; <root>/whatsup/{coco,vg}_qa_{one,two}_obj.json with <root>/whatsup/val2017/ (or "
          "<root>/coco/val2017/) and <root>/whatsup/vg_images/ (the What'sUp release's Drive folder, its archives "
          "unpacked in place)")


def object_pair(name: str) -> tuple[str, str]:
    """(the object pair, the preposition) of a controlled image's file name, as the official code reads them:
    ``mug_left_of_plate.jpeg`` -> ``("mug/plate", "left")``."""
    parts = name.split("_")
    return f"{parts[0]}/{parts[-1].rsplit('.', 1)[0]}", parts[1]


def load(root: str | Path, coco_images: str | Path, skip_missing: bool = False) -> dict:
    """Items per subset present: (key, Crop, caption options with the right one first, unit)."""
    root = Path(root)
    data: dict[str, list[tuple]] = {}
    files = {}
    for subset, (name, folder, _) in CONTROLLED.items():
        path = root / name
        if path.is_file():
            raw = _listed(path)
            files[path] = file_digest(path)
            data[subset] = [_controlled(subset, path, n, item, root / folder)
                            for n, item in items_of(raw, path, object, LAYOUT)]
    for subset, name in QA.items():
        path = root / name
        if path.is_file():
            raw = _listed(path)
            files[path] = file_digest(path)
            folder = Path(coco_images) if subset.startswith("coco") else root / "vg_images"
            data[subset] = [_question(subset, path, n, item, folder) for n, item in items_of(raw, path, object, LAYOUT)]
    if not data:
        raise BenchmarkDataError(f"{root} holds no What'sUp file; expected layout: {LAYOUT}")
    problems, sha256 = check_images([it[1].path for items in data.values() for it in items], LAYOUT, skip_missing)
    return {"items": {s: [it for it in items if it[1].path not in problems] for s, items in data.items()},
            "skipped": {s: sum(it[1].path in problems for it in items) for s, items in data.items()},
            "files": files | sha256}


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """`load` of ``<root>/whatsup`` with the COCO-QA images in the release's own ``whatsup/val2017/`` (its
    ``val2017.zip`` unzipped there) or in ``<root>/coco/val2017``; both at once is an error naming both."""
    folder, release, coco = Path(root) / "whatsup", Path(root) / "whatsup" / "val2017", Path(root) / "coco" / "val2017"
    if release.is_dir() and coco.is_dir() and any((folder / QA[s]).is_file() for s in QA if s.startswith("coco")):
        raise BenchmarkDataError(f"{release} and {coco} both hold COCO val2017 images for What'sUp's COCO-QA: two "
                                 f"copies; keep one (the release's val2017.zip unzipped in {folder}, or COCO's own)")
    return load(folder, release if release.is_dir() else coco, skip_missing=skip_missing)


def _controlled(subset: str, path: Path, n: int, item, folder: Path) -> tuple:
    """A Controlled-A/B item: its image named by its file name, which also names its object pair and preposition."""
    if not isinstance(item, dict) or "image_path" not in item or not isinstance(item.get("caption_options"), list) \
            or len(item["caption_options"]) != 4:
        raise BenchmarkDataError(f"{path}: item {n} needs image_path and four caption_options; expected layout: "
                                 f"{LAYOUT}")
    options = [text_of(c, path, f"item {n}", f"caption_options[{k}]") for k, c in enumerate(item["caption_options"])]
    file = Path(text_of(item["image_path"], path, f"item {n}", "image_path")).name
    if len(file.split("_")) < 3:
        raise BenchmarkDataError(f"{path}: item {n}'s image {file!r} is not named <object>_<preposition>_<object> "
                                 "(mug_left_of_plate.jpeg), which the pair and set accuracies read; use the "
                                 "release's file names")
    unit, _ = object_pair(file)
    return file, Crop(image_path(folder, file)), options, f"{subset}/{unit}"


def _question(subset: str, path: Path, n: int, item, folder: Path) -> tuple:
    """A COCO-QA or VG-QA item ``[image id, right caption, wrong caption]``; the id must name one image exactly (a
    COCO id ``1.7`` would read image 1)."""
    if not isinstance(item, list) or len(item) != 3:
        raise BenchmarkDataError(f"{path}: item {n} is not [image id, right caption, wrong caption]; expected "
                                 f"layout: {LAYOUT}")
    image_id, right, wrong = item
    whole = (isinstance(image_id, int) and not isinstance(image_id, bool) and image_id >= 0) or \
        (isinstance(image_id, str) and image_id.isascii() and image_id.isdigit())
    if subset.startswith("coco") and not whole:
        raise BenchmarkDataError(f"{path}: item {n} has the image id {shown(image_id)}, which names no COCO image "
                                 "exactly; COCO-QA ids are whole numbers (the COCO image id)")
    if subset.startswith("vg") and not (whole or isinstance(image_id, str) and image_id.strip() == image_id != ""):
        raise BenchmarkDataError(f"{path}: item {n} has the image id {shown(image_id)}, which names no image "
                                 "exactly; VG-QA ids are the image's file name without .jpg")
    file = f"{int(image_id):012d}.jpg" if subset.startswith("coco") else f"{image_id}.jpg"
    options = [text_of(right, path, f"item {n}", "right caption [1]"),
               text_of(wrong, path, f"item {n}", "wrong caption [2]")]
    return str(n), Crop(image_path(folder, file)), options, file


def _listed(path: Path) -> list:
    raw = load_json_file(path, LAYOUT)
    if not isinstance(raw, list):
        raise BenchmarkDataError(f"{path}: What'sUp files are a list of items; expected layout: {LAYOUT}")
    return raw


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Accuracy per subset, and pair and set accuracy of the controlled subsets; the mean of the subsets'
    accuracies and over all their items; ``outcomes`` per item (`stats`); the labelled averages (``averages``) and
    the blind baseline (``blind``)."""
    chosen = subset_picks(encoder, {s: ([it[1] for it in items], [it[2] for it in items])
                                    for s, items in data["items"].items()})
    outcomes = outcomes_of(data, {s: p == 0 for s, p in chosen["picks"].items()})  # the right caption is first
    blind = outcomes_of(data, {s: p == 0 for s, p in chosen["blind"].items()})
    return {"metrics": reported(outcomes), "n": {s: len(v) for s, v in data["items"].items()},
            "skipped": data["skipped"], "outcomes": outcomes, "averages": averages(outcomes["metrics"]),
            "blind": blind_block(blind, chosen["pictures"])}


def outcomes_of(data: dict, answers_of: dict) -> dict:
    """The outcomes of the answers ``answers_of[subset]`` (each item right or not), the pairs and sets of the
    controlled subsets made from them, with the metrics' recipes."""
    answers, recipes = {}, {}
    for subset, items in data["items"].items():
        right = answers_of[subset]
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
    recipes["all subsets (macro)"] = {"macro": list(data["items"])}  # the subsets' accuracies, not pairs or sets
    recipes["all items (micro)"] = {"micro": list(data["items"])}
    return {"series": answers, "metrics": recipes}


def item_chances(data: dict) -> dict:
    """Each item's chance (`chance.levels`): the right caption listed first, so a tie is right."""
    return {s: [(row[0], pick_chance(row[2], 0)) for row in rows] for s, rows in data["items"].items()}
