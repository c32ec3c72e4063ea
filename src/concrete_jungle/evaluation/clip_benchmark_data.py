"""A dataset root that clip_benchmark prepared, read with its own builders (``download=False``: nothing is fetched),
and the image features of such a dataset: for VTAB's linear probe and for zero-shot classification."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from .checks import BenchmarkDataError
from .encoding import Encoder


def build(name: str, root: Path, preprocess, split: str, fix: str):
    """clip_benchmark's dataset ``name`` under ``root``; ``fix`` says what else the user can do."""
    try:
        from clip_benchmark.datasets.builder import build_dataset
    except ImportError:
        raise BenchmarkDataError(f"{name} in clip_benchmark's layout needs clip_benchmark: pip install "
                                 "'concrete-jungle[eval]'") from None
    try:
        return build_dataset(name, root=str(root), transform=preprocess, split=split, download=False)
    except Exception as e:  # clip_benchmark raises whatever its backend raises for a missing dataset
        raise BenchmarkDataError(f"{name}: clip_benchmark could not open it under {root} ({type(e).__name__}: "
                                 f"{e}); prepare it with clip_benchmark, or {fix}") from None


@torch.no_grad()
def features(encoder: Encoder, dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """(normalised image features, labels) of every item, in the dataset's order."""
    loader = torch.utils.data.DataLoader(dataset, batch_size=encoder.batch_size, num_workers=encoder.num_workers)
    rows, labels = [], []
    for images, targets in loader:
        rows.append(F.normalize(encoder.clip.model.encode_image(images.to(encoder.device)).float(), dim=-1).cpu())
        labels.append(targets)
    return torch.cat(rows), torch.cat(labels)
