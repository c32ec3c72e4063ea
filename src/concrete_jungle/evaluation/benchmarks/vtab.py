"""VTAB (19 tasks): a linear probe on frozen image features, task by task, on the CPU or a GPU.

Each task lives in ``<root>/vtab/<task>/``, in one of two layouts:

- ``train/<class>/<image>`` and ``test/<class>/<image>`` (an ImageFolder export of the task's VTAB splits);
- a clip_benchmark dataset root, as ``clip_benchmark`` prepares it (most tasks through tensorflow_datasets);
  its dataset builder reads it (``download=False``: nothing is fetched).

Either way the features come from the shared `Encoder` (cached, batched) or the model in batches, and the
probe is ours (`linear_probe.train_head`: a linear softmax head, 10 epochs), so it runs without CUDA;
clip_benchmark's own probe asserts a CUDA device and caches its features as pickles. Reported: top-1
accuracy per task and their mean (M.Avg).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...outcomes import metric_values, series
from ..checks import BenchmarkDataError, tree_sha256, unit_of
from ..clip_benchmark_data import build, features
from ..encoding import Encoder
from .linear_probe import load_image_folder, train_head

TASKS = ("caltech101", "cifar100", "clevr_count_all", "clevr_closest_object_distance", "diabetic_retinopathy",
         "dmlab", "dsprites_label_orientation", "dsprites_label_x_position", "dtd", "eurosat",
         "kitti_closest_vehicle_distance", "flowers", "pets", "pcam", "resisc45", "smallnorb_label_azimuth",
         "smallnorb_label_elevation", "sun397", "svhn")
LAYOUT = "<root>/vtab/<task>/{train,test}/<class>/<image>, or a clip_benchmark dataset root per task"


def load(root: str | Path, skip_missing: bool = False) -> dict:
    """The tasks found under ``root`` (= ``<data root>/vtab``), each checked; absent ones are an error naming
    them, or with ``skip_missing`` counted as skipped."""
    root = Path(root)
    if not root.is_dir():
        raise BenchmarkDataError(f"{root} not found; expected layout: {LAYOUT}")
    absent = [t for t in TASKS if not (root / t).is_dir()]
    if absent and not skip_missing:
        raise BenchmarkDataError(f"VTAB tasks missing under {root}: {', '.join(absent)}; expected layout: {LAYOUT} "
                                 "(or pass --skip-missing to evaluate the tasks present)")
    tasks, files = {}, {}
    for task in (t for t in TASKS if t not in absent):
        folder = root / task
        present = [s for s in ("train", "test") if (folder / s).is_dir()]
        if present == ["train", "test"]:
            tasks[task] = load_image_folder(folder, splits=("train", "test"), skip_missing=skip_missing)
            files |= tasks[task].pop("files")
        elif present:
            missing = ({"train", "test"} - set(present)).pop()
            raise BenchmarkDataError(f"{folder} has {present[0]}/ but no {missing}/; the probe trains on train/ and "
                                     f"is scored on test/: expected layout: {LAYOUT}")
        else:  # opened here, so that a missing or damaged root fails before any model loads
            train, _ = (build(_builder_name(task), folder, None, split, f"export it as {LAYOUT}")
                        for split in ("train", "test"))
            tasks[task] = {"kind": "clip_benchmark", "root": folder, "classes": list(getattr(train, "classes", []))}
            files |= tree_sha256(folder)
    if not tasks:
        raise BenchmarkDataError(f"no VTAB task under {root}; expected layout: {LAYOUT}")
    return {"tasks": tasks, "skipped": len(absent), "files": files}


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """`load` of ``<root>/vtab``."""
    return load(root / "vtab", skip_missing=skip_missing)


def _builder_name(task: str) -> str:
    return task if task == "sun397" else f"vtab/{task}"


def _task_dataset(encoder: Encoder, task: str, root: Path, split: str):
    return features(encoder, build(_builder_name(task), root, encoder.clip.preprocess, split, f"export it as {LAYOUT}"))


def evaluate(encoder: Encoder, data: dict, epochs: int = 10, lr: float = 1e-3, seed: int = 0) -> dict:
    answers, n = {}, {}
    for task, task_data in data["tasks"].items():
        if task_data["kind"] == "folder":
            (train_paths, y_train), (test_paths, y_test) = (task_data["splits"][s] for s in ("train", "test"))
            x_train, x_test = encoder.images(train_paths), encoder.images(test_paths)
            classes = len(task_data["classes"])
            units = [f"{task}/{unit_of(p)}" for p in test_paths]
        else:
            x_train, y_train = _task_dataset(encoder, task, task_data["root"], "train")
            x_test, y_test = _task_dataset(encoder, task, task_data["root"], "test")
            classes = int(max(y_train.max(), y_test.max())) + 1
            units = [f"{task}#{i}" for i in range(len(y_test))]  # clip_benchmark's test set, in its order
        head = train_head(x_train, y_train, classes, multilabel=False, epochs=epochs, lr=lr, seed=seed)
        with torch.no_grad():
            answers[task] = series(units, units, (head(x_test).argmax(1) == y_test).tolist())
        n[task] = len(y_test)
    outcomes = {"series": answers, "metrics": {task: {"mean": task} for task in answers}
                | {"M.Avg": {"macro": list(answers)}}}
    return {"metrics": metric_values(outcomes), "n": n, "skipped": data["skipped"], "outcomes": outcomes}


def item_chances(data: dict) -> dict:
    """A uniform guess among each task's classes (`chance.levels`)."""
    return {task: 1 / len(t["classes"]) for task, t in data["tasks"].items() if t.get("classes")}
