"""VisMin-bench (Awal et al. 2024, "VisMin: Visual Minimal-Change Understanding"): 2,084 items of two images and
two captions that differ in one aspect only, in four categories: object, attribute, counting and relation.

Data: the Hugging Face dataset ``mair-lab/vismin-bench``, published as a ``datasets.save_to_disk`` folder
(``data/`` with ``dataset_dict.json`` and ``test/``; fields ``id``, ``text_0``, ``text_1``, ``image_0``,
``image_1``, ``category``, and the questions of its VQA form), downloaded into ``<root>/vismin/`` and read there
offline with pyarrow (`two_by_two.release_rows`; or from elsewhere by `export_disk`), written once into
``<root>/vismin/examples.jsonl`` (one object a line: ``id``, ``text_0``, ``text_1``, ``image_0``, ``image_1`` (file
names under ``<root>/vismin/images/``), ``category``), each image as its bytes are in the dataset.

The official rule (github.com/rabiulcste/vismin, ``vismin-bench/eval.py`` and ``vismin-bench/metric.py``,
``compute_contrastive_accuracy``, commit 680a3ee, the current one): each image passed to the transform as the
dataset decodes it (no RGB conversion first), T{c}_I{i} the cosine similarity of text c and image i, text k true of
image k, and a strict ``>`` (a tie is wrong): text = T0_I0 > T1_I0 and T1_I1 > T0_I1, image = T0_I0 > T0_I1 and
T1_I1 > T1_I0, group = both (`two_by_two`). The official script reports these per ``category`` only, each the mean
over the category's items as a percent rounded to 2 decimals (``round(count * 100 / n, 2)``): so do we
(``object/group`` ...). (The benchmark's first release, commit 4fdeb0f, shuffled which text went with which image
and scored against ``solutions/sim_solution.csv``; the current release and rule pair text k with image k.)
Beside the categories we report, labelled, the mean over all items (``micro/``) and the mean of the four categories'
rounded scores (``macro/``, the headline: the number one gets from the official script's output), with the mean of
their unrounded scores beside it (``macro/group (unrounded)``, at most 0.005 points away); the paper's average over
categories could not be checked against code, which prints none. Items that share an image are one unit of
resampling (`two_by_two.units`).
"""

from __future__ import annotations

from pathlib import Path

from ...records import atomic_write_jsonl, file_digest
from .. import two_by_two
from ..checks import BenchmarkDataError, image_path
from ..encoding import Encoder
from ..two_by_two import Pair

LAYOUT = ("<root>/vismin/ holding the dataset mair-lab/vismin-bench as downloaded (huggingface-cli download "
          "mair-lab/vismin-bench --repo-type dataset --local-dir <root>/vismin: its save_to_disk folder data/), from "
          "which <root>/vismin/examples.jsonl (id, text_0, text_1, image_0, image_1, category) and "
          "<root>/vismin/images/ are written once")
EXPORT = "download the dataset there, or write it with concrete_jungle.evaluation.benchmarks.vismin.export_disk"
CATEGORIES = ("object", "attribute", "counting", "relation")
NAMES = {"text": "text", "image": "image", "group": "group"}


def export_disk(dataset: str | Path, root: str | Path) -> Path:
    """Write the downloaded ``mair-lab/vismin-bench`` (``dataset``: the download, or its ``data/`` folder, which the
    official ``eval.py`` opens with ``load_from_disk``) into ``root``, read offline (`two_by_two.release_rows`)."""
    rows, _ = two_by_two.release_rows(Path(dataset), "test")
    if not rows:
        raise BenchmarkDataError(f"{dataset} holds no test split of mair-lab/vismin-bench (a save_to_disk folder or "
                                 f"Parquet files); expected layout: {LAYOUT}")
    return write_layout(rows, root)


def write_layout(rows, root: str | Path) -> Path:
    """``root/examples.jsonl`` and ``root/images/`` from the dataset's rows, each image as ``{"bytes", "path"}``
    (`two_by_two.save_image`)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    records = [{"id": row["id"], "text_0": row["text_0"], "text_1": row["text_1"]}
               | {k: two_by_two.save_image(row[k], root / "images") for k in ("image_0", "image_1")}
               | {"category": row["category"]} for row in rows]
    atomic_write_jsonl(root / "examples.jsonl", records)  # last: a run stopped midway leaves no examples.jsonl
    return root


def load(root: str | Path, skip_missing: bool = False) -> dict:
    """Items per category, every image checked before any model loads; from the dataset as downloaded into ``root``
    (`two_by_two.written_from_release`) when ``examples.jsonl`` is not there."""
    root = Path(root)
    notes = two_by_two.written_from_release(root, write_layout)
    path = root / "examples.jsonl"
    records = two_by_two.jsonl_records(path, "id", ("text_0", "text_1", "image_0", "image_1", "category"), LAYOUT,
                                       EXPORT)
    data: dict[str, list[Pair]] = {}
    for r in records:
        images = tuple(image_path(root / "images", r[k]) for k in ("image_0", "image_1"))
        data.setdefault(r["category"], []).append(Pair(str(r["id"]), images, (r["text_0"], r["text_1"]), r["category"]))
    order = [c for c in CATEGORIES if c in data] + sorted(c for c in data if c not in CATEGORIES)
    return two_by_two.checked({c: data[c] for c in order}, {path: file_digest(path)}, LAYOUT, skip_missing) | {
        "notes": notes}


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """`load` of ``<root>/vismin``."""
    return load(Path(root) / "vismin", skip_missing=skip_missing)


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Text, image and group scores per category (rounded as the official script rounds them), their micro (over
    items) and macro (over categories, rounded and unrounded) means and the blind baseline (`two_by_two.evaluate`)."""
    return two_by_two.evaluate(encoder, data, NAMES, overall="micro/", percent_decimals=2)


def item_chances(data: dict) -> dict:
    """Each item's chance of every score (`two_by_two.chances`)."""
    return two_by_two.item_chances([it for rows in data["items"].values() for it in rows], NAMES)
