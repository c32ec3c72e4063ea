"""Zero-shot retrieval on a Karpathy split file (Flickr30k or COCO): Recall@1/5/10 in both directions.

Data: ``dataset_flickr30k.json`` / ``dataset_coco.json`` (``images[].split``, ``filename``, optional
``filepath``, ``sentences[].raw``) and the image folder. Image -> text: an image is a hit at K when any
of its captions ranks in the top K; text -> image: a caption is a hit when its image does.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from .encoding import Encoder, check_images, image_path, load_json_file

LAYOUT = "<karpathy json> (images[].split, filename, filepath?, sentences[].raw) and <image_dir>/[filepath/]filename"


def load(karpathy_json: str | Path, image_dir: str | Path, split: str = "test", skip_missing: bool = False) -> dict:
    raw = load_json_file(Path(karpathy_json), LAYOUT)
    images = [img for img in raw.get("images", []) if img.get("split") == split]
    paths = [image_path(image_dir, os.path.join(img.get("filepath", ""), img["filename"])) for img in images]
    problems = check_images(paths, LAYOUT, skip_missing)
    kept = [(p, [s["raw"] for s in img["sentences"]]) for p, img in zip(paths, images) if p not in problems]
    return {"items": kept, "skipped": len(images) - len(kept)}


def recall_at(similarity: torch.Tensor, positives: list[list[int]], ks=(1, 5, 10)) -> dict[int, float]:
    """Share of rows whose top-k columns contain one of the row's positive columns."""
    order = similarity.argsort(dim=1, descending=True)
    out = {}
    for k in ks:
        top = order[:, :k]
        hits = [bool(set(top[r].tolist()) & set(pos)) for r, pos in enumerate(positives)]
        out[k] = sum(hits) / len(hits)
    return out


def evaluate(encoder: Encoder, data: dict) -> dict:
    items = data["items"]
    images = encoder.images([p for p, _ in items])
    texts, owner = [], []
    for i, (_, caps) in enumerate(items):
        texts += caps
        owner += [i] * len(caps)
    text_emb = encoder.texts(texts)
    sim = images @ text_emb.T
    captions_of: list[list[int]] = [[] for _ in items]
    for t, o in enumerate(owner):
        captions_of[o].append(t)
    i2t = recall_at(sim, captions_of)
    t2i = recall_at(sim.T, [[o] for o in owner])
    metrics = {f"image_retrieval_recall@{k}": v for k, v in t2i.items()}
    metrics |= {f"text_retrieval_recall@{k}": v for k, v in i2t.items()}
    return {"metrics": metrics, "n": {"images": len(items), "texts": len(texts)}, "skipped": data["skipped"]}
