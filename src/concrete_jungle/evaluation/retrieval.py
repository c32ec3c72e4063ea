"""Zero-shot retrieval on a Karpathy split file (Flickr30k or COCO): Recall@1/5/10 in both directions.

Data: ``dataset_flickr30k.json`` / ``dataset_coco.json`` (``images[].split``, ``filename``, optional
``filepath``, ``sentences[].raw``) and the image folder. Image -> text: an image is a hit at K when any
of its captions ranks in the top K; text -> image: a caption is a hit when its image does.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..stats import metric_values, series
from .encoding import Encoder, check_images, image_path, load_json_file, unit_of

LAYOUT = "<karpathy json> (images[].split, filename, filepath?, sentences[].raw) and <image_dir>/[filepath/]filename"


def load(karpathy_json: str | Path, image_dir: str | Path, split: str = "test", skip_missing: bool = False) -> dict:
    raw = load_json_file(Path(karpathy_json), LAYOUT)
    images = [img for img in raw.get("images", []) if img.get("split") == split]
    paths = [image_path(image_dir, os.path.join(img.get("filepath", ""), img["filename"])) for img in images]
    problems = check_images(paths, LAYOUT, skip_missing)
    kept = [(p, [s["raw"] for s in img["sentences"]]) for p, img in zip(paths, images) if p not in problems]
    return {"items": kept, "skipped": len(images) - len(kept)}


def first_hit(similarity: torch.Tensor, positives: list[list[int]]) -> list[int]:
    """Per row, the rank (0 = best) of its best-ranked positive column: a hit at K when it is below K."""
    order = similarity.argsort(dim=1, descending=True)
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(order.shape[1]).expand_as(order).contiguous())
    return [min(rank[r, pos].tolist()) for r, pos in enumerate(positives)]


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Recall@1/5/10 both ways; ``outcomes`` holds each query's rank (images, and captions keyed image#n)."""
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
    units = [unit_of(p) for p, _ in items]
    caption_keys = [f"{units[o]}#{t - captions_of[o][0]}" for t, o in enumerate(owner)]
    outcomes = {"series": {"i2t_rank": series(units, units, first_hit(sim, captions_of)),
                           "t2i_rank": series(caption_keys, [units[o] for o in owner],
                                              first_hit(sim.T, [[o] for o in owner]))},
                "metrics": {f"{kind}_retrieval_recall@{k}": {"mean": rank, "below": k}
                            for kind, rank in (("image", "t2i_rank"), ("text", "i2t_rank")) for k in (1, 5, 10)}}
    return {"metrics": metric_values(outcomes), "n": {"images": len(items), "texts": len(texts)},
            "skipped": data["skipped"], "outcomes": outcomes}
