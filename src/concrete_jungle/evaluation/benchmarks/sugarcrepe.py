"""SugarCrepe (Hsieh et al. 2023): is the true caption closer to the image than its hard negative?

Data: the official JSON files (dict keyed by item index; some subsets are not contiguous, so keys are
iterated, never ranges) and the COCO val2017 images. Score per item: ``sim(image, caption) >
sim(image, negative_caption)`` strictly — a tie counts as wrong — in fp32. Reported: accuracy per
subset, the ADD / REPLACE / SWAP averages (where all their subsets are present) and M.Avg over the subsets
evaluated (the 7 official ones when all their files are there), as the official code reports them. Beside them
(`validity`): the mean over all items (``all items (micro)``; M.Avg is the mean of subsets), each subset holding
items whose caption and negative are of one bag of words split into those (``<subset>/bow_identical``) and the
rest (``<subset>/bow_differs``; on the official files the two swap subsets), and the blind baseline (``blind``).
"""

from __future__ import annotations

from pathlib import Path

from ...outcomes import metric_values, series
from ...records import file_digest
from ..chance import pick_chance
from ..checks import (
    BenchmarkDataError,
    checked_items,
    checked_subsets,
    image_path,
    load_json_file,
    release_folder,
    subset_files,
    unit_of,
)
from ..encoding import Encoder
from ..validity import averages, bag_split, blind, blind_block, mean_picture

SUBSETS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")
GROUPS = {"ADD": ("add_att", "add_obj"), "REPLACE": ("replace_att", "replace_obj", "replace_rel"),
          "SWAP": ("swap_att", "swap_obj")}
LAYOUT = "<json_dir>/{add_att,add_obj,replace_att,replace_obj,replace_rel,swap_att,swap_obj}.json and " \
         "<image_dir>/<filename> (COCO val2017 images, e.g. 000000085329.jpg)"


def load(json_dir: str | Path, image_dir: str | Path, subsets=None, skip_missing: bool = False) -> dict:
    """Items per subset (``subsets``, else every subset file in ``json_dir``: `checks.subset_files`), with every
    image checked before any model is loaded."""
    json_dir, image_dir = Path(json_dir), Path(image_dir)
    data, files = {}, {}
    for subset, path in subset_files(json_dir, SUBSETS, subsets, LAYOUT).items():
        raw = load_json_file(path, LAYOUT)
        files[path] = file_digest(path)
        if not isinstance(raw, dict):
            raise BenchmarkDataError(f"{path}: SugarCrepe files are a dict keyed by item index; expected layout: "
                                     f"{LAYOUT}")
        data[subset] = [(key, image_path(image_dir, item["filename"]), item["caption"], item["negative_caption"])
                        for key, item in checked_items(path, raw, ("filename", "caption", "negative_caption"),
                                                       LAYOUT)]
    checked = checked_subsets(data, LAYOUT, skip_missing)
    return checked | {"files": files | checked["files"]}


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """`load` of ``<root>/sugarcrepe`` or, for the repository cloned there, its ``data/`` (`checks.release_folder`),
    with the images in ``<root>/coco/val2017``."""
    folder = release_folder(Path(root) / "sugarcrepe", "data", *(f"{s}.json" for s in SUBSETS))
    return load(folder, Path(root) / "coco" / "val2017", skip_missing=skip_missing)


def recipes(subsets: list[str]) -> dict:
    """Each subset's accuracy, ADD, REPLACE and SWAP where all their subsets are present (and scored), and M.Avg
    over the scored subsets (a subset whose every item was skipped has no score)."""
    out = {s: {"mean": s} for s in subsets}
    out |= {g: {"macro": list(members), "complete": True} for g, members in GROUPS.items()
            if all(s in subsets for s in members)}
    return out | {"M.Avg": {"macro": list(subsets)}, "all items (micro)": {"micro": list(subsets)}}


def bag_splits(data: dict) -> dict[str, dict[str, list[str]]]:
    """Per subset holding an item whose caption and negative are of one bag of words: the keys of those items and
    of the others (`validity.bag_split`)."""
    splits = {s: bag_split([it[0] for it in rows], [it[2] for it in rows], [it[3] for it in rows])
              for s, rows in data["items"].items()}
    return {s: split for s, split in splits.items() if split["bow_identical"]}


def right(images, captions, negatives) -> list[bool]:
    """The rule: per item, its caption strictly above its negative for its image (a tie is wrong)."""
    return ((images * captions).sum(-1) > (images * negatives).sum(-1)).tolist()


def outcomes_of(data: dict, correct: list[bool], splits: dict) -> dict:
    """The outcomes of the answers ``correct`` (every item's, in the subsets' order): a series per subset, and per
    bag-of-words split (`bag_splits`) a series per part, with their metrics' recipes."""
    answers, at = {}, 0
    for subset, subset_items in data["items"].items():
        flags = correct[at: at + len(subset_items)]
        at += len(subset_items)
        answers[subset] = series([it[0] for it in subset_items], [unit_of(it[1]) for it in subset_items], flags)
    parts = {}
    for subset, split in splits.items():
        whole = answers[subset]
        row = {key: n for n, key in enumerate(whole["keys"])}
        for part, keys in split.items():
            rows = [row[k] for k in keys]
            answers[f"{subset}/{part}"] = series(keys, [whole["units"][r] for r in rows],
                                                 [whole["values"][r] for r in rows])
            parts[f"{subset}/{part}"] = {"mean": f"{subset}/{part}"}
    return {"series": answers, "metrics": recipes(list(data["items"])) | parts}


def evaluate(encoder: Encoder, data: dict, blind_answers: bool = False) -> dict:
    """Accuracy per subset and the macro averages; ``outcomes`` holds each item's answer (1 correct) under its
    key, with its image (`stats`); the bag-of-words splits' counts (``bag_of_words``), the labelled averages
    (``averages``) and the blind baseline (``blind``: `validity.blind`; with ``blind_answers``, also each item's
    blind answer, a series per subset under ``blind["series"]``)."""
    items = [it for s in data["items"] for it in data["items"][s]]
    images = encoder.images([it[1] for it in items])
    pos = encoder.texts([it[2] for it in items])
    neg = encoder.texts([it[3] for it in items])
    splits = bag_splits(data)
    outcomes = outcomes_of(data, right(images, pos, neg), splits)
    result = {"metrics": metric_values(outcomes), "n": {s: len(v) for s, v in data["items"].items()},
              "skipped": data["skipped"], "outcomes": outcomes, "averages": averages(outcomes["metrics"]),
              "bag_of_words": {s: {part: len(keys) for part, keys in split.items()} for s, split in splits.items()}}
    if items:
        names = [it[1] for it in items]
        blind_right = blind(right, mean_picture(images, names), len(items), pos, neg)
        blind_outcomes = outcomes_of(data, blind_right, splits)
        result["blind"] = blind_block(blind_outcomes, len(set(names)))
        if blind_answers:
            result["blind"]["series"] = {s: blind_outcomes["series"][s] for s in data["items"]}
    return result


def item_chances(data: dict) -> dict:
    """Each item's chance (`chance.levels`): right is the caption strictly above the negative, the pick of
    [negative, caption] being 1."""
    return {s: [(k, pick_chance([neg, pos], 1)) for k, _, pos, neg in rows] for s, rows in data["items"].items()}
