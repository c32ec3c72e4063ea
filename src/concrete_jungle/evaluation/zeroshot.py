"""Zero-shot classification, as clip_benchmark scores it: a class is the mean of its prompts' text features.

Data: ``<root>/zeroshot/<dataset>/`` in one of two forms. An ImageFolder ``test/<class>/<image>`` (e.g.
ImageNet-1k's val split by wnid) with, optionally, ``classnames.txt`` (one name a line, in the sorted order of the
class folders) and ``templates.txt`` (one prompt a line with ``{c}`` for the class name); without them,
clip_benchmark's own files are used (its ``en_classnames.json`` for a dataset it knows whose class count matches;
else the folder names with ``_`` read as spaces; its ``en_zeroshot_classification_templates.json`` for the
dataset, else ImageNet's 80 prompts). Or a dataset root clip_benchmark prepared for the dataset of that name
(``cifar10``, ``vtab/eurosat``, ... with ``/`` written as ``__`` in the folder name), read with its builder, its
class names and prompts its own. The result says which.

The rule (clip_benchmark's ``metrics/zeroshot_classification.py``): each class's weight is the L2-normalised mean
of the L2-normalised text features of its prompts; logits are image features · weights; top-1 and top-5 accuracy
(top-5 only with at least 5 classes) and the mean per-class recall (scikit-learn's balanced accuracy: the mean over
the classes present of the share of their images predicted right). Computed in fp32 (clip_benchmark with
``--amp False``; its default mixed precision can move scores near a tie).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F

from ..stats import reported, series
from .clip_benchmark_data import build, features
from .encoding import BenchmarkDataError, Encoder, check_images, unit_of
from .linear_probe import IMAGE_EXTS

LAYOUT = ("<root>/zeroshot/<dataset>/test/<class>/<image>, optionally with classnames.txt and templates.txt "
          "(one a line, {c} for the class name)")


def _clip_benchmark_file(name: str) -> dict:
    try:
        import clip_benchmark.datasets as datasets
    except ImportError:
        return {}
    return json.loads((Path(datasets.__file__).parent / name).read_text())


def load(root: str | Path, skip_missing: bool = False) -> dict:
    """Per dataset folder under ``root``: its test images with class indices, its class names and prompts, and
    where they came from."""
    root = Path(root)
    folders = sorted(d for d in root.iterdir() if d.is_dir()) if root.is_dir() else []
    if not folders:
        raise BenchmarkDataError(f"{root} holds no dataset folder; expected layout: {LAYOUT}")
    known_names, known_templates = (_clip_benchmark_file("en_classnames.json"),
                                    _clip_benchmark_file("en_zeroshot_classification_templates.json"))
    datasets, skipped = {}, {}
    for folder in folders:
        if not (folder / "test").is_dir():  # a clip_benchmark dataset root: its builder reads it with the model
            datasets[folder.name] = {"items": [], "clip_benchmark": folder.name.replace("__", "/"), "root": folder,
                                     "sources": {"classnames": "clip_benchmark's builder",
                                                 "templates": "clip_benchmark's builder"}}
            skipped[folder.name] = 0
            continue
        classes = sorted(p.name for p in (folder / "test").iterdir() if p.is_dir())
        items = [(p, i) for i, c in enumerate(classes) for p in sorted((folder / "test" / c).iterdir())
                 if p.suffix.lower() in IMAGE_EXTS]
        if (folder / "classnames.txt").is_file():
            names, names_from = _lines(folder / "classnames.txt"), "classnames.txt"
        elif len(known_names.get(folder.name, [])) == len(classes):
            names, names_from = known_names[folder.name], f"clip_benchmark ({folder.name})"
        else:
            names, names_from = [c.replace("_", " ") for c in classes], "the class folders' names"
        if len(names) != len(classes):
            raise BenchmarkDataError(f"{folder / 'classnames.txt'} has {len(names)} names for {len(classes)} class "
                                     "folders; give one name a line, in the sorted order of the folders")
        if (folder / "templates.txt").is_file():
            templates, templates_from = _lines(folder / "templates.txt"), "templates.txt"
        elif folder.name in known_templates or "imagenet1k" in known_templates:
            key = folder.name if folder.name in known_templates else "imagenet1k"
            templates, templates_from = known_templates[key], f"clip_benchmark ({key})"
        else:
            raise BenchmarkDataError(f"no prompts for {folder}: put templates.txt there (one a line, {{c}} for the "
                                     "class name) or install clip_benchmark: pip install 'concrete-jungle[eval]'")
        if not all("{c}" in t for t in templates):
            raise BenchmarkDataError(f"{folder}: every prompt needs {{c}} where the class name goes")
        problems = check_images([p for p, _ in items], LAYOUT, skip_missing)
        datasets[folder.name] = {"items": [(p, y) for p, y in items if p not in problems], "classes": names,
                                 "templates": templates, "sources": {"classnames": names_from,
                                                                     "templates": templates_from}}
        skipped[folder.name] = len(problems)
    return {"items": {name: d["items"] for name, d in datasets.items()}, "datasets": datasets, "skipped": skipped}


def _lines(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def classifier(encoder: Encoder, classes: list[str], templates: list[str] | dict[str, list[str]]) -> torch.Tensor:
    """(dim, classes): per class the normalised mean of its prompts' normalised text features. ``templates``:
    prompts with ``{c}``, or (clip_benchmark's class-specific prompts) each class's own list."""
    prompts = [templates[c] if isinstance(templates, dict) else [t.format(c=c) for t in templates] for c in classes]
    texts = encoder.texts([p for ps in prompts for p in ps])
    weights, at = [], 0
    for ps in prompts:
        weights.append(F.normalize(texts[at: at + len(ps)].mean(dim=0), dim=-1))
        at += len(ps)
    return torch.stack(weights).T


def evaluate(encoder: Encoder, data: dict) -> dict:
    """acc1, acc5 and mean per-class recall per dataset, and acc1's mean over datasets; ``outcomes`` per image."""
    answers, recipes = {}, {}
    for name, d in data["datasets"].items():
        if "clip_benchmark" in d:
            dataset = build(d["clip_benchmark"], d["root"], encoder.clip.preprocess, "test",
                            f"export it as {LAYOUT}")
            images, labels = features(encoder, dataset)
            names, templates = dataset.classes, dataset.templates
            paths = [f"{name}#{i}" for i in range(len(labels))]  # its test set, in its order
        else:
            items = data["items"][name]  # (cut to a few items a dataset when training evaluates)
            paths, labels = [p for p, _ in items], torch.tensor([y for _, y in items], dtype=torch.long)
            images, names, templates = encoder.images(paths), d["classes"], d["templates"]
        logits = images @ classifier(encoder, names, templates)
        units = [p if isinstance(p, str) else unit_of(p) for p in paths]
        top = logits.topk(min(5, logits.shape[1]), dim=1).indices if len(paths) else torch.zeros(0, 1).long()
        answers[f"{name}/acc1"] = series(units, units, (top[:, 0] == labels).tolist())
        recipes[f"{name}/acc1"] = {"mean": f"{name}/acc1"}
        if len(names) >= 5:
            answers[f"{name}/acc5"] = series(units, units, (top == labels[:, None]).any(dim=1).tolist())
            recipes[f"{name}/acc5"] = {"mean": f"{name}/acc5"}
        per_class = []
        for k in sorted(set(labels.tolist())):  # the classes present, as balanced accuracy counts them
            rows = (labels == k).nonzero().flatten().tolist()
            answers[f"{name}/class{k}"] = series([units[r] for r in rows], [units[r] for r in rows],
                                                 [bool(top[r, 0] == k) for r in rows])
            recipes[f"{name}/class{k}"] = {"mean": f"{name}/class{k}", "part": True}
            per_class.append(f"{name}/class{k}")
        recipes[f"{name}/mean_per_class_recall"] = {"macro": per_class}
    recipes["acc1 (mean over datasets)"] = {"macro": [f"{name}/acc1" for name in data["datasets"]]}
    outcomes = {"series": answers, "metrics": recipes}
    n = {k: len(answers[f"{k}/acc1"]["keys"]) for k in data["datasets"]}
    return {"metrics": reported(outcomes), "n": n,
            "skipped": data["skipped"], "outcomes": outcomes,
            "sources": {k: v["sources"] for k, v in data["datasets"].items()}}
