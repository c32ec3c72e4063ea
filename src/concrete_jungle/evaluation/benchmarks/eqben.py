"""EqBen (Wang et al. 2023, "Equivariant Similarity for Vision-Language Foundation Models"): pairs of images with a
minimal visual change (frames of one video, renders of one scene, edits of one generated image) and their two
captions, in five sources: Action Genome (eqbenag), YouCook2 (eqbenyoucook2), GEBC (eqbengebc), Kubric (counting,
location, attribute: eqbenkubric_{cnt,loc,attr}) and Stable Diffusion (eqbensd).

Data: the EqBen evaluation subset ``eqben_vllm`` (the "EqBen_Mini" of t2v_metrics, linzhiqiu/t2v_metrics
``dataset.py`` at commit 1c7c763, and the ``eqben`` of VisMin's evaluation), unchanged: ``all_select.json``, a list
of items ``{image0, caption0, image1, caption1}`` (caption k written for image k), and ``images/<image0>``, each
path starting with its source's folder (``eqbenag/...``); YouCook2's frames are numpy arrays (``.npy``, BGR), read
as EqBen's official loader reads them (``Image.fromarray(np.load(path)[:, :, [2, 1, 0]], "RGB")``), the other
pictures ``Image.open(path).convert("RGB")``. We read this subset because it is the one the field evaluates
contrastive models on and the one small enough to download whole. The full test set (~100 GB of images) is read
by `load_full_root` (benchmark ``eqben_full``, `FULL_LAYOUT`): its released annotation randomised, put back in order as
``evaluate_eqben_locally.py`` (commit ab6c79a) puts its scores, with the repository's ``src_file/``. The 10 % subset
(~10 GB) is not read.

The official rule: Winoground's text, image and group scores with strict comparisons, so a tie is wrong
(`two_by_two`), as EqBen's own ``src/eqben/eqben_acc.py`` (``cal_wino_score``, Wangt-CN/EqBen, commit 128ac8a) and
``evaluate_eqben_locally.py`` (commit 1b0f319; both unchanged through ab6c79a) compute them, and as t2v_metrics'
``EqBen_Mini.evaluate_scores`` (``get_winoground_acc``) reports them for this subset: each score over all items
(``micro/text``, ``micro/image``, ``micro/group``: the official overall numbers; the headline is ``micro/group``,
the number t2v_metrics returns) and per group of sources, t2v_metrics' five: ``eqbenag``, ``eqbeny`` (YouCook2),
``eqbeng`` (GEBC), ``eqbenk`` (the three Kubric sets together) and ``eqbensd``. Beside them, labelled, the mean of
the groups' scores (``macro/``), which the official code does not report. Scores in fp32 (the official CLIP example
runs CLIP in fp16 on a GPU, where near-equal scores tie more often). Items that share an image are one unit of
resampling (`two_by_two.units`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ...images import npy_frame
from ...outcomes import reported
from ...records import file_digest
from .. import two_by_two
from ..checks import (
    BenchmarkDataError,
    CheckedImages,
    check_images,
    image_path,
    items_of,
    load_json_file,
    release_folder,
    text_of,
)
from ..encoding import Crop, Encoder
from ..two_by_two import Pair
from ..validity import MICRO, averages

LAYOUT = ("<root>/eqben/eqben_vllm/all_select.json (a list of {image0, caption0, image1, caption1}: eqben_vllm.zip, "
          "EqBen_Mini, unzipped as t2v_metrics unzips it) and <root>/eqben/eqben_vllm/images/<image0>, <image1> (paths "
          "starting with their source's folder, eqbenag/, eqbenyoucook2/ ...; YouCook2 frames as .npy); or the same "
          "files directly in <root>/eqben/")
GROUPS = {"eqbenag": "eqbenag", "eqbenyoucook2": "eqbeny", "eqbengebc": "eqbeng", "eqbenkubric_cnt": "eqbenk",
          "eqbenkubric_loc": "eqbenk", "eqbenkubric_attr": "eqbenk", "eqbensd": "eqbensd"}
NAMES = {"text": "text", "image": "image", "group": "group"}
OTHER = "other"  # the items whose image0 is in none of the source folders: in the overall scores only


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """Items per group of sources (`two_by_two.Pair`, each image a `Crop`: converted to RGB first); every item and
    image checked before any model loads."""
    folder = release_folder(Path(root) / "eqben", "eqben_vllm", "all_select.json")
    path = folder / "all_select.json"
    raw = load_json_file(path, LAYOUT)
    if not isinstance(raw, list):
        raise BenchmarkDataError(f"{path}: EqBen's all_select.json is a list of items; expected layout: {LAYOUT}")
    data: dict[str, list[Pair]] = {}
    for n, item in items_of(raw, path, dict, LAYOUT):
        image0, image1, caption0, caption1 = [text_of(item.get(f), path, f"item {n}", f)
                                              for f in ("image0", "image1", "caption0", "caption1")]
        group = GROUPS.get(image0.split("/")[0])  # None: counted over all items only, as t2v_metrics counts it
        images = (Crop(image_path(folder / "images", image0)), Crop(image_path(folder / "images", image1)))
        data.setdefault(group or OTHER, []).append(Pair(str(n), images, (caption0, caption1), group))
    problems, sha256 = _checked([crop.path for items in data.values() for it in items for crop in it.images],
                                skip_missing)
    usable = {g: [it for it in items if not any(crop.path in problems for crop in it.images)]
              for g, items in data.items()}
    others = [it.key for it in data.get(OTHER, [])]
    notes = [f"{len(others)} item(s) have an image0 in no EqBen source folder ({', '.join(GROUPS)}; items "
             f"{', '.join(others[:5])}{', ...' if len(others) > 5 else ''}): counted in the micro/ scores over all "
             "items and in no group, as t2v_metrics counts them"] if others else []
    return {"items": usable, "skipped": {g: len(data[g]) - len(usable[g]) for g in data}, "notes": notes,
            "files": {path: file_digest(path)} | sha256}


FULL = "eqben_full"
ANNOTATION = "ann_json_finegrained_random.json"
PRIVATE = ("src_file/private_random_idx.json", "src_file/private_info.json")
FULL_LAYOUT = (f"<root>/{FULL}/{ANNOTATION} (the full test set's released annotation: a list of {{image, caption}} "
               f"in random order), <root>/{FULL}/src_file/{{private_random_idx,private_info}}.json (the EqBen "
               f"repository's src_file/, which restores the order) and <root>/{FULL}/images/<image> (the image "
               "archive unpacked, each path starting with its source's folder; YouCook2 frames as .npy)")
SCORES = ("c0i0", "c0i1", "c1i0", "c1i1")  # caption c against image i, the entries of one item


def load_full_root(root: Path, skip_missing: bool = False) -> dict:
    """The full test set (`FULL_LAYOUT`): its pairs of one caption and one image, put back in order as
    ``evaluate_eqben_locally.py`` puts their scores (``private_random_idx``: the original place of each pair;
    ``private_info``: its source, which of an item's four scores it is, ``c0i0`` ..., and the item's number), made
    into items per source (the seven the official script reports); every image checked before any model loads."""
    folder = Path(root) / FULL
    paths = [folder / ANNOTATION, *(folder / p for p in PRIVATE)]
    pairs, order, info = (load_json_file(p, FULL_LAYOUT) for p in paths)
    if not (isinstance(pairs, list) and isinstance(order, list) and isinstance(info, list)
            and len(pairs) == len(order) == len(info) and sorted(o for o in order if type(o) is int) ==
            list(range(len(pairs)))):
        raise BenchmarkDataError(f"{paths[0]}, {paths[1]} and {paths[2]} do not fit together (three lists of one "
                                 "length, the second a permutation of its positions); use the released files unchanged")
    entries: dict[tuple[str, int], dict[str, tuple[str, str]]] = {}
    for place, original in enumerate(order):
        pair, where = pairs[place], info[original]
        image, caption = (text_of(pair.get(f) if isinstance(pair, dict) else None, paths[0], f"item {place}", f)
                          for f in ("image", "caption"))
        if not (isinstance(where, dict) and where.get("dataset") in GROUPS and where.get("name") in SCORES
                and type(where.get("sample_cnt")) is int):
            raise BenchmarkDataError(f"{paths[2]}: entry {original} is {where!r}, not {{dataset: one of "
                                     f"{', '.join(GROUPS)}, name: one of {', '.join(SCORES)}, sample_cnt: a number}}")
        entries.setdefault((where["dataset"], where["sample_cnt"]), {})[where["name"]] = (image, caption)
    data: dict[str, list[Pair]] = {}
    for (dataset, number), four in sorted(entries.items(), key=lambda e: e[0][1]):
        if set(four) != set(SCORES) or four["c0i1"] != (four["c1i1"][0], four["c0i0"][1]) or \
                four["c1i0"] != (four["c0i0"][0], four["c1i1"][1]):
            raise BenchmarkDataError(f"{paths[0]}: the pairs of item {number} ({dataset}) are not caption 0 and 1 "
                                     "against image 0 and 1; use the released files unchanged")
        images = tuple(Crop(image_path(folder / "images", four[k][0])) for k in ("c0i0", "c1i1"))
        data.setdefault(dataset, []).append(Pair(str(number), images, (four["c0i0"][1], four["c1i1"][1]), dataset))
    data = {d: data[d] for d in GROUPS if d in data}
    problems, sha256 = _checked([crop.path for items in data.values() for it in items for crop in it.images],
                                skip_missing)
    usable = {d: [it for it in items if not any(crop.path in problems for crop in it.images)]
              for d, items in data.items()}
    return {"items": usable, "skipped": {d: len(data[d]) - len(usable[d]) for d in data}, "notes": [], "full": True,
            "files": {p: file_digest(p) for p in paths} | sha256}


def _checked(paths: list[Path], skip_missing: bool) -> CheckedImages:
    """`checks.check_images` for the pictures, and the same checks for the ``.npy`` frames: present, and one
    height x width x 3 uint8 array each, decoded whole."""
    from ...images import ImageRejected

    problems, sha256 = check_images([p for p in paths if p.suffix != ".npy"], LAYOUT, skip_missing)
    for path in dict.fromkeys(p for p in paths if p.suffix == ".npy"):
        try:
            npy_frame(path).close()
            sha256[path] = hashlib.sha256(path.read_bytes()).hexdigest()
        except ImageRejected as e:
            problems[path] = "missing" if not path.exists() else str(e)
            if not skip_missing:
                raise BenchmarkDataError(f"frame {path} is {problems[path]}; expected layout: {LAYOUT}. Fix the "
                                         "data root, or pass --skip-missing to count and skip such items.") from None
    return CheckedImages(problems, sha256)


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Text, image and group scores over all items (``micro/``, the official overall numbers), per group of
    sources (EqBen_Mini) or per source (the full test set: the seven numbers ``evaluate_eqben_locally.py`` prints),
    their mean (``macro/``) and the blind baseline (`two_by_two.evaluate`); on the full test set also per group of
    sources (t2v_metrics' five, `GROUPS`: ``eqbenk`` pools the three Kubric sets) and the groups' mean
    (``groups/``)."""
    result = two_by_two.evaluate(encoder, data, NAMES, overall="micro/") | {"notes": data["notes"]}
    if not data.get("full"):
        return result
    recipes = result["outcomes"]["metrics"]
    groups = list(dict.fromkeys(GROUPS[d] for d in data["items"] if data["items"][d]))
    for name in NAMES.values():
        for group in groups:
            recipes[f"{group}/{name}"] = {"micro": [f"{d}/{name}" for d in data["items"] if GROUPS[d] == group
                                                    and data["items"][d]]}
        recipes[f"groups/{name}"] = {"macro": [f"{g}/{name}" for g in groups]}
    result["metrics"] = reported(result["outcomes"])
    result["averages"] = averages(recipes) | {f"micro/{name}": MICRO for name in NAMES.values()}
    return result


def item_chances(data: dict) -> dict:
    """Each item's chance of every score (`two_by_two.chances`)."""
    return two_by_two.item_chances([it for rows in data["items"].values() for it in rows], NAMES)
