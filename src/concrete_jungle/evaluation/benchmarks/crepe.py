"""CREPE (Ma et al. 2023, "Can Vision-Language Foundation Models Reason Compositionally?"), productivity: a region
of a Visual Genome picture, its caption of complexity 4 to 12 (the number of scene-graph atoms it names) and hard
negative captions of one kind: ``atom`` (one atom replaced), ``swap`` (two atoms swapped) or ``negate`` (an atom
negated). The picture must rank its caption first among them: image -> text retrieval, Recall@1.

Data: the release (RAIVNLab/CREPE, ``data/prod_hard_negatives.zip``), unchanged:
``<type>/prod_vg_hard_negs_<type>_complexity_<c>.csv`` with the columns ``image_id, x, y, width, height, caption,
hard_negs`` (``hard_negs`` a Python list literal of captions), and the Visual Genome pictures ``<image_id>.jpg`` in
``VG_100K/`` or ``VG_100K_2/`` (looked up in that order, as the official code does).

The official rule is ``crepe_prod_eval_clip.py`` with ``crepe_eval_utils.py`` (RAIVNLab/CREPE, commit 1fa81c4), read for
this module: the picture converted to RGB and cut to the region (``TF.crop(top=y, left=x, height, width)``, i.e. PIL's
``crop((x, y, x + width, y + height))``; a region wholly outside its picture is cut to black pixels and scored so, as
the official code does (torchvision pads the crop with zeros), and counted, ``boxes_outside_image`` with a note); the
texts ``[caption] + hard_negs``, tokenized and cut to the context; the rank of the caption (listed first) in
``torch.argsort(scores, descending=True)``; Recall@1 is the share of rank 0. Under equal scores torch's sort on the CPU,
where the official code sorts, keeps lists of up to 16 texts in order, so a negative that ties the caption ranks after
it: a tie is right (a longer list's order under ties is not defined by torch). The official CLIP script takes each row's
texts as six in a row of its batch (``text_emb[j*6:(j+1)*6]``): it assumes exactly 5 negatives per row, and a row of
another number would shift every later row of its batch onto other rows' texts; its open_clip script
(``crepe_compo_eval_open_clip.py``, batch size 1) ranks each row against its own list, whatever its length. The
release's rows could not be counted here (the productivity files come in a zip that was not readable); we rank each row
against its own negatives, as the open_clip script does, which is the CLIP script's rule wherever a row holds 5, and
count the rows by number of negatives (``negatives`` in the result: ``{"5": rows}`` on a release of 5 throughout), so a
departure shows.

Reported: Recall@1 per kind and complexity (``atom/c4`` ... ``negate/c12``), per kind over all its complexities
(``atom``, ``swap``, ``negate``: the share of all its rows, micro), and ``CREPE``, the mean of the three kinds
(macro; both labelled in ``averages``); beside them, labelled, each kind's mean over its nine files (``atom (mean
over files)``: each complexity weighs alike, whatever its number of rows) and their mean (``CREPE (mean over
files)``). A kind needs its nine files and ``CREPE`` all 27: with part of the release
they have no value, and ``partial`` in the result names the missing files (the files present keep their scores). These
are the numbers the field's widest comparison reports (vl_compo, Oh et al. 2024: productivity ``atom``, ``swap``
and ``negate``, each over 17,698, 7,405 and 17,303 rows, and their mean; its code is not public, the counts are read
from its published per-model results). The systematicity splits are left out: the release says they are only valid
for models pretrained on CC-12M, YFCC-15M or LAION-400M (seen and unseen compounds are defined against those sets),
and the field does not report them. Regions of one picture are one unit of resampling (`stats`). The blind
baseline (``blind``, `validity.blind`): the same rule with every region replaced by the mean of the regions' features.
"""

from __future__ import annotations

import ast
import math
from collections import Counter
from pathlib import Path

from ...outcomes import reported, series
from ...records import file_digest
from ..chance import pick_chance
from ..checks import (
    BenchmarkDataError,
    boxes_outside,
    check_images,
    csv_rows,
    image_path,
    partial,
    release_folder,
    shown,
)
from ..encoding import Crop, Encoder
from ..validity import averages, blind_of_parts

KINDS = ("atom", "swap", "negate")
COMPLEXITIES = range(4, 13)
FOLDERS = ("VG_100K", "VG_100K_2")
COLUMNS = ("image_id", "x", "y", "width", "height", "caption", "hard_negs")
LAYOUT = ("<root>/crepe/data/prod_hard_negatives/{atom,swap,negate}/prod_vg_hard_negs_<type>_complexity_<4..12>.csv "
          "(image_id, x, y, width, height, caption, hard_negs; the repository cloned into <root>/crepe, its "
          "data/prod_hard_negatives.zip unzipped in data/; or prod_hard_negatives/ in <root>/crepe/) and "
          "<root>/crepe/vg/{VG_100K,VG_100K_2}/<image_id>.jpg (Visual Genome)")


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """Rows per kind and complexity (``atom/c4``): (key, Crop of the region, [caption, *hard negatives], picture);
    every file, row and picture checked before any model loads; ``missing``: the release's files not there."""
    folder = Path(root) / "crepe"
    release = release_folder(folder, "data", "prod_hard_negatives/*/")  # the repository cloned into crepe/
    data: dict[str, list[tuple]] = {}
    files, missing = {}, []
    for kind in KINDS:
        for c in COMPLEXITIES:
            path = release / "prod_hard_negatives" / kind / f"prod_vg_hard_negs_{kind}_complexity_{c}.csv"
            if not path.is_file():
                missing.append(f"{kind}/{path.name}")
                continue
            files[path] = file_digest(path)
            rows = csv_rows(path, COLUMNS, LAYOUT)
            data[f"{kind}/c{c}"] = [_row(path, f"c{c}/{n}", row, folder / "vg") for n, row in rows]
    if not data:
        raise BenchmarkDataError(f"{folder} holds no CREPE productivity file; expected layout: {LAYOUT}")
    problems, sha256 = check_images([it[1].path for items in data.values() for it in items], LAYOUT, skip_missing)
    items = {s: [it for it in rows if it[1].path not in problems] for s, rows in data.items()}
    if not any(items.values()):  # pictures placed elsewhere: nothing to score is no result, even with skip_missing
        first = next(it[1].path for rows in data.values() for it in rows)
        raise BenchmarkDataError(f"every one of the {sum(map(len, data.values()))} CREPE rows lacks its Visual Genome "
                                 f"picture (the first: {first}, {problems[first]}); expected layout: {LAYOUT}: put "
                                 f"Visual Genome's VG_100K/ and VG_100K_2/ (or links to them) in {folder / 'vg'}")
    outside_counts, notes = boxes_outside({s: [(it[0], it[1]) for it in rows] for s, rows in items.items()})
    return {"items": items, "skipped": {s: sum(it[1].path in problems for it in rows) for s, rows in data.items()},
            "boxes_outside_image": outside_counts, "notes": notes, "files": files | sha256, "missing": missing}


def _row(path: Path, key: str, row: dict, vg: Path) -> tuple:
    """A row keyed ``c<complexity>/<line>``: one key per row of the kind, whichever file holds it."""
    where = f"{path}, line {key.split('/')[1]}"
    image_id = (row["image_id"] or "").strip()
    if not (image_id.isascii() and image_id.isdigit()):
        raise BenchmarkDataError(f"{where}: image_id {shown(row['image_id'])} is not a Visual Genome image id (a "
                                 "whole number)")
    box = []
    for column in ("x", "y", "width", "height"):
        try:
            value = float(row[column])
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value):
            raise BenchmarkDataError(f"{where}: {column} {shown(row[column])} is not a number; a region is x, y, "
                                     "width, height in pixels")
        box.append(value)
    x, y, w, h = box
    if round(x + w) <= round(x) or round(y + h) <= round(y):
        raise BenchmarkDataError(f"{where}: the region is less than a pixel wide or high (width {row['width']}, "
                                 f"height {row['height']}); give it at least one pixel, or remove the row")
    try:
        negatives = ast.literal_eval(row["hard_negs"] or "")
    except (ValueError, SyntaxError):
        negatives = None
    if not isinstance(negatives, list) or not negatives or not all(isinstance(t, str) for t in negatives):
        raise BenchmarkDataError(f"{where}: hard_negs {shown(row['hard_negs'])} is not a list of captions, as "
                                 "['a ...', 'a ...'] (the release writes them as a Python list)")
    file = f"{image_id}.jpg"
    found = next((vg / f / file for f in FOLDERS if (vg / f / file).is_file()), vg / FOLDERS[0] / file)
    picture = image_path(found.parent, file)
    return key, Crop(picture, (x, y, w, h)), [str(row["caption"]), *negatives], image_id


def ranked_first(pictures, texts, sizes: list[int]) -> list[bool]:
    """The rule: per row (a row of ``pictures``; its ``sizes[n]`` texts next in ``texts``, the caption first), the
    caption scores at least as high as each negative: a tie ranks the caption, listed first, first."""
    right, at = [], 0
    for picture, k in zip(pictures, sizes):
        scores = (texts[at: at + k] * picture).sum(-1)
        at += k
        right.append(bool((scores[1:] <= scores[0]).all()))
    return right


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Recall@1 per kind and complexity, per kind (micro) and their mean (macro), each whole only on the whole
    release (a missing file leaves its kind and ``CREPE`` without a value, ``partial`` says which); ``outcomes`` per
    row (`stats`); how many rows hold how many negatives (``negatives``); the labelled averages and the blind
    baseline (``blind``: `validity.blind`, each region replaced by the mean picture)."""
    features, answers = {}, {}
    for part, items in data["items"].items():
        if items:
            texts = encoder.texts([t for it in items for t in it[2]])
            features[part] = (encoder.images([it[1] for it in items]), texts, [len(it[2]) for it in items])
        answers[part] = ranked_first(*features[part]) if items else []
    outcomes = outcomes_of(data, answers)
    metrics = reported(outcomes)
    counts = Counter(len(it[2]) - 1 for items in data["items"].values() for it in items)
    result = {"metrics": metrics, "n": {s: len(v) for s, v in data["items"].items()}, "skipped": data["skipped"],
              "boxes_outside_image": data["boxes_outside_image"], "notes": data["notes"],
              "outcomes": outcomes, "averages": averages(outcomes["metrics"]),
              "negatives": {str(k): counts[k] for k in sorted(counts)}}
    result |= partial("CREPE", data.get("missing", []), len(KINDS) * len(COMPLEXITIES),
                      [m for m in ("CREPE", *KINDS) if metrics[m] is None])
    if features:
        crops = [it[1] for part in features for it in data["items"][part]]
        result["blind"] = blind_of_parts(ranked_first, features, crops, lambda answers: outcomes_of(data, answers))
    return result


def outcomes_of(data: dict, answers: dict[str, list[bool]]) -> dict:
    """The series of the answers per kind and complexity (each release file's, empty for a file not there) and the
    recipes of the metrics."""
    series_, recipes = {}, {}
    for kind in KINDS:
        for c in COMPLEXITIES:
            part = f"{kind}/c{c}"
            items = data["items"].get(part, [])
            series_[part] = series([it[0] for it in items], [it[3] for it in items], answers.get(part, []))
            recipes[part] = {"mean": part} | ({} if part in data["items"] else {"part": True})  # a file not there
        recipes[kind] = {"micro": [f"{kind}/c{c}" for c in COMPLEXITIES], "complete": True}
        recipes[f"{kind} (mean over files)"] = {"macro": [f"{kind}/c{c}" for c in COMPLEXITIES], "complete": True}
    recipes["CREPE"] = {"macro": list(KINDS), "complete": True}
    recipes["CREPE (mean over files)"] = {"macro": [f"{kind} (mean over files)" for kind in KINDS], "complete": True}
    return {"series": series_, "metrics": recipes}


def item_chances(data: dict) -> dict:
    """Each row's chance (`chance.levels`): its caption first among its distinct texts (a tie is right)."""
    return {part: [(it[0], pick_chance(it[2], 0)) for it in items] for part, items in data["items"].items()}
