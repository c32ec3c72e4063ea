"""SPEC (Peng et al. 2024, "Synthesize, Diagnose, and Optimize: Towards Fine-Grained Vision-Language
Understanding"): synthetic pictures and captions that differ only in one concept, in six subsets: absolute size,
relative size, absolute position (``absolute_spatial``), relative position (``relative_spatial``), existence and
count. Each test case is a set of pictures and a set of captions; each picture must pick its caption among the
captions (image -> text) and each caption its picture among the pictures (text -> image).

Data: the release (``wjpoom/SPEC`` on Hugging Face, ``data.zip``), unchanged: per subset ``<subset>/image2text.json``
(a list of ``{query: picture, keys: [captions], label: index of the right caption}``) and ``<subset>/text2image.json``
(``{query: caption, keys: [pictures], label: index of the right picture}``), the pictures named relative to the
subset's folder.

The official rule is ``spec/eval.py`` with ``spec/dataset.py`` and ``spec/models/clip_wrapper.py`` (wjpoom/SPEC,
commit ad982a4), read for this module: each picture converted to RGB; captions tokenized by open_clip's tokenizer
(cut to the context); the pick is ``argmax`` over the cosine similarities, which gives the first of equal scores, so
a tie is right only when the right candidate is listed first among the tied ones. Reported per subset: ``<subset>/i2t``
and ``<subset>/t2i``, the share of queries right (micro over the subset's queries), and ``i2t`` and ``t2i``, the mean
over the six subsets (macro, the official script's "average all subset"; labelled in ``averages``), null unless
all six are there (``partial`` then names the missing subsets; the subsets present keep their scores); the headline
is the mean of the two directions. Queries that share a right picture are one unit of resampling (`stats`). The
blind baseline (``blind``, `validity.blind`): each image -> text query's picture replaced by the mean of the query
pictures, the same argmax; the text -> image queries have none (``not_applicable``: a caption choosing among
pictures).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...outcomes import reported, series
from ...records import file_digest
from ..chance import pick_chance
from ..checks import (
    BenchmarkDataError,
    check_images,
    image_path,
    items_of,
    load_json_file,
    partial,
    release_folder,
    shown,
    text_of,
    unit_of,
)
from ..encoding import Crop, Encoder
from ..validity import averages, blind_of_parts

SUBSETS = ("absolute_size", "relative_size", "absolute_spatial", "relative_spatial", "existence", "count")
LAYOUT = ("<root>/spec/data/<subset>/{image2text,text2image}.json with the pictures they name inside the subset's "
          "folder (subsets absolute_size, relative_size, absolute_spatial, relative_spatial, existence, count: the "
          "release's data.zip extracted in <root>/spec/, as its README does); or the subsets directly in <root>/spec/")
DIRECTIONS = {"i2t": "image2text.json", "t2i": "text2image.json"}


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """Queries per subset and direction (``count/i2t``): (key, the query, the candidates, the right one's index,
    unit), pictures as `Crop` (converted to RGB); every picture checked before any model loads."""
    folder = release_folder(Path(root) / "spec", "data", "*/image2text.json")
    data: dict[str, list[tuple]] = {}
    files = {}
    for subset in SUBSETS:
        if not (folder / subset).is_dir():
            continue
        for direction, name in DIRECTIONS.items():
            path = folder / subset / name
            raw = load_json_file(path, LAYOUT)
            files[path] = file_digest(path)
            data[f"{subset}/{direction}"] = [_query(path, direction, n, item, folder / subset)
                                             for n, item in items_of(raw, path, dict, LAYOUT)]
    if not data:
        raise BenchmarkDataError(f"{folder} holds no SPEC subset ({', '.join(SUBSETS)}); expected layout: {LAYOUT}")

    def pictures(item) -> list[Path]:
        return [c.path for c in ([item[1]] if isinstance(item[1], Crop) else item[2])]

    problems, sha256 = check_images([p for items in data.values() for it in items for p in pictures(it)], LAYOUT,
                                    skip_missing)

    def usable(item) -> bool:
        return not problems.keys() & set(pictures(item))

    return {"items": {s: [it for it in items if usable(it)] for s, items in data.items()},
            "skipped": {s: sum(not usable(it) for it in items) for s, items in data.items()},
            "files": files | sha256, "missing": [s for s in SUBSETS if not (folder / s).is_dir()]}


def _query(path: Path, direction: str, n: int, item: dict, folder: Path) -> tuple:
    where = f"item {n}"
    keys, label = item.get("keys"), item.get("label")
    if not isinstance(keys, list) or len(keys) < 2:
        raise BenchmarkDataError(f"{path}: {where} has keys {shown(keys)}, not a list of candidates; expected "
                                 f"layout: {LAYOUT}")
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(keys):
        raise BenchmarkDataError(f"{path}: {where} has label {shown(label)}, not the index of one of its "
                                 f"{len(keys)} keys")
    query = text_of(item.get("query"), path, where, "query")
    candidates = [text_of(k, path, where, f"keys[{i}]") for i, k in enumerate(keys)]
    if direction == "i2t":
        picture = Crop(image_path(folder, query))
        return str(n), picture, candidates, label, unit_of(picture.path)
    pictures = [Crop(image_path(folder, c)) for c in candidates]
    return str(n), query, pictures, label, unit_of(pictures[label].path)


def first_of_best(queries, candidates, sizes: list[int]) -> list[int]:
    """The rule: per query (a row of ``queries``; its ``sizes[n]`` candidates next in ``candidates``), the index of
    the candidate it scores highest, the first of equal scores (``argmax``)."""
    picks, at = [], 0
    for query, k in zip(queries, sizes):
        picks.append(int(np.argmax((candidates[at: at + k] * query).sum(-1).numpy())))
        at += k
    return picks


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Accuracy per subset and direction, and each direction's mean over the six subsets (null unless all are
    there: ``partial`` says which are not); ``outcomes`` per query; the labelled averages and the blind baseline
    of the image -> text queries (``blind``; a text -> image query has none, `validity.TEXT_TO_IMAGE`)."""
    features, picks = {}, {}
    for part, items in data["items"].items():
        if items:
            query_of, candidates_of = ((encoder.images, encoder.texts) if part.endswith("/i2t") else
                                       (encoder.texts, encoder.images))
            features[part] = (query_of([it[1] for it in items]), candidates_of([c for it in items for c in it[2]]),
                              [len(it[2]) for it in items])
        picks[part] = first_of_best(*features[part]) if items else []
    outcomes = outcomes_of(data, picks)
    metrics = reported(outcomes)
    result = {"metrics": metrics, "n": {s: len(v) for s, v in data["items"].items()}, "skipped": data["skipped"],
              "outcomes": outcomes, "averages": averages(outcomes["metrics"])}
    result |= partial("SPEC", data.get("missing", []), len(SUBSETS), [d for d in DIRECTIONS if metrics[d] is None],
                      "subsets")
    i2t = {part: f for part, f in features.items() if part.endswith("/i2t")}
    pictures = [it[1] for part in i2t for it in data["items"][part]]
    if pictures:  # the mean of the pictures that choose (i2t); a t2i query chooses among pictures: no blind
        unseen = [m for m in metrics if m == "t2i" or m.endswith("/t2i")]
        result["blind"] = blind_of_parts(first_of_best, i2t, pictures, lambda picks: outcomes_of(
            {"items": {p: data["items"][p] for p in i2t}}, picks), not_applicable=unseen)
    return result


def outcomes_of(data: dict, picks: dict[str, list[int]]) -> dict:
    """The series of the queries' answers (each pick the right candidate or not) per subset and direction, and the
    recipes: each direction the mean over the six subsets, null unless all six have a score."""
    answers = {part: series([it[0] for it in items], [it[4] for it in items],
                            [p == it[3] for p, it in zip(picks[part], items)])
               for part, items in data["items"].items()}
    recipes = {part: {"mean": part} for part in answers}
    for direction in DIRECTIONS:
        parts = [f"{s}/{direction}" for s in SUBSETS]
        if any(p in answers for p in parts):
            for p in parts:  # a subset not there: an empty part, so the mean over the six has no value
                answers.setdefault(p, series([], [], []))
                recipes.setdefault(p, {"mean": p, "part": True})
            recipes[direction] = {"macro": parts, "complete": True}
    return {"series": answers, "metrics": recipes}


def item_chances(data: dict) -> dict:
    """Each query's chance (`chance.levels`): captions by `chance.pick_chance`; pictures distinct files at
    random, 1/k, or 0 when the right one is a file listed earlier too."""
    def chance(part: str, item) -> float:
        if part.endswith("/i2t"):
            return pick_chance(item[2], item[3])
        files = [c.path for c in item[2]]
        return 0.0 if files[item[3]] in files[:item[3]] else 1 / len(set(files))

    return {part: [(it[0], chance(part, it)) for it in items] for part, items in data["items"].items()}
