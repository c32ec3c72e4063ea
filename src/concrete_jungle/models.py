"""open_clip models: create by name and pretrained tag or from our checkpoints, and save checkpoints.

A checkpoint is a directory open_clip itself can open with ``local-dir:``: ``open_clip_config.json``
(``model_cfg`` with the exact architecture — ``quick_gelu`` included — and ``preprocess_cfg``) and
``open_clip_model.safetensors``. Recording the activation matters: ViT-B-32 with OpenAI weights uses
QuickGELU, and re-creating it from the plain ``ViT-B-32`` config silently switches to GELU and shifts
every score.

``--pretrained none --seed S`` gives a reproducible random-init model for smoke tests and speed checks.
The tiny ``cj-tiny`` architecture (configs in ``model_configs/``) serves tests and the offline demo.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import open_clip
import torch

from .checkpoints import CONFIG_FILE, WEIGHTS_FILE, resolve_checkpoint
from .records import file_digest

CONFIG_DIR = Path(__file__).parent / "model_configs"
open_clip.add_model_config(CONFIG_DIR)


class ModelError(ValueError):
    pass


@dataclass
class ClipModel:
    """An open_clip model with what it takes to use it: preprocess, tokenizer, and its exact config."""

    model: torch.nn.Module
    preprocess: object
    tokenizer: object
    config: dict  # {"model_cfg": ..., "preprocess_cfg": ...}, as open_clip_config.json
    identity: dict = field(default_factory=dict)  # what made it: name, pretrained, seed, or checkpoint path and hash

    @property
    def hash(self) -> str:
        """A stable id for caches: same weights source and config, same hash (where a checkpoint lies does not
        count: its weights' digest does)."""
        identity = {k: v for k, v in self.identity.items() if k != "path"}
        blob = json.dumps({"identity": identity, "config": self.config}, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        return describe_model(self.identity)


def describe_model(identity: dict) -> str:
    """A model's identity in words: ``ViT-B-32 (openai)``, ``cj-tiny (random init, seed 0)``,
    ``runs/x/checkpoints/step-0000100 (weights sha1 1a2b…)``."""
    if "checkpoint" in identity:
        return f"{identity.get('path', 'checkpoint')} (weights sha1 {identity['checkpoint'][:12]})"
    if identity.get("pretrained", "none") == "none":
        return f"{identity.get('name')} (random init, seed {identity.get('seed', 0)})"
    return f"{identity.get('name')} ({identity.get('pretrained')})"


def uses_quick_gelu(model: torch.nn.Module) -> bool:
    return any(type(m).__name__ == "QuickGELU" for m in model.modules())


def _preprocess_cfg(model: torch.nn.Module) -> dict:
    cfg = getattr(model.visual, "preprocess_cfg", None)
    if cfg:
        return dict(cfg)
    size = model.visual.image_size
    return {"size": list(size) if isinstance(size, tuple) else size}


@contextlib.contextmanager
def _random_init_is_intended(quiet: bool):
    """Silence open_clip's "No pretrained weights loaded" warning when random init is what was asked for."""
    def drop(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("No pretrained weights loaded")

    root = logging.getLogger()
    if quiet:
        root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)


def load_model(
    name: str | None = None,
    pretrained: str | None = None,
    checkpoint: str | Path | None = None,
    device: str = "cpu",
    precision: str = "fp32",
    seed: int = 0,
) -> ClipModel:
    """A model by open_clip name and pretrained tag (``none``: random init with ``seed``), or a checkpoint dir."""
    if checkpoint is not None:
        path = resolve_checkpoint(checkpoint)
        config = json.loads((path / CONFIG_FILE).read_text())
        model, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{path}", device=device,
                                                                     precision=precision)
        tokenizer = open_clip.get_tokenizer(f"local-dir:{path}")
        identity = {"checkpoint": file_digest(path / WEIGHTS_FILE, "sha1"), "path": str(path)} | (
            {"precision": precision} if precision != "fp32" else {})
        return ClipModel(model.eval(), preprocess, tokenizer, config, identity)

    if name is None:
        raise ModelError("name a model (--model ViT-B-32) or a checkpoint (--checkpoint DIR)")
    if open_clip.get_model_config(name) is None:
        raise ModelError(f"unknown open_clip model {name!r}; see open_clip.list_models()")
    tag = None if pretrained in (None, "none", "") else pretrained
    if tag is not None and tag not in open_clip.list_pretrained_tags_by_model(name) and not Path(tag).is_file():
        raise ModelError(f"pretrained tag {tag!r} does not exist for {name}; known tags: "
                         f"{open_clip.list_pretrained_tags_by_model(name)} (or a local weights file, or 'none')")
    if tag is None:
        torch.manual_seed(seed)
    elif not Path(tag).is_file():
        check_downloadable(name, tag)
    with _random_init_is_intended(tag is None):
        model, _, preprocess = open_clip.create_model_and_transforms(name, pretrained=tag, device=device,
                                                                     precision=precision)
    model_cfg = open_clip.get_model_config(name)
    model_cfg["quick_gelu"] = uses_quick_gelu(model)  # OpenAI weights come with QuickGELU
    # through JSON, so a config compares equal to the one its checkpoint carries
    config = json.loads(json.dumps({"model_cfg": model_cfg, "preprocess_cfg": _preprocess_cfg(model)}))
    identity = {"name": name, "pretrained": tag or "none"} | ({"seed": seed} if tag is None else {})
    if tag is not None and Path(tag).is_file():  # a weights file: its content, not its path, names the model
        identity["weights_sha1"] = file_digest(Path(tag), "sha1")
    if precision != "fp32":
        identity["precision"] = precision  # other numbers: other embeddings
    return ClipModel(model.eval(), preprocess, open_clip.get_tokenizer(name), config, identity)


def cached_weights(name: str, tag: str) -> str | None:
    """Where open_clip would find the weights of (name, tag) without the network, or None."""
    import os
    from urllib.parse import urlparse

    from open_clip.pretrained import get_pretrained_cfg

    cfg = get_pretrained_cfg(name, tag)
    if cfg.get("file"):
        return cfg["file"] if Path(cfg["file"]).is_file() else None
    if cfg.get("hf_hub"):
        from huggingface_hub import try_to_load_from_cache

        repo, filename = os.path.split(cfg["hf_hub"])
        for candidate in ("open_clip_model.safetensors", filename or "open_clip_pytorch_model.bin"):
            found = try_to_load_from_cache(repo, candidate)
            if isinstance(found, str):
                return found
    if cfg.get("url"):
        path = Path("~/.cache/clip").expanduser() / os.path.basename(urlparse(cfg["url"]).path)
        return str(path) if path.is_file() else None
    return None


def check_downloadable(name: str, tag: str, timeout: float = 3.0) -> None:
    """Weights that are neither cached nor downloadable are one clear error at once, instead of the hub's retries
    (about a minute offline) ending in a traceback."""
    import os
    import socket

    if cached_weights(name, tag):
        return
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    reason = "HF_HUB_OFFLINE is set"
    if not offline:
        try:
            socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
            return
        except OSError as e:
            reason = f"huggingface.co cannot be reached ({e.strerror or type(e).__name__})"
    raise ModelError(f"the {tag!r} weights of {name} are not in the local cache and {reason}: they are downloaded "
                     f"once, with the network (then HF_HUB_OFFLINE=1 uses the cache), or pass a local weights "
                     f"file, e.g. --pretrained /path/to/open_clip_model.safetensors")


def save_checkpoint(directory: str | Path, model: torch.nn.Module, config: dict,
                    write_more: Callable[[Path], None] | None = None) -> Path:
    """Weights as safetensors and the exact open_clip config (and whatever ``write_more(folder)`` adds, e.g. the
    trainer's state), written into a temporary folder renamed into place when complete: a checkpoint folder is
    whole or absent, whenever the process dies."""
    import shutil

    from .records import atomic_write_safetensors, atomic_write_text

    directory = Path(directory)
    tmp = directory.with_name(f".{directory.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # what a killed save left
    tmp.mkdir(parents=True)
    config = {**config, "model_cfg": {**config["model_cfg"], "quick_gelu": uses_quick_gelu(model)}}
    # CLIP ties no weights, so every state_dict entry is its own tensor (safetensors refuses shared ones)
    atomic_write_safetensors(tmp / WEIGHTS_FILE, model.state_dict())
    atomic_write_text(tmp / CONFIG_FILE, json.dumps(config, indent=2, sort_keys=True))
    if write_more is not None:
        write_more(tmp)
    if directory.exists():  # an incomplete save of this step by a killed run, never a checkpoint still named
        shutil.rmtree(directory)  # by latest.json: a run saves each step once
    tmp.rename(directory)
    return directory
