"""open_clip models: create by name and pretrained tag or from our checkpoints, and save checkpoints.

A checkpoint is a directory open_clip itself can open with ``local-dir:``: ``open_clip_config.json``
(``model_cfg`` with the exact architecture — ``quick_gelu`` included — and ``preprocess_cfg``) and
``open_clip_model.safetensors``. Recording the activation matters: ViT-B-32 with OpenAI weights uses
QuickGELU, and re-creating it from the plain ``ViT-B-32`` config silently switches to GELU and shifts
every score. A config is checked against its weights before they load (`check_architecture`): it must make
every tensor shape the weights hold (open_clip would otherwise interpolate position embeddings to another image
size or context length without a word), and its digest must be the one ``architecture.json`` recorded at saving
(attention heads and the activation leave no trace in the shapes). A checkpoint's identity is a digest over both
files: other weights or another config, another model.

``--pretrained none --seed S`` gives a reproducible random-init model for smoke tests and speed checks.
The tiny ``cj-tiny`` architecture (configs in ``model_configs/``) serves tests and the offline demo.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import open_clip
import torch

from .checkpoints import ARCHITECTURE_FILE, CONFIG_FILE, WEIGHTS_FILE, config_digest, resolve_checkpoint
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
    ``runs/x/checkpoints/step-0000100 (weights and config sha1 1a2b…)``."""
    if "checkpoint" in identity:
        return f"{identity.get('path', 'checkpoint')} (weights and config sha1 {identity['checkpoint'][:12]})"
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
        config = check_architecture(path)
        model, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{path}", device=device,
                                                                     precision=precision)
        tokenizer = open_clip.get_tokenizer(f"local-dir:{path}")
        identity = {"checkpoint": checkpoint_digest(path), "path": str(path)} | (
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


def checkpoint_digest(path: Path) -> str:
    """A checkpoint's identity: a sha1 over its weights and its config."""
    both = file_digest(path / WEIGHTS_FILE, "sha1") + file_digest(path / CONFIG_FILE, "sha1")
    return hashlib.sha1(both.encode()).hexdigest()


def check_architecture(path: Path) -> dict:
    """The checkpoint's open_clip config, once it is known to describe the weights beside it: the model it builds
    has every tensor the weights hold, each in the stored shape (which fixes the image and patch size, the context
    length and every width), and it is the config ``architecture.json`` recorded when the checkpoint was saved (which
    fixes the attention heads and the activation). A checkpoint saved before that record loads with a warning."""
    from safetensors import SafetensorError, safe_open

    config_file, weights = path / CONFIG_FILE, path / WEIGHTS_FILE
    restore = "restore the config the checkpoint was saved with"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelError(f"{config_file} is damaged (not JSON: {e}); {restore}") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_cfg"), dict):
        raise ModelError(f"{config_file} has no model_cfg (not an open_clip config of a checkpoint); {restore}")
    try:
        with safe_open(str(weights), "pt") as f:
            stored = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
    except (SafetensorError, OSError) as e:
        raise ModelError(f"{weights} is damaged ({e}): its tensors cannot be read; use another checkpoint (an "
                         "earlier step of the run) or train it again") from None
    try:
        with _random_init_is_intended(True):  # no weights: the shapes the config makes, on no memory
            built = open_clip.create_model(f"local-dir:{path}", load_weights=False, device="meta")
    except (AssertionError, KeyError, RuntimeError, TypeError, ValueError) as e:
        raise ModelError(f"{config_file} describes no model open_clip can build ({type(e).__name__}: {e}); "
                         f"{restore}") from None
    made = {k: list(v.shape) for k, v in built.state_dict().items()}
    differ = [f"{k} {stored.get(k, 'absent')} in the weights, {made.get(k, 'absent')} by the config"
              for k in sorted(set(stored) | set(made)) if stored.get(k) != made.get(k)]
    if differ:
        raise ModelError(f"{config_file} does not describe the weights in {weights.name}: {len(differ)} tensor(s) "
                         f"differ ({'; '.join(differ[:3])}); {restore}")
    record = path / ARCHITECTURE_FILE
    if not record.is_file():
        print(f"warning: {config_file} is taken on trust: the checkpoint has no {ARCHITECTURE_FILE} (saved before "
              "configs were recorded), so its attention heads and activation cannot be checked against the weights",
              file=sys.stderr)
        return config
    try:
        recorded = json.loads(record.read_text(encoding="utf-8"))["open_clip_config_sha256"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise ModelError(f"{record} is damaged ({type(e).__name__}: {e}); restore it, or remove it to load the "
                         "checkpoint unchecked") from None
    if recorded != config_digest(config):
        raise ModelError(f"{config_file} is not the config the weights were saved with (its digest differs from the "
                         f"one {ARCHITECTURE_FILE} records): a model with other attention heads or another activation "
                         f"would take the same weights and compute other features; {restore}")
    return config


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
    """Weights as safetensors, the exact open_clip config and its digest (``architecture.json``; and whatever
    ``write_more(folder)`` adds, e.g. the trainer's state), written into a temporary folder renamed into place when
    complete: a checkpoint folder is whole or absent, whenever the process dies."""
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
    atomic_write_text(tmp / ARCHITECTURE_FILE, json.dumps({"open_clip_config_sha256": config_digest(config)}))
    if write_more is not None:
        write_more(tmp)
    if directory.exists():  # an incomplete save of this step by a killed run, never a checkpoint still named
        shutil.rmtree(directory)  # by latest.json: a run saves each step once
    tmp.rename(directory)
    return directory
