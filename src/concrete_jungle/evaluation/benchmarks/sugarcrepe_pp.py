"""SugarCrepe++ (Dumpala et al. 2024): two paraphrased positives against one negative.

Data: the official JSON (a list of ``{id, filename, caption, caption2, negative_caption}``) per subset and
the COCO val2017 images. ITT (image-to-text): both captions beat the negative for the image. TOT
(text-only): ``sim(p1, p2)`` beats both ``sim(p1, n)`` and ``sim(p2, n)``. Strict comparisons.
"""

from __future__ import annotations

from pathlib import Path

from ...outcomes import metric_values, series
from ...records import file_digest
from ..chance import below_chance
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
from ..validity import averages, blind, blind_block, mean_picture

SUBSETS = ("replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")
LAYOUT = "<json_dir>/{replace_att,replace_obj,replace_rel,swap_att,swap_obj}.json and <image_dir>/<filename>"


def load(json_dir: str | Path, image_dir: str | Path, subsets=None, skip_missing: bool = False) -> dict:
    """Items per subset (``subsets``, else every subset file in ``json_dir``), every image checked."""
    json_dir, image_dir = Path(json_dir), Path(image_dir)
    data, files = {}, {}
    for subset, path in subset_files(json_dir, SUBSETS, subsets, LAYOUT).items():
        raw = load_json_file(path, LAYOUT)
        files[path] = file_digest(path)
        if not isinstance(raw, list):
            raise BenchmarkDataError(f"{path}: SugarCrepe++ files are a list of items; expected layout: {LAYOUT}")
        items = checked_items(path, raw, ("filename", "caption", "caption2", "negative_caption"), LAYOUT)
        ids = [str(item.get("id", n)) for n, (_, item) in enumerate(items)]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise BenchmarkDataError(f"{path}: item id(s) {twice[:5]} appear more than once")
        data[subset] = [(i, image_path(image_dir, item["filename"]), item["caption"], item["caption2"],
                         item["negative_caption"]) for i, (_, item) in zip(ids, items)]
    checked = checked_subsets(data, LAYOUT, skip_missing)
    return checked | {"files": files | checked["files"]}


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """`load` of ``<root>/sugarcrepe_pp`` or, for the repository cloned there, its ``data/``
    (`checks.release_folder`), with the images in ``<root>/coco/val2017``."""
    folder = release_folder(Path(root) / "sugarcrepe_pp", "data", *(f"{s}.json" for s in SUBSETS))
    return load(folder, Path(root) / "coco" / "val2017", skip_missing=skip_missing)


def _dot(a, b):
    return (a * b).sum(-1)


def image_to_text(img, p1, p2, n) -> list[bool]:
    """ITT's rule: per item, both positives strictly above the negative for its image."""
    return ((_dot(img, p1) > _dot(img, n)) & (_dot(img, p2) > _dot(img, n))).tolist()


def evaluate(encoder: Encoder, data: dict) -> dict:
    """ITT and TOT per subset, their means over subsets (M.Avg) and over items; the labelled averages
    (``averages``) and the blind baseline of ITT (``blind``; TOT reads no picture)."""
    items = [it for s in data["items"] for it in data["items"][s]]
    img = encoder.images([it[1] for it in items])
    p1, p2, n = (encoder.texts([it[k] for it in items]) for k in (2, 3, 4))
    tot = ((_dot(p1, p2) > _dot(p1, n)) & (_dot(p1, p2) > _dot(p2, n))).tolist()
    outcomes = outcomes_of(data, image_to_text(img, p1, p2, n), tot)
    result = {"metrics": metric_values(outcomes), "n": {s: len(v) for s, v in data["items"].items()},
              "skipped": data["skipped"], "outcomes": outcomes, "averages": averages(outcomes["metrics"])}
    if items:
        names = [it[1] for it in items]
        itt = blind(image_to_text, mean_picture(img, names), len(items), p1, p2, n)
        result["blind"] = blind_block(outcomes_of(data, itt, tot), len(set(names)),
                                      [m for m in outcomes["metrics"] if m.endswith("/ITT")])
    return result


def outcomes_of(data: dict, itt: list[bool], tot: list[bool]) -> dict:
    """The outcomes of every item's ITT and TOT answers (in the subsets' order), with the metrics' recipes."""
    answers, at = {}, 0
    for subset, subset_items in data["items"].items():
        k = len(subset_items)
        keys, units = [it[0] for it in subset_items], [unit_of(it[1]) for it in subset_items]
        answers[f"{subset}/ITT"] = series(keys, units, itt[at: at + k])
        answers[f"{subset}/TOT"] = series(keys, units, tot[at: at + k])
        at += k
    recipes = {name: {"mean": name} for name in answers}
    recipes |= {f"M.Avg/{kind}": {"macro": [f"{s}/{kind}" for s in data["items"]]} for kind in ("ITT", "TOT")}
    recipes |= {f"all items (micro)/{kind}": {"micro": [f"{s}/{kind}" for s in data["items"]]}
                for kind in ("ITT", "TOT")}
    return {"series": answers, "metrics": recipes}


def item_chances(data: dict) -> dict:
    """Each item's chance of ITT (`chance.levels`): the negative below both positives."""
    return {f"{s}/ITT": [(k, below_chance([p1, p2], neg)) for k, _, p1, p2, neg in rows]
            for s, rows in data["items"].items()}
