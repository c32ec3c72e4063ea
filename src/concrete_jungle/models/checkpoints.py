"""Where a checkpoint is, from what a user names (torch-free, so commands check it before anything loads).

A checkpoint is a folder with ``open_clip_config.json`` and ``open_clip_model.safetensors`` (and, saved by this
version, ``architecture.json``: the digest of the config it was saved with, `config_digest`); a training run keeps
them in ``<run>/checkpoints/step-NNNNNNN`` and names its newest in ``<run>/checkpoints/latest.json``. Every command
that takes a checkpoint accepts the folder itself, ``<run>/checkpoints/latest``, ``<run>/checkpoints`` or ``<run>``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

CONFIG_FILE = "open_clip_config.json"
WEIGHTS_FILE = "open_clip_model.safetensors"
# the digest of the config a checkpoint was saved with: attention heads and the activation leave no trace in the
# weights' shapes, so only this tells a config edited (or copied from another model) from the one that trained them
ARCHITECTURE_FILE = "architecture.json"
WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors")  # weights files of others: no config beside them


class CheckpointError(ValueError):
    """A path that names no checkpoint."""


def is_checkpoint(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file() and (path / WEIGHTS_FILE).is_file()


def resolve_checkpoint(path: str | Path) -> Path:
    """The checkpoint folder ``path`` names (see the module's docstring), or a `CheckpointError` saying what is
    there instead."""
    path = Path(path)
    if is_checkpoint(path):
        return path
    roots = ([path.parent] if path.name == "latest" else []) + [path, path / "checkpoints"]
    for root in roots:
        latest = root / "latest.json"
        if latest.is_file():
            try:
                target = root / json.loads(latest.read_text())["name"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise CheckpointError(f"{latest} is damaged (not a latest.json written by training)") from None
            if not is_checkpoint(target):
                raise CheckpointError(f"{latest} names {target.name}, which is not a complete checkpoint folder")
            return target
    if path.is_file() and path.suffix in WEIGHT_SUFFIXES:
        raise CheckpointError(f"{path} is a weights file without the config that records its architecture (only "
                              "a checkpoint folder has one): name the architecture, --model NAME --pretrained "
                              f"{path} (NAME-quickgelu for a fine-tune of OpenAI's weights), or --model peer:NAME "
                              "for a published checkpoint (docs/commands/models.md, 'Published checkpoints')")
    what = "does not exist" if not path.exists() and path.name != "latest" else "is not a checkpoint"
    raise CheckpointError(f"{path} {what}: name a checkpoint folder (holding {CONFIG_FILE} and {WEIGHTS_FILE}), "
                          "<run>/checkpoints/latest, or a training run's folder")


def config_digest(config: dict) -> str:
    """The sha256 of an open_clip config as canonical JSON: key order and spacing do not count, any value does."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def checkpoint_digest(path: Path) -> str:
    """A checkpoint's identity: a sha1 over its weights' sha1 and its config's."""
    def sha1(file: Path) -> str:
        with open(file, "rb") as f:
            return hashlib.file_digest(f, "sha1").hexdigest()

    return hashlib.sha1((sha1(path / WEIGHTS_FILE) + sha1(path / CONFIG_FILE)).encode()).hexdigest()
