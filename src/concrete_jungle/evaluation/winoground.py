"""Winoground (Thrush et al. 2022): 400 items of two images and two captions with the same words.

Data: a local folder ``<root>/examples.jsonl`` (``id, caption_0, caption_1, image_0, image_1,
collapsed_tag``) with ``<root>/images/<image_k>.png``, or the gated HF dataset ``facebook/winoground``
(token from ``HF_TOKEN``), which `export_hf` writes into that same layout once. Scores: text (each
image prefers its own caption), image (each caption prefers its own image), group (both); overall and
per ``collapsed_tag``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from ..stats import metric_values, series
from ..records import file_digest
from .checks import numbered_lines, shown, text_of
from .encoding import BenchmarkDataError, Encoder, check_images, image_path

LAYOUT = "<root>/examples.jsonl (id, caption_0, caption_1, image_0, image_1, collapsed_tag) and " \
         "<root>/images/<image_0>.png, <image_1>.png"


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


def load(root: str | Path, skip_missing: bool = False) -> dict:
    root = Path(root)
    path = root / "examples.jsonl"
    if not path.is_file():
        raise BenchmarkDataError(f"{path} not found; expected layout: {LAYOUT} (or export the HF dataset with "
                                 "concrete_jungle.evaluation.winoground.export_hf)")
    items, lines = [], {}
    for n, line in numbered_lines(path):
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise BenchmarkDataError(f"{path}, line {n}: not valid JSON ({e.msg}); expected layout: {LAYOUT}") from None
        if not isinstance(item, dict):
            raise BenchmarkDataError(f"{path}, line {n}: {shown(item)} is not an object; expected layout: {LAYOUT}")
        if "id" not in item or isinstance(item["id"], (dict, list)) or item["id"] is None:
            raise BenchmarkDataError(f"{path}, line {n}: the item has no id (a number or text); expected layout: "
                                     f"{LAYOUT}")
        key = str(item["id"])
        if key in lines:
            raise BenchmarkDataError(f"{path}: id {key} is on lines {lines[key]} and {n}; each example needs an id of "
                                     "its own (results match items by it)")
        lines[key] = n
        for field in ("caption_0", "caption_1", "image_0", "image_1"):
            text_of(item.get(field), path, f"line {n}", field)
        for k in (0, 1):
            item[f"path_{k}"] = image_path(root / "images", f"{item[f'image_{k}']}.png")
        items.append(item)
    if not items:
        raise BenchmarkDataError(f"{path} holds no examples; expected layout: {LAYOUT}")
    problems, sha256 = check_images([it[f"path_{k}"] for it in items for k in (0, 1)], LAYOUT, skip_missing)
    kept = [it for it in items if it["path_0"] not in problems and it["path_1"] not in problems]
    return {"items": kept, "skipped": len(items) - len(kept), "files": {path: file_digest(path)} | sha256}


def evaluate(encoder: Encoder, data: dict) -> dict:
    items = data["items"]
    i0, i1 = encoder.images([it["path_0"] for it in items]), encoder.images([it["path_1"] for it in items])
    c0, c1 = encoder.texts([it["caption_0"] for it in items]), encoder.texts([it["caption_1"] for it in items])
    s = lambda c, i: (c * i).sum(-1)  # noqa: E731
    text = (s(c0, i0) > s(c1, i0)) & (s(c1, i1) > s(c0, i1))
    image = (s(c0, i0) > s(c0, i1)) & (s(c1, i1) > s(c1, i0))
    group = text & image
    tags = defaultdict(list)
    for n, it in enumerate(items):
        tags[it.get("collapsed_tag") or "untagged"].append(n)
    # an item shows two images of its own: the item is the unit of resampling
    keys = [str(it["id"]) for it in items]
    answers = {name: series(keys, keys, flags.tolist()) for name, flags in
               (("text", text), ("image", image), ("group", group))}
    for tag, rows in sorted(tags.items()):
        for name, flags in (("text", text), ("image", image), ("group", group)):
            answers[f"{tag}/{name}"] = series([keys[r] for r in rows], [keys[r] for r in rows], flags[rows].tolist())
    outcomes = {"series": answers, "metrics": {name: {"mean": name} for name in answers}}
    return {"metrics": metric_values(outcomes), "n": len(items), "skipped": data["skipped"], "outcomes": outcomes}
