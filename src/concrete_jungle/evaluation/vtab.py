"""VTAB (19 tasks) through clip_benchmark: its dataset builders and its linear-probe trainer.

clip_benchmark already builds the VTAB tasks (most through tensorflow_datasets) and trains a linear
classifier on frozen features; this module only wires our model into it, one task at a time, from a
local dataset root (``download=False``: nothing is fetched here). Not re-implemented: the datasets and the
probe. Not wrapped: clip_benchmark's zero-shot protocol (the paper reports the linear protocol).
"""

from __future__ import annotations

from pathlib import Path

from ..models import ClipModel
from .encoding import BenchmarkDataError

TASKS = ("caltech101", "cifar100", "clevr_count_all", "clevr_closest_object_distance", "diabetic_retinopathy",
         "dmlab", "dsprites_label_orientation", "dsprites_label_x_position", "dtd", "eurosat",
         "kitti_closest_vehicle_distance", "flowers", "pets", "pcam", "resisc45", "smallnorb_label_azimuth",
         "smallnorb_label_elevation", "sun397", "svhn")


def _builder():
    try:
        from clip_benchmark.datasets.builder import build_dataset
        from clip_benchmark.metrics import linear_probe
    except ImportError:
        raise BenchmarkDataError("VTAB runs through clip_benchmark: pip install 'concrete-jungle[eval]'") from None
    return build_dataset, linear_probe


def evaluate(clip: ClipModel, root: str | Path, tasks=TASKS, device: str = "cpu", batch_size: int = 64,
             epochs: int = 10, lr: float = 0.1, feature_root: str | Path = "vtab_features", seed: int = 0) -> dict:
    import torch

    build_dataset, linear_probe = _builder()
    metrics, n = {}, {}
    for task in tasks:
        name = task if task == "sun397" else f"vtab/{task}"
        try:
            train = build_dataset(name, root=str(Path(root) / task), transform=clip.preprocess, split="train",
                                  download=False)
            test = build_dataset(name, root=str(Path(root) / task), transform=clip.preprocess, split="test",
                                 download=False)
        except Exception as e:  # clip_benchmark raises whatever its backend raises for a missing dataset
            raise BenchmarkDataError(f"VTAB task {task}: clip_benchmark could not open it under {Path(root) / task} "
                                     f"({type(e).__name__}: {e}); prepare it with clip_benchmark first") from None
        loader = lambda ds: torch.utils.data.DataLoader(ds, batch_size=batch_size)  # noqa: E731
        result = linear_probe.evaluate(clip.model, loader(train), loader(test), fewshot_k=-1, batch_size=batch_size,
                                       num_workers=0, lr=lr, epochs=epochs, model_id=clip.hash, seed=seed,
                                       feature_root=str(feature_root), device=device, amp=device.startswith("cuda"))
        metrics[task] = result.get("lp_acc1", result.get("acc1"))
        n[task] = len(test)
    metrics["M.Avg"] = sum(metrics.values()) / len(metrics)
    return {"metrics": metrics, "n": n, "skipped": 0}
