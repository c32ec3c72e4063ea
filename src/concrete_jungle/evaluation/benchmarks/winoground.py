"""Winoground (Thrush et al. 2022): 400 items of two images and two captions with the same words.

Data: the gated Hugging Face dataset ``facebook/winoground`` as downloaded into ``<root>/winoground/``
(``huggingface-cli download facebook/winoground --repo-type dataset --local-dir <root>/winoground``): its
``data/examples.jsonl`` (``id, caption_0, caption_1, image_0, image_1, collapsed_tag``) with
``data/images/<image_k>.png`` (its ``data/images.zip`` unzipped in ``data/``), or, where ``examples.jsonl`` is not
there, its test split's Parquet files (``data/test-*.parquet``, the pictures inside), read offline with pyarrow
(`two_by_two.release_rows`) and written once into ``<root>/winoground/examples.jsonl`` and ``images/``, each
picture as its bytes are there. ``examples.jsonl`` with ``images/`` directly in ``<root>/winoground/`` is read too
(as `export_hf` writes it from the Hub); it and ``data/examples.jsonl`` at once is an error. Scores: text (each
image prefers its own caption), image (each caption prefers its own image), group (both); overall and per
``collapsed_tag``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import torch

from ...outcomes import metric_values, series
from ...records import atomic_write_jsonl, file_digest
from .. import two_by_two
from ..chance import WINOGROUND
from ..checks import BenchmarkDataError, check_images, image_path, release_folder
from ..encoding import Encoder
from ..validity import blind, blind_block, mean_picture

LAYOUT = ("<root>/winoground/data/examples.jsonl (id, caption_0, caption_1, image_0, image_1, collapsed_tag) and "
          "data/images/<image_0>.png, <image_1>.png (facebook/winoground downloaded into <root>/winoground, "
          "data/images.zip unzipped in data/), or its data/test-*.parquet alone (written once into "
          "<root>/winoground/examples.jsonl + images/), or examples.jsonl + images/ in <root>/winoground/")
# the image fields name a picture without its extension (``ex_0_img_0``); a file name written from the Parquet
# files keeps the extension of its bytes
NAMED = tuple(two_by_two.EXTENSIONS.values())


def export_hf(root: str | Path) -> Path:
    """Write the HF dataset into the local layout (needs `datasets` and access to the gated repo)."""
    import os

    try:
        from datasets import load_dataset
    except ImportError:
        raise BenchmarkDataError("loading Winoground from the hub needs `pip install datasets`") from None
    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    ds = load_dataset("facebook/winoground", split="test", token=os.environ.get("HF_TOKEN"))
    with open(root / "examples.jsonl", "w", encoding="utf-8") as f:
        for ex in ds:
            for k in (0, 1):
                ex[f"image_{k}"].convert("RGB").save(root / "images" / f"ex{ex['id']}_img{k}.png")
            f.write(json.dumps({"id": ex["id"], "caption_0": ex["caption_0"], "caption_1": ex["caption_1"],
                                "image_0": f"ex{ex['id']}_img0", "image_1": f"ex{ex['id']}_img1",
                                "collapsed_tag": ex.get("collapsed_tag", "")}) + "\n")
    return root


def write_layout(rows, root: str | Path) -> Path:
    """``root/examples.jsonl`` and ``root/images/`` from the dataset's rows (``id``, ``image_0``, ``image_1`` as
    ``{"bytes", "path"}``, the captions and tags), each picture as its bytes are (`two_by_two.save_image`)."""
    root = Path(root)
    records = []
    for row in rows:
        images = {f"image_{k}": two_by_two.save_image(row[f"image_{k}"], root / "images") for k in (0, 1)}
        records.append({"id": row["id"], "caption_0": row["caption_0"], "caption_1": row["caption_1"]} | images
                       | {k: row[k] for k in ("tag", "secondary_tag", "num_main_preds", "collapsed_tag") if k in row})
    atomic_write_jsonl(root / "examples.jsonl", records)  # last: a run stopped midway leaves no examples.jsonl
    return root


def load(root: str | Path, skip_missing: bool = False) -> dict:
    """The items with both pictures, every picture checked before any model loads; from the download's
    ``data/examples.jsonl``, or ``examples.jsonl`` in ``root`` (written from the Parquet files when neither is
    there)."""
    root = release_folder(Path(root), "data", "examples.jsonl")
    notes = two_by_two.written_from_release(root, write_layout)
    path = root / "examples.jsonl"
    items = two_by_two.jsonl_records(path, "id", ("caption_0", "caption_1", "image_0", "image_1"), LAYOUT,
                                     "or export the HF dataset with "
                                     "concrete_jungle.evaluation.benchmarks.winoground.export_hf",
                                     noun="example")
    for item in items:
        for k in (0, 1):
            name = item[f"image_{k}"]
            item[f"path_{k}"] = image_path(root / "images", name if name.endswith(NAMED) else f"{name}.png")
    problems, sha256 = check_images([it[f"path_{k}"] for it in items for k in (0, 1)], LAYOUT, skip_missing)
    kept = [it for it in items if it["path_0"] not in problems and it["path_1"] not in problems]
    return {"items": kept, "skipped": len(items) - len(kept), "files": {path: file_digest(path)} | sha256,
            "notes": notes}


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """`load` of ``<root>/winoground``."""
    return load(root / "winoground", skip_missing=skip_missing)


def _score(c, i):
    return (c * i).sum(-1)


def text_score(i0, i1, c0, c1):
    """The text score's rule: each image scores its own caption strictly above the other."""
    return (_score(c0, i0) > _score(c1, i0)) & (_score(c1, i1) > _score(c0, i1))


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Text, image and group scores, overall and per tag; the blind baseline of the text score (``blind``: both
    images of an item replaced by the mean picture, so no item can prefer a caption for one image and the other
    caption for the other: 0 by construction)."""
    items = data["items"]
    i0, i1 = encoder.images([it["path_0"] for it in items]), encoder.images([it["path_1"] for it in items])
    c0, c1 = encoder.texts([it["caption_0"] for it in items]), encoder.texts([it["caption_1"] for it in items])
    text = text_score(i0, i1, c0, c1)
    image = (_score(c0, i0) > _score(c0, i1)) & (_score(c1, i1) > _score(c1, i0))
    outcomes = outcomes_of(items, {"text": text, "image": image, "group": text & image})
    result = {"metrics": metric_values(outcomes), "n": len(items), "skipped": data["skipped"], "outcomes": outcomes}
    if items:
        names = [it["path_0"] for it in items] + [it["path_1"] for it in items]
        mean = mean_picture(torch.cat([i0, i1]), names)
        blind_text = blind(lambda pictures, *texts: text_score(pictures, pictures, *texts), mean, len(items), c0, c1)
        result["blind"] = blind_block(outcomes_of(items, {"text": blind_text}), len(set(names)))
    return result


def outcomes_of(items: list[dict], scores: dict) -> dict:
    """The outcomes of each item's ``scores`` (name -> flags), overall and per ``collapsed_tag``."""
    tags = defaultdict(list)
    for n, it in enumerate(items):
        tags[it.get("collapsed_tag") or "untagged"].append(n)
    # an item shows two images of its own: the item is the unit of resampling
    keys = [str(it["id"]) for it in items]
    answers = {name: series(keys, keys, flags.tolist()) for name, flags in scores.items()}
    for tag, rows in sorted(tags.items()):
        for name, flags in scores.items():
            answers[f"{tag}/{name}"] = series([keys[r] for r in rows], [keys[r] for r in rows], flags[rows].tolist())
    return {"series": answers, "metrics": {name: {"mean": name} for name in answers}}


def item_chances(data: dict) -> dict:
    """Every item's chance of each score (`chance.WINOGROUND`)."""
    return dict(WINOGROUND)
