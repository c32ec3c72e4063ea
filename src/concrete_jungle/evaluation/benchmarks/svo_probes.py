"""SVO-Probes (Hendricks & Nematzadeh 2021, "Probing Image-Language Transformers for Verb Understanding"): a
sentence with a positive picture and a negative one that differs in the subject, the verb or the object.

Data: the release (google-deepmind/svo_probes), unchanged: ``svo_probes.csv`` with the columns ``sentence,
pos_triplet, neg_triplet, subj_neg, verb_neg, obj_neg, pos_url, neg_url, pos_image_id, neg_image_id`` (and an
``index`` column, which keys the rows when present). The pictures are only given as web addresses
(``image_urls.txt``), many of them gone: the pictures one could fetch go in one folder, each named by its image id
(``<image id>.jpg``, or another picture extension). Rows whose pictures are not there are skipped and counted with
``skip_missing``; every published number is on such a remainder.

The official notebook (``probing_image_text_models.ipynb``) scores models that say yes or no to each sentence and
picture, which a contrastive model does not. For contrastive models the rule is the pairwise one of Bugliarello et
al. 2023 ("Measuring Progress in Fine-grained Vision-and-Language Understanding", with Hendricks and Nematzadeh
among the authors), ``notebooks/SVO.ipynb`` and its CLIP scorer (e-bug/fine-grained-evals, commit 6cc5fc1), read for
this module: a text -> image choice, right when the sentence scores the positive picture **strictly** above the
negative one (a tie is wrong); pictures converted to RGB. The rows each kind holds are the official notebook's
(``probing_image_text_models.ipynb``, google-deepmind/svo_probes, commit 206219e): a row is of a kind when that
kind's negative flag alone is true (a row with two flags true is in no kind, counted in ``in_no_kind`` and noted,
where Bugliarello et al.'s if / elif puts it in the first), and a kind's rows are taken once each (the notebook's
``drop_duplicates`` over the sentence and picture: here a row repeating an earlier row's sentence, positive and
negative picture is dropped, counted in ``duplicates`` and noted). Reported: the accuracy per kind (``subj_neg``,
``verb_neg``, ``obj_neg``, micro over the kind's rows), ``SVO-Probes``, their mean (macro, the number the field's
widest comparison, vl_compo by Oh et al. 2024, gives: its published per-model results are reproduced by this mean),
and ``SVO-Probes (micro)``, the share of all rows (Bugliarello et al.'s overall). A row naming no kind is an error,
as is an ``index`` given to two rows (results match rows by it). Rows of one positive picture are one unit of
resampling (`stats`).
"""

from __future__ import annotations

from pathlib import Path

from ...outcomes import reported, series
from ...records import file_digest
from ..checks import BenchmarkDataError, check_images, csv_rows, image_path, shown, text_of
from ..encoding import Crop, Encoder
from ..validity import MICRO, averages, blind_block

COLUMNS = ("sentence", "subj_neg", "verb_neg", "obj_neg", "pos_image_id", "neg_image_id")
KINDS = ("subj_neg", "verb_neg", "obj_neg")
EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")
ALL = "all"  # the series of every row, which the micro average reads
LAYOUT = ("<root>/svo_probes/svo_probes.csv (the release) and <root>/svo_probes/images/<image id>.jpg (each picture "
          "fetched from its address, named by its id; another picture extension also works)")


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """Rows per kind: (key, the sentence, positive Crop, negative Crop); every picture checked before any model
    loads."""
    folder = Path(root) / "svo_probes"
    path = folder / "svo_probes.csv"
    if not path.is_file():
        raise BenchmarkDataError(f"{path} not found; expected layout: {LAYOUT}")
    pictures = _pictures(folder / "images")
    data: dict[str, list[tuple]] = {kind: [] for kind in KINDS}
    keys: dict[str, int] = {}
    seen: set[tuple[str, str, str]] = set()
    in_no_kind, duplicates = [], []
    for line, row in csv_rows(path, COLUMNS, LAYOUT):
        where = f"line {line}"
        flags = [_flag(path, where, row, kind) for kind in KINDS]
        if not any(flags):
            raise BenchmarkDataError(f"{path}, {where}: none of subj_neg, verb_neg, obj_neg is True; each row's "
                                     "negative differs in one of them")
        ids = [(row[c] or "").strip() for c in ("pos_image_id", "neg_image_id")]
        for column, value in zip(("pos_image_id", "neg_image_id"), ids):
            if not value:
                raise BenchmarkDataError(f"{path}, {where}: {column} is empty; each row names its two pictures")
        key = (row.get("index") or "").strip() or str(line)
        if key in keys:
            raise BenchmarkDataError(f"{path}: index {key} is on lines {keys[key]} and {line}; each row needs an "
                                     "index of its own (results match rows by it)")
        keys[key] = line
        sentence = text_of(row["sentence"], path, where, "sentence")
        if sum(flags) > 1:  # the notebook's kinds take a row whose negative differs in that kind alone
            in_no_kind.append(key)
            continue
        kind = KINDS[flags.index(True)]
        if (sentence, *ids) in seen:  # the notebook's drop_duplicates
            duplicates.append(key)
            continue
        seen.add((sentence, *ids))
        crops = [Crop(pictures.get(i) or image_path(folder / "images", f"{i}.jpg")) for i in ids]
        data[kind].append((key, sentence, *crops))
    data = {kind: rows for kind, rows in data.items() if rows}
    problems, sha256 = check_images([c.path for rows in data.values() for it in rows for c in it[2:]], LAYOUT,
                                    skip_missing)

    def usable(item) -> bool:
        return item[2].path not in problems and item[3].path not in problems

    return {"items": {k: [it for it in rows if usable(it)] for k, rows in data.items()},
            "skipped": {k: sum(not usable(it) for it in rows) for k, rows in data.items()},
            "in_no_kind": len(in_no_kind), "duplicates": len(duplicates),
            "notes": _notes(in_no_kind, "have more than one of subj_neg, verb_neg, obj_neg True: in no kind, as the "
                            "official notebook counts them") +
            _notes(duplicates, "repeat an earlier row of their kind (sentence, pos_image_id, neg_image_id): taken "
                   "once, as the official notebook's drop_duplicates takes them"),
            "files": {path: file_digest(path)} | sha256}


def _notes(keys: list[str], why: str) -> list[str]:
    return [f"{len(keys)} row(s) (index {', '.join(keys[:5])}{', ...' if len(keys) > 5 else ''}) {why}"] if keys else []


def _pictures(folder: Path) -> dict[str, Path]:
    """Each picture of the folder by its id (its name without the extension); one file per id."""
    found: dict[str, Path] = {}
    for p in sorted(folder.iterdir()) if folder.is_dir() else []:
        if p.suffix.lower() in EXTENSIONS:
            if p.stem in found:
                raise BenchmarkDataError(f"{folder}: {found[p.stem].name} and {p.name} are both picture {p.stem!r}; "
                                         "keep one file per image id")
            found[p.stem] = p
    return found


def _flag(path: Path, where: str, row: dict, column: str) -> bool:
    value = (row[column] or "").strip().lower()
    if value not in ("true", "false"):
        raise BenchmarkDataError(f"{path}, {where}: {column} is {shown(row[column])}, not True or False")
    return value == "true"


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Accuracy per kind, their mean and the share of all rows, labelled (``averages``); ``outcomes`` per row
    (`stats`); no blind baseline: a sentence chooses between pictures (`validity.TEXT_TO_IMAGE`)."""
    answers, everything = {}, ([], [], [])
    for kind, rows in data["items"].items():
        right = []
        if rows:
            texts = encoder.texts([it[1] for it in rows])
            positive, negative = encoder.images([it[2] for it in rows]), encoder.images([it[3] for it in rows])
            right = ((texts * positive).sum(-1) > (texts * negative).sum(-1)).tolist()  # strict: a tie is wrong
        keys, units = [it[0] for it in rows], [it[2].path.name for it in rows]
        answers[kind] = series(keys, units, right)
        for whole, part in zip(everything, (keys, units, right)):
            whole.extend(part)
    answers[ALL] = series(*everything)
    recipes = {kind: {"mean": kind} for kind in data["items"]}
    for kind in KINDS:  # a kind without rows: no mean over the three kinds, as the field's number needs all three
        answers.setdefault(kind, series([], [], []))
        recipes.setdefault(kind, {"mean": kind, "part": True})
    recipes |= {"SVO-Probes": {"macro": list(KINDS), "complete": True}, "SVO-Probes (micro)": {"mean": ALL}}
    outcomes = {"series": answers, "metrics": recipes}
    metrics = reported(outcomes)
    pictures = len({c.path for rows in data["items"].values() for it in rows for c in it[2:]})
    return {"metrics": metrics, "n": {k: len(v) for k, v in data["items"].items()}, "skipped": data["skipped"],
            "in_no_kind": data["in_no_kind"], "duplicates": data["duplicates"],
            "notes": data["notes"], "outcomes": outcomes,
            "averages": averages(recipes) | {"SVO-Probes (micro)": MICRO},
            "blind": blind_block(None, pictures, not_applicable=list(metrics))}  # sentences choose pictures


def item_chances(data: dict) -> dict:
    """Each row's chance (`chance.levels`): 1/2, or 0 when both pictures are one file (a tie, wrong)."""
    out = {kind: [(it[0], 0.0 if it[2] == it[3] else 0.5) for it in rows] for kind, rows in data["items"].items()}
    return out | {ALL: [row for rows in out.values() for row in rows]}
