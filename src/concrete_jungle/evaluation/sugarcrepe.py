"""SugarCrepe (Hsieh et al. 2023): is the true caption closer to the image than its hard negative?

Data: the official JSON files (dict keyed by item index; some subsets are not contiguous, so keys are
iterated, never ranges) and the COCO val2017 images. Score per item: ``sim(image, caption) >
sim(image, negative_caption)`` strictly — a tie counts as wrong — in fp32. Reported: accuracy per
subset, the ADD / REPLACE / SWAP averages (where all their subsets are present) and M.Avg over the subsets
evaluated (the 7 official ones when all their files are there).
"""

from __future__ import annotations

from pathlib import Path

from ..stats import metric_values, series
from ..records import file_digest
from .checks import checked_items
from .encoding import BenchmarkDataError, Encoder, checked_subsets, image_path, load_json_file, subset_files, unit_of

SUBSETS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")
GROUPS = {"ADD": ("add_att", "add_obj"), "REPLACE": ("replace_att", "replace_obj", "replace_rel"),
          "SWAP": ("swap_att", "swap_obj")}
LAYOUT = "<json_dir>/{add_att,add_obj,replace_att,replace_obj,replace_rel,swap_att,swap_obj}.json and " \
         "<image_dir>/<filename> (COCO val2017 images, e.g. 000000085329.jpg)"


def load(json_dir: str | Path, image_dir: str | Path, subsets=None, skip_missing: bool = False) -> dict:
    """Items per subset (``subsets``, else every subset file in ``json_dir``: `encoding.subset_files`), with every
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


def recipes(subsets: list[str]) -> dict:
    """Each subset's accuracy, ADD, REPLACE and SWAP where all their subsets are present (and scored), and M.Avg
    over the scored subsets (a subset whose every item was skipped has no score)."""
    out = {s: {"mean": s} for s in subsets}
    out |= {g: {"macro": list(members), "complete": True} for g, members in GROUPS.items()
            if all(s in subsets for s in members)}
    return out | {"M.Avg": {"macro": list(subsets)}}


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Accuracy per subset and the macro averages; ``outcomes`` holds each item's answer (1 correct) under its
    key, with its image (`stats`)."""
    items = [it for s in data["items"] for it in data["items"][s]]
    images = encoder.images([it[1] for it in items])
    pos = encoder.texts([it[2] for it in items])
    neg = encoder.texts([it[3] for it in items])
    correct = ((images * pos).sum(-1) > (images * neg).sum(-1)).tolist()  # strict: a tie is wrong
    answers, at = {}, 0
    for subset, subset_items in data["items"].items():
        flags = correct[at: at + len(subset_items)]
        at += len(subset_items)
        answers[subset] = series([it[0] for it in subset_items], [unit_of(it[1]) for it in subset_items], flags)
    outcomes = {"series": answers, "metrics": recipes(list(data["items"]))}
    return {"metrics": metric_values(outcomes), "n": {s: len(v) for s, v in data["items"].items()},
            "skipped": data["skipped"], "outcomes": outcomes}
