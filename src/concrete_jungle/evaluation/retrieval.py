"""Zero-shot retrieval on a Karpathy split file (Flickr30k or COCO): Recall@1/5/10 in both directions.

Data: ``dataset_flickr30k.json`` / ``dataset_coco.json`` (``images[].split``, ``filename``, optional
``filepath``, ``sentences[].raw``) and the image folder. Image -> text: an image is a hit at K when any
of its captions ranks in the top K; text -> image: a caption is a hit when its image does. An image listed
twice in the split is one image with the captions of both listings (clip_benchmark's readers do the same).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..stats import metric_values, series
from ..records import file_digest
from .checks import shown, text_of
from .encoding import BenchmarkDataError, Encoder, check_images, image_path, load_json_file, unit_of

LAYOUT = "<karpathy json> (images[].split, filename, filepath?, sentences[].raw) and <image_dir>/[filepath/]filename"


def load(karpathy_json: str | Path, image_dir: str | Path, split: str = "test", skip_missing: bool = False) -> dict:
    """The images of ``split`` with their captions. An image listed twice is one image with the captions of both
    listings, as clip_benchmark reads a split (its readers collect captions by image): said in ``notes``, since
    as two entries it would be a distractor of itself."""
    path = Path(karpathy_json)
    raw = load_json_file(path, LAYOUT)
    if not isinstance(raw, dict) or not isinstance(raw.get("images"), list):
        raise BenchmarkDataError(f"{path}: a Karpathy split file is an object with a list of images; expected "
                                 f"layout: {LAYOUT}")
    captions: dict[Path, list[str]] = {}
    listed: dict[Path, list[int]] = {}
    for n, img in enumerate(raw["images"]):
        if not isinstance(img, dict):
            raise BenchmarkDataError(f"{path}: images[{n}] is {shown(img)}, not an object; expected layout: {LAYOUT}")
        if img.get("split") != split:
            continue
        name = text_of(img.get("filename"), path, f"images[{n}]", "filename")
        folder = text_of(img.get("filepath", ""), path, f"images[{n}]", "filepath")
        sentences = img.get("sentences")
        if not isinstance(sentences, list) or not sentences:
            raise BenchmarkDataError(f"{path}: images[{n}] ({name}) has no sentences; every image of the split needs "
                                     "its captions as sentences[].raw")
        texts = []
        for k, sentence in enumerate(sentences):
            if not isinstance(sentence, dict):
                raise BenchmarkDataError(f"{path}: images[{n}]'s sentences[{k}] is {shown(sentence)}, not an object; "
                                         "each sentence holds its caption in raw")
            texts.append(text_of(sentence.get("raw"), path, f"images[{n}]", f"sentences[{k}].raw"))
        image = image_path(image_dir, os.path.join(folder, name))
        listed.setdefault(image, []).append(n)
        captions.setdefault(image, []).extend(texts)
    if not captions:
        raise BenchmarkDataError(f"{path} has no image in the {split!r} split (images[].split); expected layout: "
                                 f"{LAYOUT}")
    problems, sha256 = check_images(list(captions), LAYOUT, skip_missing)
    kept = [(image, texts) for image, texts in captions.items() if image not in problems]
    if not kept:
        raise BenchmarkDataError(f"{path}: every image of the {split!r} split was skipped (missing or unreadable under "
                                 f"{image_dir}): nothing to rank; fix the image folder")
    notes = [f"{unit_of(image)} is listed {len(at)} times in the {split} split of {path.name} "
             f"({', '.join(f'images[{n}]' for n in at)}): one image with the captions of each listing, as "
             "clip_benchmark reads a split" for image, at in listed.items() if len(at) > 1]
    return {"items": kept, "skipped": len(captions) - len(kept), "notes": notes,
            "files": {path: file_digest(path)} | sha256}


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
            "skipped": data["skipped"], "notes": data["notes"], "outcomes": outcomes}
