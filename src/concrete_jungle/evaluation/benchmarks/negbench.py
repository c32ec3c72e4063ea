"""NegBench (Alhamoud et al. 2025, "Vision-Language Models Do Not Understand Negation"): negation in two tasks, a
picture's choice among four captions that affirm or negate objects (``negbench``, MCQ) and text -> image retrieval
with queries that negate an object (``negbench_retrieval``).

Data: the release's CSV files (github.com/m1k2zoo/negbench, ``datasets.md`` at commit 2ac009b: its Google Drive
folder, whose ``images/`` holds the image tasks' CSVs), unchanged, in ``negbench/images/`` (or directly in
``negbench/``), with the public pictures they are built on. Each CSV names its picture by the authors' own path
(``datasets.md`` asks a user to rewrite them); we read the file unchanged and find each picture by its file name in
the folder its source downloads to: COCO 2017 val in ``coco/val2017/``, VOC2007 test (``VOCtest_06-Nov-2007.tar``
extracted in ``voc2007/``) in ``voc2007/VOCdevkit/VOC2007/JPEGImages/``. Each picture is handed to the transform as
opened, as the official datasets hand it (``Image.open(path)``, open_clip's transform converting to RGB).

- MCQ (``{COCO_val,VOC2007}_mcq_llama3.1_rephrased.csv``, the files ``scripts/evaluate_images.sh`` evaluates in its
  main setting): per row ``image_path``, ``caption_0`` .. ``caption_3``, ``correct_answer`` (the right caption's
  index; 0 in the released construction, ``create_mcq.py``) and ``correct_answer_template``, the right caption's
  type: ``positive`` (the paper's affirmation, "features A and B"), ``negative`` ("does not feature N") or ``hybrid``
  ("features B, but not N"). Rule, ``benchmarks/src/evaluation/mcq.py`` ``evaluate_model`` (commit e11f92e, unchanged
  through 2ac009b): ``torch.argmax`` over the cosines of the picture with its four captions, the first of equal
  scores winning (so with the right caption first a tie is right); accuracy over all rows (``total_accuracy``:
  ``coco_mcq``, ``voc2007_mcq``) and per type of the right caption (``<set>/positive`` ...). Up to three questions
  share a picture: a row's key is its position among the file's rows, its unit of resampling its picture. Beside
  them, the blind baseline (`validity`: every picture replaced by the mean picture). The official breakdown of wrong
  answers by the chosen caption's type is not reported. Headline: the two sets' accuracies.
- Retrieval (``COCO_val_retrieval.csv``, ``COCO_val_negated_retrieval_llama3.1_rephrased_affneg_true.csv``): per row
  ``filepath`` and ``captions``, a Python list of its queries (read with ``ast.literal_eval``; the official loader
  ``eval``s it). Rule, ``benchmarks/src/evaluation/retrieval.py`` (commit e6576ea, unchanged through 2ac009b),
  clip_benchmark's: the scores ``texts @ images.T``, every row one image column (a picture on two rows is two
  columns), a query's one positive its row's image, a hit at K when it is among ``torch.topk``'s K (`retrieval.
  first_hit`); reported, as the official code reports them, image retrieval Recall@1 and @5 (``coco/...``: the
  original captions, ``coco_negated/...``: the queries with negation). Headline: ``coco_negated`` Recall@1 (the paper
  leads with Recall@5, given beside it; a chance level is computed for a first place only). A query's key is
  ``<row>#<n>``.

Not read: the synthetic sets (their generated pictures are not public), MSR-VTT (videos: the official code averages
the features of sampled frames, which needs a video decoder) and the CheXpert files (medical pictures, a task of
their own). Scores in fp32 (the official retrieval runs under autocast on a GPU).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

import torch

from ...outcomes import reported, series
from ...records import file_digest
from ..chance import pick_chance
from ..checks import BenchmarkDataError, check_images, csv_rows, image_path, release_folder, unit_of
from ..choice import subset_picks
from ..encoding import Encoder
from ..validity import blind_block
from .retrieval import first_hit

PICTURES = {"coco": ("coco", "val2017"), "voc2007": ("voc2007", "VOCdevkit", "VOC2007", "JPEGImages")}
MCQ = {"coco_mcq": ("COCO_val_mcq_llama3.1_rephrased.csv", "coco"),
       "voc2007_mcq": ("VOC2007_mcq_llama3.1_rephrased.csv", "voc2007")}
RETRIEVAL = {"coco": ("COCO_val_retrieval.csv", "coco"),
             "coco_negated": ("COCO_val_negated_retrieval_llama3.1_rephrased_affneg_true.csv", "coco")}
TYPES = ("positive", "negative", "hybrid")
OPTIONS = tuple(f"caption_{k}" for k in range(4))
RECALL_AT = (1, 5)
MCQ_TASK, RETRIEVAL_TASK = "mcq", "retrieval"
PLACES = ("<root>/negbench/images/ (the release's Google Drive folder downloaded into negbench/: gdown --folder "
          "https://drive.google.com/drive/folders/1kSEq0mkV1t1T8GuOAM65iz_iAA7e5gxB -O <root>/negbench; or the CSVs "
          "directly in negbench/), each picture found by its file name in <root>/coco/val2017/ (COCO 2017 val) or "
          "<root>/voc2007/VOCdevkit/VOC2007/JPEGImages/ (VOCtest_06-Nov-2007.tar extracted in voc2007/)")
LAYOUT = (f"{{COCO_val,VOC2007}}_mcq_llama3.1_rephrased.csv (image_path, caption_0..caption_3, correct_answer, "
          f"correct_answer_template) in {PLACES}")
RETRIEVAL_LAYOUT = (f"COCO_val_retrieval.csv and COCO_val_negated_retrieval_llama3.1_rephrased_affneg_true.csv "
                    f"(filepath, captions: a list of queries) in {PLACES}")


class Question(NamedTuple):
    key: str  # the row's position among the file's rows
    image: Path
    options: tuple[str, ...]
    right: int
    kind: str  # the right caption's type, one of TYPES


class Column(NamedTuple):
    key: str
    image: Path
    queries: tuple[str, ...]


def picture(root: Path, source: str, value: str, path: Path, line: int, layout: str) -> Path:
    """The picture a row names by the authors' path: its file name in the folder of ``source`` (`PICTURES`)."""
    name = value.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    if not name:
        raise BenchmarkDataError(f"{path}, line {line}: the row names no picture; expected layout: {layout}")
    return image_path(root.joinpath(*PICTURES[source]), name)


def filled(row: dict, field: str, path: Path, line: int) -> str:
    value = row.get(field) or ""
    if not value.strip():
        raise BenchmarkDataError(f"{path}, line {line}: {field} is empty; use the released file unchanged")
    return value


def question(root: Path, source: str, n: int, line: int, row: dict, path: Path) -> Question:
    right, kind = row["correct_answer"].strip(), row["correct_answer_template"].strip()
    if right not in ("0", "1", "2", "3"):
        raise BenchmarkDataError(f"{path}, line {line}: correct_answer is {right!r}, not the index of a caption (0 to "
                                 f"3); expected layout: {LAYOUT}")
    if kind not in TYPES:
        raise BenchmarkDataError(f"{path}, line {line}: correct_answer_template is {kind!r}, not one of "
                                 f"{', '.join(TYPES)}; expected layout: {LAYOUT}")
    return Question(str(n), picture(root, source, filled(row, "image_path", path, line), path, line, LAYOUT),
                    tuple(filled(row, f, path, line) for f in OPTIONS), int(right), kind)


def column(root: Path, source: str, n: int, line: int, row: dict, path: Path) -> Column:
    cell = filled(row, "captions", path, line)
    try:
        queries = ast.literal_eval(cell)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        queries = None
    if not isinstance(queries, list) or not all(isinstance(q, str) and q.strip() for q in queries):
        raise BenchmarkDataError(f"{path}, line {line}: captions is not a list of texts (['a query', ...]); expected "
                                 f"layout: {RETRIEVAL_LAYOUT}")
    image = picture(root, source, filled(row, "filepath", path, line), path, line, RETRIEVAL_LAYOUT)
    return Column(str(n), image, tuple(queries))


def read_sets(root: Path, sets: dict, columns: tuple[str, ...], read, layout: str, skip_missing: bool,
              task: str) -> dict:
    """Per set of ``sets`` whose file is there, its rows as ``read`` makes them; every picture checked before any
    model loads; a note naming each set whose file is missing, an error when all are; ``task``, which `evaluate`
    dispatches on."""
    folder = release_folder(Path(root) / "negbench", "images", "*.csv")
    found = {s: folder / name for s, (name, _) in sets.items() if (folder / name).is_file()}
    if not found:
        raise BenchmarkDataError(f"{folder} holds none of {', '.join(name for name, _ in sets.values())}; expected "
                                 f"layout: {layout}")
    data, files = {}, {}
    for s, path in found.items():
        files[path] = file_digest(path)
        data[s] = [read(Path(root), sets[s][1], n, line, row, path)
                   for n, (line, row) in enumerate(csv_rows(path, columns, layout))]
    problems, sha256 = check_images([it.image for rows in data.values() for it in rows], layout, skip_missing)
    notes = [f"{folder / name} is not there: set {s} is not scored" for s, (name, _) in sets.items()
             if s not in found]
    return {"task": task, "items": {s: [it for it in rows if it.image not in problems] for s, rows in data.items()},
            "skipped": {s: sum(it.image in problems for it in rows) for s, rows in data.items()}, "notes": notes,
            "files": files | sha256}


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """The MCQ sets whose file is there (`Question` rows), every row and picture checked."""
    return read_sets(root, MCQ, ("image_path", *OPTIONS, "correct_answer", "correct_answer_template"), question,
                     LAYOUT, skip_missing, MCQ_TASK)


def load_retrieval_root(root: Path, skip_missing: bool = False) -> dict:
    """The retrieval sets whose file is there (`Column` rows: a picture and its queries), every row and picture
    checked."""
    return read_sets(root, RETRIEVAL, ("filepath", "captions"), column, RETRIEVAL_LAYOUT, skip_missing,
                     RETRIEVAL_TASK)


def mcq_outcomes(data: dict, picks: dict) -> dict:
    """A series per set (each row right or not) and per type of the right caption, with their recipes."""
    answers = {}
    for s, rows in data["items"].items():
        right = [bool(p == q.right) for p, q in zip(picks[s].tolist(), rows)]
        answers[s] = series([q.key for q in rows], [unit_of(q.image) for q in rows], right)
        for kind in TYPES:
            at = [i for i, q in enumerate(rows) if q.kind == kind]
            answers[f"{s}/{kind}"] = series([rows[i].key for i in at], [unit_of(rows[i].image) for i in at],
                                            [right[i] for i in at])
    return {"series": answers, "metrics": {name: {"mean": name} for name in answers}}


def evaluate(encoder: Encoder, data: dict) -> dict:
    """The MCQ sets (`evaluate_mcq`) or the retrieval sets (`evaluate_retrieval`), as ``data`` holds."""
    return (evaluate_retrieval if data["task"] == RETRIEVAL_TASK else evaluate_mcq)(encoder, data)


def evaluate_mcq(encoder: Encoder, data: dict) -> dict:
    """Per MCQ set: its accuracy, per type of the right caption, and the blind baseline; ``outcomes`` per row."""
    chosen = subset_picks(encoder, {s: ([q.image for q in rows], [list(q.options) for q in rows])
                                    for s, rows in data["items"].items()})
    outcomes = mcq_outcomes(data, chosen["picks"])
    return {"metrics": reported(outcomes), "n": {s: len(rows) for s, rows in data["items"].items()},
            "skipped": data["skipped"], "outcomes": outcomes,
            "blind": blind_block(mcq_outcomes(data, chosen["blind"]), chosen["pictures"]),
            "notes": data["notes"]}


def ranks(encoder: Encoder, rows: list[Column]) -> list[int]:
    """Each query's rank band (`retrieval.first_hit`) among the images of ``rows``, its own row's image the one
    positive."""
    owner = [n for n, it in enumerate(rows) for _ in it.queries]
    if not owner:
        return []
    # each distinct picture scored once and its columns copied, so the columns of a picture on two rows tie exactly
    # (a matrix product may round two equal columns apart, and decide the tie by that)
    distinct, column_of = torch.unique(encoder.images([it.image for it in rows]), dim=0, return_inverse=True)
    scores = (encoder.texts([q for it in rows for q in it.queries]) @ distinct.T)[:, column_of]
    return first_hit(scores, [[o] for o in owner])


def evaluate_retrieval(encoder: Encoder, data: dict) -> dict:
    """Per retrieval set: image retrieval Recall@1 and @5; ``outcomes`` holds each query's rank band."""
    answers, recipes = {}, {}
    for s, rows in data["items"].items():
        keys = [(f"{it.key}#{k}", unit_of(it.image)) for it in rows for k in range(len(it.queries))]
        answers[f"{s}/t2i_rank"] = series([k for k, _ in keys], [u for _, u in keys], ranks(encoder, rows))
        recipes |= {f"{s}/image_retrieval_recall@{k}": {"mean": f"{s}/t2i_rank", "below": k} for k in RECALL_AT}
    outcomes = {"series": answers, "metrics": recipes}
    return {"metrics": reported(outcomes), "outcomes": outcomes, "skipped": data["skipped"],
            "n": {s: {"images": len(rows), "queries": sum(len(it.queries) for it in rows)}
                  for s, rows in data["items"].items()},
            "notes": data["notes"]}


def item_chances(data: dict) -> dict:
    """Each row's chance of a right pick (`chance.pick_chance`: the first of equal scores wins) or, for retrieval,
    each query's chance of a first place among its set's images."""
    if data["task"] == RETRIEVAL_TASK:
        return {f"{s}/t2i_rank": 1 / len(rows) for s, rows in data["items"].items() if rows}
    return {s: [(q.key, pick_chance(list(q.options), q.right)) for q in rows] for s, rows in data["items"].items()}
