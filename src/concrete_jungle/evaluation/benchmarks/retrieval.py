"""Zero-shot retrieval on a Karpathy split file (Flickr30k or COCO): Recall@1/5/10 in both directions.

Data: ``dataset_flickr30k.json`` / ``dataset_coco.json`` (``images[].split``, ``filename``, optional
``filepath``, ``sentences[].raw``) and the image folder. Image -> text: an image is a hit at K when any
of its captions ranks in the top K; text -> image: a caption is a hit when its image does. An image listed
twice in the split is one image with the captions of both listings (clip_benchmark's readers do the same).

As clip_benchmark's ``zeroshot_retrieval`` computes it: each picture converted to RGB before the model's transform
(its readers: ``Image.open(file).convert("RGB")``); the scores ``texts @ images.T``, image -> text on their
transpose; the top K of a query ``torch.topk``'s, so equal scores (a picture listed under two names, a caption
given twice) are ranked as ``topk`` ranks them, not by another sort.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ...outcomes import metric_values, series
from ...records import file_digest
from ..checks import BenchmarkDataError, check_images, image_path, load_json_file, shown, text_of, unit_of
from ..encoding import Crop, Encoder

LAYOUT = "<karpathy json> (images[].split, filename, filepath?, sentences[].raw) and <image_dir>/[filepath/]filename"
RECALL_AT = (1, 5, 10)
ROWS_AT_ONCE = 1024  # queries ranked together: COCO's 25,010 captions x 5,000 images at once would need gigabytes


def listings(path: Path, image_dir: str | Path, split: str = "test") -> list[tuple[int, Path, list[str]]]:
    """The images of ``split`` as the file lists them, each with its captions: (its index in ``images``, image
    file, captions), every field checked."""
    raw = load_json_file(path, LAYOUT)
    if not isinstance(raw, dict) or not isinstance(raw.get("images"), list):
        raise BenchmarkDataError(f"{path}: a Karpathy split file is an object with a list of images; expected "
                                 f"layout: {LAYOUT}")
    out = []
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
        out.append((n, image_path(image_dir, os.path.join(folder, name)), texts))
    if not out:
        raise BenchmarkDataError(f"{path} has no image in the {split!r} split (images[].split); expected layout: "
                                 f"{LAYOUT}")
    return out


def load(karpathy_json: str | Path, image_dir: str | Path, split: str = "test", skip_missing: bool = False) -> dict:
    """The images of ``split`` with their captions. An image listed twice is one image with the captions of both
    listings, as clip_benchmark reads a split (its readers collect captions by image): said in ``notes``, since
    as two entries it would be a distractor of itself."""
    path = Path(karpathy_json)
    captions: dict[Path, list[str]] = {}
    listed: dict[Path, list[int]] = {}
    for n, image, texts in listings(path, image_dir, split):
        listed.setdefault(image, []).append(n)
        captions.setdefault(image, []).extend(texts)
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


def flickr30k_images(folder: Path) -> Path:
    """Flickr30k's pictures in ``folder``: ``flickr30k-images/``, as its official archive (flickr30k-images.tar.gz)
    unpacks, or ``images/``; both is an error naming both."""
    release, renamed = folder / "flickr30k-images", folder / "images"
    if release.is_dir() and renamed.is_dir():
        raise BenchmarkDataError(f"{release} and {renamed} both hold Flickr30k pictures: two copies; keep one")
    return release if release.is_dir() else renamed


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """Flickr30k's Karpathy test split: ``<root>/flickr30k/dataset_flickr30k.json`` and the pictures
    (`flickr30k_images`)."""
    folder = Path(root) / "flickr30k"
    return load(folder / "dataset_flickr30k.json", flickr30k_images(folder), skip_missing=skip_missing)


def load_coco_root(root: Path, skip_missing: bool = False) -> dict:
    """COCO's Karpathy 5k test split: ``<root>/coco/dataset_coco.json``, images under ``<root>/coco``."""
    return load(root / "coco" / "dataset_coco.json", root / "coco", skip_missing=skip_missing)


def first_hit(scores: torch.Tensor, positives: list[list[int]]) -> list[int]:
    """Per row (a query), the rank (0 = best) of its best-ranked positive column, such that it is below K exactly
    when clip_benchmark's ``recall_at_k`` counts a hit at K (a positive among ``torch.topk(scores, K)``), for each K
    of `RECALL_AT`: within the band that gives (0; 1 to 4; 5 to 9; 10 or more), the number of columns that score
    strictly above the best positive. (A positive tied with more than four others at the top could be in the top 1
    and not in the top 5 as ``topk`` breaks the tie; the rank follows the smallest K.)"""
    columns = scores.shape[1]
    out = []
    for start in range(0, len(positives), ROWS_AT_ONCE):
        rows, wanted = scores[start: start + ROWS_AT_ONCE], positives[start: start + ROWS_AT_ONCE]
        positive = torch.zeros(rows.shape, dtype=torch.bool)
        for r, columns_of in enumerate(wanted):
            positive[r, columns_of] = True
        best = rows.masked_fill(~positive, float("-inf")).max(dim=1).values
        above = (rows > best[:, None]).sum(dim=1)
        band = torch.full((len(wanted),), len(RECALL_AT), dtype=torch.long)  # no hit at any K
        for i in reversed(range(len(RECALL_AT))):
            top = rows.topk(min(RECALL_AT[i], columns), dim=1).indices
            band[positive.gather(1, top).any(dim=1)] = i
        bounds = (0, *RECALL_AT)
        low = torch.tensor(bounds)[band]
        high = torch.tensor([k - 1 for k in RECALL_AT] + [columns])[band]
        out += torch.minimum(torch.maximum(above, low), high).tolist()
    return out


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Recall@1/5/10 both ways; ``outcomes`` holds each query's rank (images, and captions keyed image#n)."""
    items = data["items"]
    images = encoder.images([Crop(p) for p, _ in items])  # converted to RGB first, as clip_benchmark's readers
    texts, owner = [], []
    for i, (_, caps) in enumerate(items):
        texts += caps
        owner += [i] * len(caps)
    scores = encoder.texts(texts) @ images.T  # clip_benchmark's product: texts x images; image -> text its transpose
    captions_of: list[list[int]] = [[] for _ in items]
    for t, o in enumerate(owner):
        captions_of[o].append(t)
    units = [unit_of(p) for p, _ in items]
    caption_keys = [f"{units[o]}#{t - captions_of[o][0]}" for t, o in enumerate(owner)]
    outcomes = {"series": {"i2t_rank": series(units, units, first_hit(scores.T, captions_of)),
                           "t2i_rank": series(caption_keys, [units[o] for o in owner],
                                              first_hit(scores, [[o] for o in owner]))},
                "metrics": {f"{kind}_retrieval_recall@{k}": {"mean": rank, "below": k}
                            for kind, rank in (("image", "t2i_rank"), ("text", "i2t_rank")) for k in RECALL_AT}}
    return {"metrics": metric_values(outcomes), "n": {"images": len(items), "texts": len(texts)},
            "skipped": data["skipped"], "notes": data["notes"], "outcomes": outcomes}


def item_chances(data: dict) -> dict:
    """Each query's chance of a first place (`chance.levels`): a caption's when its one image ranks first of
    N; an image's when one of its c captions ranks first of all T."""
    items = data["items"]
    total = sum(len(caps) for _, caps in items)
    return {"t2i_rank": 1 / len(items), "i2t_rank": [(unit_of(path), len(caps) / total) for path, caps in items]}
