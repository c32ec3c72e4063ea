"""Linear probes on frozen image features (paper §3: 10 epochs).

- ImageNet-1k (or any ImageFolder): ``<root>/train/<class>/*`` and ``<root>/val/<class>/*``; a linear
  softmax head, top-1 / top-5 on val.
- COCO multi-label: ``<root>/annotations/instances_{train,val}2017.json`` and ``<root>/{train,val}2017/``;
  a linear sigmoid head over the 80 categories, mean average precision on val.

Features come from the shared `Encoder`, so they are computed once per model and cached on disk.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

from ...outcomes import metric_values, series
from ...records import file_digest
from ..chance import expected_average_precision, levels
from ..checks import BenchmarkDataError, check_images, image_path, load_json_file, shown, text_of, unit_of
from ..encoding import Encoder
from ..image_folder import class_folders, not_read_note, pictures

FOLDER_LAYOUT = "<root>/train/<class>/<image> and <root>/val/<class>/<image> (ImageFolder)"
COCO_LAYOUT = "<root>/annotations/instances_{train,val}2017.json and <root>/{train,val}2017/<file_name>"


def load_image_folder(root: str | Path, splits=("train", "val"), skip_missing: bool = False) -> dict:
    """Image paths and class indices of an ImageFolder's two splits, each read as torchvision's ``ImageFolder``
    reads it (`image_folder`: every image extension it reads, sub-folders included; the files it does not read
    named in a note); the classes are those the first split has pictures of."""
    root = Path(root)
    names, splits, notes = splits, {}, []
    layout = FOLDER_LAYOUT.replace("val", names[1])
    for split in names:
        d = root / split
        if not d.is_dir():
            raise BenchmarkDataError(f"{d} not found; expected layout: {layout}")
        classes = class_folders(d)
        items, others = pictures(d, classes)
        splits[split] = [(path, classes[k]) for path, k in items]
        notes += not_read_note(d, others)
        if not splits[split]:
            raise BenchmarkDataError(f"{d} holds no image in a class folder; expected layout: {layout}")
    classes = sorted({c for _, c in splits[names[0]]})  # a class without a training picture cannot be learned
    for split in names[1:]:
        unknown = sorted({c for _, c in splits[split]} - set(classes))
        if unknown:
            raise BenchmarkDataError(f"{root / split} has the class folder(s) {unknown[:5]} with images, which "
                                     f"{root / names[0]} has none of; the probe learns only the classes it is "
                                     "trained on: give them training images, or remove them")
    problems, sha256 = check_images([p for items in splits.values() for p, _ in items], FOLDER_LAYOUT, skip_missing)
    index = {c: i for i, c in enumerate(classes)}
    out = {s: ([p for p, c in items if p not in problems],
               torch.tensor([index[c] for p, c in items if p not in problems]))
           for s, items in splits.items()}
    return {"kind": "folder", "splits": out, "classes": classes, "skipped": len(problems), "notes": notes,
            "files": sha256}


def load_coco(root: str | Path, skip_missing: bool = False) -> dict:
    root = Path(root)
    splits, categories, files = {}, None, {}
    for split in ("train", "val"):
        path = root / "annotations" / f"instances_{split}2017.json"
        ann = load_json_file(path, COCO_LAYOUT)
        files[path] = file_digest(path)
        lists = {key: ann.get(key) if isinstance(ann, dict) else None for key in ("images", "annotations",
                                                                                   "categories")}
        wrong = [key for key, value in lists.items() if not isinstance(value, list)]
        if wrong or not lists["images"]:
            raise BenchmarkDataError(f"{path}: {', '.join(wrong) or 'images'} must be a non-empty list of objects "
                                     "(the COCO instances format)")
        categories = sorted(_coco_field(path, "categories", n, c, "id") for n, c in enumerate(lists["categories"]))
        col = {c: i for i, c in enumerate(categories)}
        ids = [_coco_field(path, "images", n, img, "id") for n, img in enumerate(lists["images"])]
        labels = {i: torch.zeros(len(categories)) for i in ids}
        for n, a in enumerate(lists["annotations"]):
            image, category = (_coco_field(path, "annotations", n, a, key) for key in ("image_id", "category_id"))
            if image not in labels or category not in col:
                missing = "image_id" if image not in labels else "category_id"
                raise BenchmarkDataError(f"{path}: annotations[{n}] has the {missing} {shown(a[missing])}, which no "
                                         f"entry of {'images' if missing == 'image_id' else 'categories'} has")
            labels[image][col[category]] = 1
        paths = [image_path(root / f"{split}2017", text_of(_coco_field(path, "images", n, img, "file_name"), path,
                                                           f"images[{n}]", "file_name"))
                 for n, img in enumerate(lists["images"])]
        splits[split] = (paths, torch.stack([labels[i] for i in ids]))
    problems, sha256 = check_images([p for paths, _ in splits.values() for p in paths], COCO_LAYOUT, skip_missing)
    out = {}
    for s, (paths, y) in splits.items():
        keep = [i for i, p in enumerate(paths) if p not in problems]
        out[s] = ([paths[i] for i in keep], y[keep])
    return {"kind": "coco", "splits": out, "classes": categories, "skipped": len(problems), "files": files | sha256}


def load_imagenet_root(root: Path, skip_missing: bool = False) -> dict:
    """`load_image_folder` of ``<root>/imagenet``."""
    return load_image_folder(root / "imagenet", skip_missing=skip_missing)


def load_coco_root(root: Path, skip_missing: bool = False) -> dict:
    """`load_coco` of ``<root>/coco``."""
    return load_coco(root / "coco", skip_missing=skip_missing)


def _coco_field(path: Path, part: str, n: int, entry, key: str):
    if not isinstance(entry, dict) or key not in entry or isinstance(entry[key], (dict, list)):
        raise BenchmarkDataError(f"{path}: {part}[{n}] has no {key} (the COCO instances format)")
    return entry[key]


def train_head(x: torch.Tensor, y: torch.Tensor, n_out: int, multilabel: bool, epochs: int = 10,
               lr: float = 1e-3, batch_size: int = 256, weight_decay: float = 0.0, seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    head = torch.nn.Linear(x.shape[1], n_out)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=g).split(batch_size):
            logits = head(x[idx])
            loss = F.binary_cross_entropy_with_logits(logits, y[idx]) if multilabel else F.cross_entropy(logits, y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return head


def average_precision(scores: torch.Tensor, targets: torch.Tensor) -> float:
    """AP of one class: mean precision at the rank of each positive (no interpolation)."""
    order = scores.argsort(descending=True)
    hits = targets[order]
    if hits.sum() == 0:
        return float("nan")
    precision = hits.cumsum(0) / torch.arange(1, len(hits) + 1)
    return float((precision * hits).sum() / hits.sum())


def evaluate(encoder: Encoder, data: dict, epochs: int = 10, lr: float = 1e-3, seed: int = 0) -> dict:
    (train_paths, y_train), (val_paths, y_val) = data["splits"]["train"], data["splits"]["val"]
    x_train, x_val = encoder.images(train_paths), encoder.images(val_paths)
    multilabel = data["kind"] == "coco"
    head = train_head(x_train, y_train, len(data["classes"]), multilabel, epochs=epochs, lr=lr, seed=seed)
    with torch.no_grad():
        logits = head(x_val)
    n = {"train": len(train_paths), "val": len(val_paths)}
    if multilabel:  # mAP ranks images per class: not a mean of per-image outcomes, so it has none
        aps = [average_precision(logits[:, c], y_val[:, c]) for c in range(y_val.shape[1])]
        aps = [a for a in aps if not math.isnan(a)]  # a class without positives has no AP
        return {"metrics": {"mAP": sum(aps) / len(aps) if aps else float("nan")}, "n": n, "skipped": data["skipped"]}
    top = logits.topk(min(5, logits.shape[1]), dim=1).indices
    units = [unit_of(p) for p in val_paths]
    outcomes = {"series": {"top1": series(units, units, (top[:, 0] == y_val).tolist()),
                           "top5": series(units, units, (top == y_val[:, None]).any(dim=1).tolist())},
                "metrics": {"top1": {"mean": "top1"}, "top5": {"mean": "top5"}}}
    return {"metrics": metric_values(outcomes), "n": n, "skipped": data["skipped"], "outcomes": outcomes}


def item_chances(data: dict) -> dict:
    """A uniform guess among the classes."""
    return {"top1": 1 / len(data["classes"])}


def chance_levels(data: dict, result: dict, keys: list[str]) -> dict[str, float | None]:
    """COCO's mAP ranks the val images per class, no mean over items: its level is the mean over the classes with
    a positive of a random ranking's expected AP (`chance.expected_average_precision`); a class folder's, the
    recipe of its `item_chances` (`chance.levels`)."""
    if data["kind"] != "coco":
        return levels(item_chances(data), result, keys)
    labels = data["splits"]["val"][1]
    counts = [int(c) for c in labels.sum(0).tolist() if c > 0]
    return {"mAP": sum(expected_average_precision(c, len(labels)) for c in counts) / len(counts) if counts else None}
