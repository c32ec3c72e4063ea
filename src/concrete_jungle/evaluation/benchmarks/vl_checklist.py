"""VL-CheckList (Zhao et al. 2022): a picture with a true phrase and a negative that changes one object, attribute
or relation; Object (location: center, mid, margin; size: large, medium, small), Attribute (action, color, material,
size, state) and Relation (action, spatial), each from several sources (Visual Genome, VAW, SWiG, HAKE).

Data: the release (om-ai-lab/VL-CheckList), unchanged: its ``data/`` folder of JSON files, each a list of ``[image
path, {"POS": [texts], "NEG": [texts]}]``, and the pictures of its ``DATASETS.md`` under ``vg/``, ``swig/`` and
``hake/`` (the image path is relative to the source's folder). Which file and picture folder make up each category
and source is the release's ``corpus/v1/<category>/<source>.yaml`` (``ANNO_PATH``, ``IMG_ROOT``), written out in
`CATEGORIES`.

The official rule is the ``itc`` task of ``vl_checklist/evaluate.py`` (om-ai-lab/VL-CheckList, commit 6f8d6a3), read
for this module, with the released config ``configs/sample.yaml`` (``MAX_NUM: 2000``): per file, the items whose
picture exists, in file order, cut to the first ``MAX_NUM / 2`` = 1,000; the picture scores the first POS text and
the first NEG text, and the item is right when the positive scores **strictly** higher (a tie is wrong); a file's
score is its share of right items. The release's CLIP engine cannot run this task (it scores each text alone, so
its softmax is always 1), so a contrastive model's score is the cosine similarity, as the field scores it; the
pictures are passed as opened, as that engine passes them. A category's score is the release's ``radar.py`` over
``corpus.json``: the mean over its sources of the mean over each source's files (macro). Reported: each category
(``Object/Location/center`` ...), its files' scores as parts, ``Object``, ``Attribute`` and ``Relation`` (the mean of
their categories) and ``VL-CheckList``, the mean of those three, as the field's widest comparison (vl_compo, Oh et
al. 2024) gives VL-CheckList's number. Two departures: the release rounds each file's score to 4 decimals before the
means (we do not: a difference below 0.00005), and a missing picture is an error here (naming how many are missing),
where the release drops it silently: with ``skip_missing`` (``--skip-missing``) we drop it before the cut, as the
release does, which gives the release's own number, and say how many were dropped (``dropped_missing`` and a
note). A
source, a category, an aspect and ``VL-CheckList`` have a value only when all their files are there (the release's
radar stops at a missing file): with part of the release they are null, ``partial`` in the result names the missing
files, and the files present keep their scores. All averages are macro (labelled in ``averages``). The blind baseline
(``blind``, `validity.blind`): the same strict rule with every picture replaced by the mean picture of all files.
"""

from __future__ import annotations

from pathlib import Path

from ...outcomes import reported, series
from ...records import file_digest
from ..chance import pick_chance
from ..checks import BenchmarkDataError, check_images, image_path, load_json_file, partial, shown, unit_of
from ..encoding import Encoder
from ..validity import averages, blind_of_parts

PER_FILE = 1000  # MAX_NUM 2000 of the released config, halved by the itc task
SWIG = ("agent", "destination", "item", "tool")
LAYOUT = ("<root>/vl_checklist/data/{Object,Attribute,Relation}/... (the release's data/ folder) and the pictures "
          "under <root>/vl_checklist/{vg,swig,hake}/ (the release's DATASETS.md)")


def _object(aspect: str, value: str) -> dict[str, list[tuple[str, str]]]:
    where = f"data/Object/{aspect}"
    short = aspect.lower()
    return {"vg": [(f"{where}/vg_{short}/vg_{who}_{value}.json", "vg") for who in ("obj", "subj")],
            "swig": [(f"{where}/swig_{short}/swig_{s}/swig_{s}_{value}.json", "swig") for s in SWIG],
            "hake": [(f"{where}/hake_{short}/hake_obj_{value}.json", "hake")]}


# category -> source -> [(file under the release, its picture folder)]: corpus/v1/*.yaml grouped as corpus.json does
CATEGORIES: dict[str, dict[str, list[tuple[str, str]]]] = {
    **{f"Object/Location/{v}": _object("Location", v) for v in ("center", "mid", "margin")},
    **{f"Object/Size/{v}": _object("Size", v) for v in ("large", "medium", "small")},
    **{f"Attribute/{a}": {source: [(f"data/Attribute/{source}/{a}.json", "vg")] for source in ("vg", "vaw")}
       for a in ("action", "color", "material", "size", "state")},
    "Relation/action": {"vg": [("data/Relation/vg/action.json", "vg")],
                        "swig": [("data/Relation/swig_action.json", "swig")],
                        "hake": [("data/Relation/hake_action.json", "hake")]},
    "Relation/spatial": {"vg": [("data/Relation/vg/spatial.json", "vg")]},
}


ASPECTS = ("Object", "Attribute", "Relation")
FILES = list(dict.fromkeys(f for sources in CATEGORIES.values() for entries in sources.values() for f, _ in entries))


def load_root(root: Path, skip_missing: bool = False, per_file: int = PER_FILE) -> dict:
    """Items per file present (keyed by its path under the release): (key, picture, first POS, first NEG); the first
    ``per_file`` items whose picture is there, every one checked before any model loads."""
    folder = Path(root) / "vl_checklist"
    data: dict[str, list[tuple]] = {}
    files, skipped = {}, {}
    for sources in CATEGORIES.values():
        for name, pictures in (entry for entries in sources.values() for entry in entries):
            path = folder / name
            if not path.is_file() or name in data:
                continue
            files[path] = file_digest(path)
            rows = [_item(path, n, item, folder / pictures) for n, item in enumerate(_listed(path))]
            data[name], skipped[name] = _first_present(rows, per_file, skip_missing)
    if not data:
        raise BenchmarkDataError(f"{folder} holds no VL-CheckList file; expected layout: {LAYOUT}")
    absent = list(dict.fromkeys(it[1] for items in data.values() for it in items if not it[1].exists()))
    if absent:  # only without skip_missing: with it, `_first_present` passed over them
        raise BenchmarkDataError(f"{len(absent)} picture(s) of the VL-CheckList files are missing (the first: "
                                 f"{absent[0]}); expected layout: {LAYOUT}. The release's loader drops missing "
                                 "pictures: pass --skip-missing for its number (they are dropped and counted), or "
                                 "fix the data root.")
    problems, sha256 = check_images([it[1] for items in data.values() for it in items], LAYOUT, skip_missing)
    dropped = sum(skipped.values())
    notes = [f"{dropped} item(s) whose picture is missing were dropped before each file's first {per_file}, as the "
             "release's loader drops them: the scores are the release's own on these pictures"] if dropped else []
    return {"items": {f: [it for it in items if it[1] not in problems] for f, items in data.items()},
            "skipped": {f: skipped[f] + sum(it[1] in problems for it in items) for f, items in data.items()},
            "dropped_missing": dropped, "notes": notes,
            "files": files | sha256, "missing": [f for f in FILES if f not in data]}


def _first_present(rows: list[tuple], per_file: int, skip_missing: bool) -> tuple[list[tuple], int]:
    """The first ``per_file`` rows and none skipped; with ``skip_missing`` the first ``per_file`` rows whose picture
    exists, as the release keeps them, and how many were passed over on the way."""
    if not skip_missing:
        return rows[:per_file], 0
    kept, passed = [], 0
    for row in rows:
        if len(kept) == per_file:
            break
        if row[1].exists():
            kept.append(row)
        else:
            passed += 1
    return kept, passed


def _listed(path: Path) -> list:
    raw = load_json_file(path, LAYOUT)
    if not isinstance(raw, list):
        raise BenchmarkDataError(f"{path}: VL-CheckList files are a list of [image path, {{\"POS\": [...], \"NEG\": "
                                 f"[...]}}]; expected layout: {LAYOUT}")
    return raw


def _item(path: Path, n: int, item, pictures: Path) -> tuple:
    shaped = isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], dict)
    pos, neg = (item[1].get("POS"), item[1].get("NEG")) if shaped else (None, None)
    if not all(isinstance(t, list) and t and isinstance(t[0], str) for t in (pos, neg)):
        raise BenchmarkDataError(f"{path}: item {n} is {shown(item)}, not [image path, {{\"POS\": [text, ...], "
                                 f"\"NEG\": [text, ...]}}]; expected layout: {LAYOUT}")
    return str(n), image_path(pictures, item[0]), pos[0], neg[0]


def strictly_above(pictures, positives, negatives) -> list[bool]:
    """The rule: per item, its picture scores the positive strictly above the negative (a tie is wrong)."""
    return ((pictures * positives).sum(-1) > (pictures * negatives).sum(-1)).tolist()


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Each category, Object, Attribute, Relation and their mean (each whole only on all its files: a missing file
    leaves them without a value, ``partial`` says which); ``outcomes`` per item (`stats`); the labelled averages
    and the blind baseline (``blind``: `validity.blind`)."""
    features, answers = {}, {}
    for name, items in data["items"].items():
        if items:
            features[name] = (encoder.images([it[1] for it in items]), encoder.texts([it[2] for it in items]),
                              encoder.texts([it[3] for it in items]))
        answers[name] = strictly_above(*features[name]) if items else []
    outcomes = outcomes_of(data, answers)
    metrics = reported(outcomes)
    result = {"metrics": metrics, "n": {f: len(v) for f, v in data["items"].items()}, "skipped": data["skipped"],
              "dropped_missing": data["dropped_missing"], "notes": data["notes"], "outcomes": outcomes,
              "averages": averages(outcomes["metrics"])}
    result |= partial("VL-CheckList", data.get("missing", []), len(FILES),
                      [m for m in ("VL-CheckList", *ASPECTS, *CATEGORIES) if metrics[m] is None])
    if features:
        pictures = [it[1] for name in features for it in data["items"][name]]
        result["blind"] = blind_of_parts(strictly_above, features, pictures, lambda answers: outcomes_of(data, answers))
    return result


def outcomes_of(data: dict, answers: dict[str, list[bool]]) -> dict:
    """The series of the answers per release file (empty for a file not there) and the recipes: each source the mean
    of its files, each category of its sources, each aspect of its categories and VL-CheckList of the aspects, each
    only when all its parts have a score (the release's radar)."""
    series_, recipes = {}, {}
    for f in FILES:
        items = data["items"].get(f, [])
        series_[f] = series([it[0] for it in items], [unit_of(it[1]) for it in items], answers.get(f, []))
        recipes[f] = {"mean": f, "part": True}
    for category, sources in CATEGORIES.items():
        for source, entries in sources.items():
            recipes[f"{category}/{source}"] = {"macro": [f for f, _ in entries], "complete": True, "part": True}
        recipes[category] = {"macro": [f"{category}/{s}" for s in sources], "complete": True}
    recipes |= {aspect: {"macro": [c for c in CATEGORIES if c.startswith(f"{aspect}/")], "complete": True}
                for aspect in ASPECTS}
    recipes["VL-CheckList"] = {"macro": list(ASPECTS), "complete": True}
    return {"series": series_, "metrics": recipes}


def item_chances(data: dict) -> dict:
    """Each item's chance (`chance.levels`): the positive strictly above the negative, [NEG, POS] with the
    positive second, so a tie is wrong."""
    return {f: [(it[0], pick_chance([it[3], it[2]], 1)) for it in items] for f, items in data["items"].items()}
