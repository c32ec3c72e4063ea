"""Zero-shot classification, as clip_benchmark scores it: a class is the mean of its prompts' text features.

Data: ``<root>/zeroshot/<dataset>/`` in one of two forms. An ImageFolder ``test/<class>/<image>`` (e.g.
ImageNet-1k's val split by wnid), read as torchvision's ``ImageFolder`` reads it (`image_folder`: its extensions,
sub-folders, class order), with, optionally, ``classnames.txt`` (one name a line, in the order of the class
folders: sorted as text, or by number when every folder is named by a whole number, ``3 ... 10``) and
``templates.txt`` (one prompt a line with ``{c}`` for the class name); without them, clip_benchmark's own files are
used (its ``en_classnames.json`` for a dataset it knows whose class count matches, given to the folders in the same
order; else the folder names with ``_`` read as spaces; its ``en_zeroshot_classification_templates.json`` for the
dataset, else ImageNet's 80 prompts). Or a dataset root clip_benchmark prepared for the dataset of that name
(``cifar10``, ``vtab/eurosat``, ... with ``/`` written as ``__`` in the folder name), read with its builder, its
class names and prompts its own. The result says which.

Every prompt fills in the class name at ``{c}`` and nothing else. Class names from ``classnames.txt`` or the
folders must be distinct (two classes of one name get the same weights, and the second is never predicted): an
error naming the file and both lines. clip_benchmark's own names are its rule and are kept, repeats included
(ImageNet-1k's give "missile" and "sunglasses" to two classes each), with a note in the result.

The rule (clip_benchmark's ``metrics/zeroshot_classification.py``): each picture is converted to RGB before the
model's transform (torchvision's loader: ``Image.open(file).convert("RGB")``); each class's weight is the
L2-normalised mean of the L2-normalised text features of its prompts; logits are 100 · image features · weights;
top-1 and top-5 accuracy from ``torch.topk`` (``topk(5)`` with at least 5 classes, else ``topk(1)`` and no top-5),
and the mean per-class recall from ``argmax`` (scikit-learn's balanced accuracy: the mean over the classes present of
the share of their images predicted right). The two differ under a tie (two classes of one name, such as
ImageNet-1k's "missile"): ``argmax`` takes the first, ``topk`` may take another, and each metric keeps its own.
Computed in fp32 (clip_benchmark with ``--amp False``; its default mixed precision can move scores near a tie).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F

from ...outcomes import reported, series
from ...records import file_digest
from ..checks import (
    BenchmarkDataError,
    check_images,
    checked_templates,
    distinct_names,
    numbered_lines,
    repeated_names,
    tree_sha256,
)
from ..clip_benchmark_data import build, features
from ..encoding import Crop, Encoder
from ..image_folder import (
    IMG_EXTENSIONS,
    by_index,
    class_folders,
    empty_classes_note,
    naming_order,
    not_read_note,
    pictures,
)

LAYOUT = ("<root>/zeroshot/<dataset>/test/<class>/<image>, optionally with classnames.txt and templates.txt "
          "(one a line, {c} for the class name)")
NAMES_ORDER = "in the order of the class folders (sorted as text; by number when every folder is a whole number)"


def _clip_benchmark_file(name: str) -> tuple[dict, Path | None]:
    """One of clip_benchmark's packaged JSON files (class names, prompts) and where it is; ``{}`` without it."""
    try:
        import clip_benchmark.datasets as datasets
    except ImportError:
        return {}, None
    path = Path(datasets.__file__).parent / name
    return json.loads(path.read_text(encoding="utf-8")), path


def load(root: str | Path, skip_missing: bool = False) -> dict:
    """Per dataset folder under ``root``: its test images with class indices, its class names and prompts, and
    where they came from; every check the evaluation makes, made here."""
    root = Path(root)
    folders = sorted(d for d in root.iterdir() if d.is_dir()) if root.is_dir() else []
    if not folders:
        raise BenchmarkDataError(f"{root} holds no dataset folder; expected layout: {LAYOUT}")
    packaged = {kind: _clip_benchmark_file(name) for kind, name in
                (("classnames", "en_classnames.json"), ("templates", "en_zeroshot_classification_templates.json"))}
    datasets, skipped, files = {}, {}, {}
    for folder in folders:
        if (folder / "test").is_dir():
            datasets[folder.name], found = _image_folder(folder, packaged, skip_missing)
        else:  # a clip_benchmark dataset root
            datasets[folder.name], found = _prepared(folder, packaged)
        skipped[folder.name] = datasets[folder.name].pop("skipped")
        files |= found
    notes = [note for d in datasets.values() for note in d.pop("notes")]
    return {"items": {name: d["items"] for name, d in datasets.items()}, "datasets": datasets, "skipped": skipped,
            "notes": notes, "files": files}


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """`load` of ``<root>/zeroshot``."""
    return load(root / "zeroshot", skip_missing=skip_missing)


def _kept_as_clip_benchmark(dataset: str, names: list[str]) -> list[str]:
    """clip_benchmark's own class names of a dataset are its rule, repeats included (ImageNet-1k's give "missile"
    and "sunglasses" to two classes each): kept, so its numbers are reproduced, and said."""
    return [f"{dataset}: clip_benchmark's class names give {name!r} to two classes (entries {a} and {b}); kept as "
            "clip_benchmark scores them, so the second can never be predicted" for name, a, b in repeated_names(names)]


def _image_folder(folder: Path, packaged: dict, skip_missing: bool) -> tuple[dict, dict]:
    """An ImageFolder test split with its class names and prompts; and the files read, with their sha256."""
    test = folder / "test"
    classes = class_folders(test)
    if not classes:
        raise BenchmarkDataError(f"{test} holds no class folder; expected layout: {LAYOUT}")
    items, others = pictures(test, classes)
    if not items:
        raise BenchmarkDataError(f"{test} holds no image ({' '.join(IMG_EXTENSIONS)}) in its class folders; "
                                 f"expected layout: {LAYOUT}")
    names, names_from, notes, files = _class_names(folder, classes, packaged)
    templates, templates_from, prompt_files = _prompts(folder, packaged)
    problems, sha256 = check_images([p for p, _ in items], LAYOUT, skip_missing)
    notes = not_read_note(test, others) + empty_classes_note(test, classes, items) + notes
    return {"items": [(p, y) for p, y in items if p not in problems], "folder": test, "classes": names,
            "templates": templates,
            "sources": {"classnames": names_from, "templates": templates_from}, "skipped": len(problems),
            "notes": notes}, files | prompt_files | sha256


def _class_names(folder: Path, classes: list[str], packaged: dict) -> tuple[list[str], str, list[str], dict]:
    """The name of each class (by torchvision's class index), where they come from, notes on them, and the file
    read. A list of names (``classnames.txt``, clip_benchmark's) gives them in `naming_order`."""
    mine = folder / "classnames.txt"
    known, known_file = packaged["classnames"]
    order = naming_order(classes)
    first = ", ".join(classes[k] for k in order[:3])
    order_note = [f"{folder.name}: the class folders are named by numbers ({first}, ...), so the names are given "
                  "to them in the order of their numbers"] if order != list(range(len(classes))) else []
    if mine.is_file():
        lines = numbered_lines(mine)
        if len(lines) != len(classes):
            raise BenchmarkDataError(f"{mine} has {len(lines)} names for {len(classes)} class folders; give one name "
                                     f"a line, {NAMES_ORDER}")
        names = [name for _, name in lines]
        distinct_names(names, [f"line {n}" for n, _ in lines], str(mine))
        return by_index(classes, names), "classnames.txt", order_note, {mine: file_digest(mine)}
    if len(known.get(folder.name, [])) == len(classes):
        names = known[folder.name]
        return by_index(classes, names), f"clip_benchmark ({folder.name})", \
            order_note + _kept_as_clip_benchmark(folder.name, names), {known_file: file_digest(known_file)}
    names = [c.replace("_", " ") for c in classes]
    distinct_names(names, [f"folder {c}" for c in classes], str(folder / "test"))
    return names, "the class folders' names", [], {}


def _prompts(folder: Path, packaged: dict) -> tuple[list[str], str, dict]:
    """The prompts (``{c}`` for the class name), where they come from, and the file read."""
    mine = folder / "templates.txt"
    known, known_file = packaged["templates"]
    if mine.is_file():
        lines = numbered_lines(mine)
        if not lines:
            raise BenchmarkDataError(f"{mine} holds no prompt; give one a line, {{c}} for the class name")
        templates = [t for _, t in lines]
        checked_templates(templates, [f"line {n}" for n, _ in lines], str(mine))
        return templates, "templates.txt", {mine: file_digest(mine)}
    if folder.name in known or "imagenet1k" in known:
        key = folder.name if folder.name in known else "imagenet1k"
        checked_templates(known[key], [f"entry {i}" for i in range(len(known[key]))], f"{known_file} ({key})")
        return known[key], f"clip_benchmark ({key})", {known_file: file_digest(known_file)}
    raise BenchmarkDataError(f"no prompts for {folder}: put templates.txt there (one a line, {{c}} for the class "
                             "name) or install clip_benchmark: pip install 'concrete-jungle[eval]'")


def _prepared(folder: Path, packaged: dict) -> tuple[dict, dict]:
    """A dataset root clip_benchmark prepared, opened with its builder here (so that a missing or damaged one fails
    before any model loads) and again by `evaluate` with the model's preprocessing; its prompts checked as ours, its
    class names kept as clip_benchmark's rule (noted where two are alike). Every file under it counts for the
    digest (the builder decides which it reads), with clip_benchmark's class names and prompts."""
    name = folder.name.replace("__", "/")
    splits = [s for s in ("train", "val", "valid") if (folder / s).is_dir()]
    fix = (f"it has {', '.join(s + '/' for s in splits)} but no test/: put its test split in {folder / 'test'}"
           "/<class>/<image>") if splits else f"export it as {LAYOUT}"
    dataset = build(name, folder, None, "test", fix)
    if not isinstance(dataset.templates, dict):  # class-specific prompts are whole sentences
        checked_templates(list(dataset.templates), [f"entry {i}" for i in range(len(dataset.templates))],
                          f"clip_benchmark's prompts of {name}")
    files = tree_sha256(folder) | {path: file_digest(path) for _, path in packaged.values() if path is not None}
    return {"items": [], "clip_benchmark": name, "root": folder, "skipped": 0, "classes": list(dataset.classes),
            "notes": _kept_as_clip_benchmark(folder.name, list(dataset.classes)),
            "sources": {"classnames": "clip_benchmark's builder", "templates": "clip_benchmark's builder"}}, files


def classifier(encoder: Encoder, classes: list[str], templates: list[str] | dict[str, list[str]]) -> torch.Tensor:
    """(dim, classes): per class the normalised mean of its prompts' normalised text features, stacked as
    clip_benchmark stacks them (``dim=1``: the same layout, so the same product). ``templates``: prompts with
    ``{c}``, or (clip_benchmark's class-specific prompts) each class's own list."""
    prompts = [templates[c] if isinstance(templates, dict) else [t.format(c=c) for t in templates] for c in classes]
    texts = encoder.texts([p for ps in prompts for p in ps])
    weights, at = [], 0
    for ps in prompts:
        weights.append(F.normalize(texts[at: at + len(ps)].mean(dim=0), dim=-1))
        at += len(ps)
    return torch.stack(weights, dim=1)


def evaluate(encoder: Encoder, data: dict) -> dict:
    """acc1, acc5 and mean per-class recall per dataset, and acc1's mean over datasets; ``outcomes`` per image.
    The top-1 of acc1 is ``topk``'s first, the prediction of the per-class recall ``argmax``'s, as clip_benchmark
    takes them (they differ only under a tie)."""
    answers, recipes = {}, {}
    for name, d in data["datasets"].items():
        if "clip_benchmark" in d:
            dataset = build(d["clip_benchmark"], d["root"], encoder.clip.preprocess, "test",
                            f"export it as {LAYOUT}")
            images, labels = features(encoder, dataset)
            names, templates = dataset.classes, dataset.templates
            units = [f"{name}#{i}" for i in range(len(labels))]  # its test set, in its order
        else:
            items = data["items"][name]  # (cut to a few items a dataset when training evaluates)
            files, labels = [p for p, _ in items], torch.tensor([y for _, y in items], dtype=torch.long)
            # each picture converted to RGB before the transform, as torchvision's loader reads it
            images, names, templates = encoder.images([Crop(p) for p in files]), d["classes"], d["templates"]
            # each picture keyed (and resampled) by its path under test/, class folder first: the pictures of a
            # sub-folder (more/nested.jpg) may be named alike in every class
            units = [p.relative_to(d["folder"]).as_posix() for p in files]
        logits = (100.0 * images) @ classifier(encoder, names, templates)  # clip_benchmark's product, in its order
        top = logits.topk(5 if len(names) >= 5 else 1, dim=1).indices if len(units) else torch.zeros(0, 1).long()
        predicted = logits.argmax(dim=1) if len(units) else torch.zeros(0).long()
        answers[f"{name}/acc1"] = series(units, units, (top[:, 0] == labels).tolist())
        recipes[f"{name}/acc1"] = {"mean": f"{name}/acc1"}
        if len(names) >= 5:
            answers[f"{name}/acc5"] = series(units, units, (top == labels[:, None]).any(dim=1).tolist())
            recipes[f"{name}/acc5"] = {"mean": f"{name}/acc5"}
        per_class = []
        for k in sorted(set(labels.tolist())):  # the classes present, as balanced accuracy counts them
            rows = (labels == k).nonzero().flatten().tolist()
            answers[f"{name}/class{k}"] = series([units[r] for r in rows], [units[r] for r in rows],
                                                 [bool(predicted[r] == k) for r in rows])
            recipes[f"{name}/class{k}"] = {"mean": f"{name}/class{k}", "part": True}
            per_class.append(f"{name}/class{k}")
        recipes[f"{name}/mean_per_class_recall"] = {"macro": per_class}
    recipes["acc1 (mean over datasets)"] = {"macro": [f"{name}/acc1" for name in data["datasets"]]}
    outcomes = {"series": answers, "metrics": recipes}
    n = {k: len(answers[f"{k}/acc1"]["keys"]) for k in data["datasets"]}
    return {"metrics": reported(outcomes), "n": n,
            "skipped": data["skipped"], "notes": data["notes"], "outcomes": outcomes,
            "sources": {k: v["sources"] for k, v in data["datasets"].items()}}


def item_chances(data: dict) -> dict:
    """A uniform guess among each dataset's classes (`chance.levels`)."""
    return {f"{d}/acc1": 1 / len(dataset["classes"]) for d, dataset in data["datasets"].items()
            if dataset.get("classes")}
