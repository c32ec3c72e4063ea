"""open_clip models: create by name and pretrained tag, from a weights file, a published checkpoint
(``peer:NAME``) or the Hub, or from our checkpoints; and save checkpoints.

A checkpoint is a directory open_clip itself can open with ``local-dir:``: ``open_clip_config.json``
(``model_cfg`` with the exact architecture — ``quick_gelu`` included — and ``preprocess_cfg``) and
``open_clip_model.safetensors``. Recording the activation matters: ViT-B-32 with OpenAI weights uses
QuickGELU, and re-creating it from the plain ``ViT-B-32`` config silently switches to GELU and shifts
every score. A config is checked against its weights before they load (`check_architecture`): it must make
every tensor shape the weights hold (open_clip would otherwise interpolate position embeddings to another image
size or context length without a word), and its digest must be the one ``architecture.json`` recorded at saving
(attention heads and the activation leave no trace in the shapes). A checkpoint's identity is a digest over both
files: other weights or another config, another model.

Weights without such a config are checked the same way as far as anything shows their architecture
(`check_weights_file`): shapes against the name given, the activation from the registry, a config beside the file,
or the pretrained weights they were fine-tuned from. A pretrained tag trained with QuickGELU (``openai``) is built
with it whatever the name: open_clip 3 builds the name's config and only warns.

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

import numpy
import open_clip
import torch
from open_clip.pretrained import get_pretrained_cfg

from ..records import file_digest
from .checkpoints import (
    ARCHITECTURE_FILE,
    CONFIG_FILE,
    WEIGHTS_FILE,
    checkpoint_digest,
    config_digest,
    resolve_checkpoint,
)
from .pretrained import (
    HF_HUB,
    HUB_WEIGHTS,
    PREFIX,
    ModelError,
    Peer,
    by_file,
    by_sha256,
    cached_weights,
    check_downloadable,
    hub_files,
    loadable_weights,
)
from .pretrained import find as find_peer

CONFIG_DIR = Path(__file__).parents[1] / "model_configs"
open_clip.add_model_config(CONFIG_DIR)
# a fine-tune stays within a few percent of its start (relative distance); weights trained apart are about 1.4
LINEAGE_DISTANCE = 0.5
# what a torch.save of a training run holds beside its tensors (epoch counters, metrics as numpy scalars): data, no
# code, so reading them keeps weights_only; numpy 1 pickles name the scalar by its old module
NUMPY_GLOBALS = [numpy._core.multiarray.scalar, (numpy._core.multiarray.scalar, "numpy.core.multiarray.scalar"),
                 numpy.dtype, *{type(numpy.dtype(t)) for t in (numpy.float64, numpy.float32, numpy.int64)},
                 numpy._core.multiarray._reconstruct,
                 (numpy._core.multiarray._reconstruct, "numpy.core.multiarray._reconstruct"), numpy.ndarray]


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
    """A model by open_clip name and pretrained tag (``none``: random init with ``seed``; a weights file: checked
    against the name, `check_weights_file`), a published checkpoint (``peer:NAME``, `models.pretrained`;
    ``pretrained`` is not used), a Hugging Face Hub model (``hf-hub:ORG/NAME``), or a checkpoint dir of ours."""
    if checkpoint is not None:
        path = resolve_checkpoint(checkpoint)
        config = check_architecture(path)
        model, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{path}", device=device,
                                                                     precision=precision)
        tokenizer = open_clip.get_tokenizer(f"local-dir:{path}")
        identity = {"checkpoint": checkpoint_digest(path), "path": str(path)} | (
            {"precision": precision} if precision != "fp32" else {})
        return finite(ClipModel(model.eval(), preprocess, tokenizer, config, identity), path / WEIGHTS_FILE)

    if name is None:
        raise ModelError("name a model (--model ViT-B-32) or a checkpoint (--checkpoint DIR)")
    if name.startswith(PREFIX):  # a weights file as ``pretrained``: a local copy of the peer's
        return load_peer(find_peer(name), device, precision,
                         Path(pretrained) if pretrained and Path(pretrained).is_file() else None)
    if name.startswith(HF_HUB):
        return load_hub(name.removeprefix(HF_HUB), device, precision)
    tag, weights = open_clip_weights(name, pretrained)
    quick_gelu = bool(open_clip.get_model_config(name).get("quick_gelu"))
    if tag is None:
        torch.manual_seed(seed)
    elif weights is not None:
        check_weights_file(name, weights, quick_gelu)
    else:
        check_downloadable(name, tag)
        if get_pretrained_cfg(name, tag).get("quick_gelu") and not quick_gelu:
            # open_clip builds the name's config and only warns: these weights would run GELU
            print(f"note: the {tag!r} weights of {name} were trained with QuickGELU: built with QuickGELU (as "
                  f"{name}-quickgelu); open_clip's {name} config alone runs GELU", file=sys.stderr)
            quick_gelu = True
    try:
        with _random_init_is_intended(tag is None), torch.serialization.safe_globals(NUMPY_GLOBALS):
            model, _, preprocess = open_clip.create_model_and_transforms(name, pretrained=tag, device=device,
                                                                         precision=precision,
                                                                         force_quick_gelu=quick_gelu)
    except RuntimeError as e:  # load_state_dict's missing or unexpected keys of a weights file
        if weights is None:
            raise
        raise ModelError(f"{weights} does not load as {name}: {str(e).strip().splitlines()[0][:300]}") from None
    model_cfg = open_clip.get_model_config(name)
    model_cfg["quick_gelu"] = uses_quick_gelu(model)
    # through JSON, so a config compares equal to the one its checkpoint carries
    config = json.loads(json.dumps({"model_cfg": model_cfg, "preprocess_cfg": _preprocess_cfg(model)}))
    identity = {"name": name, "pretrained": tag or "none"} | ({"seed": seed} if tag is None else {})
    if weights is not None:  # a weights file: its content, not its path, names the model
        identity["weights_sha1"] = file_digest(weights, "sha1")
    if precision != "fp32":
        identity["precision"] = precision  # other numbers: other embeddings
    return finite(ClipModel(model.eval(), preprocess, open_clip.get_tokenizer(name), config, identity),
                  weights or f"the {tag or 'random-init'} weights of {name}")


def check_model(name: str | None = None, pretrained: str | None = None, checkpoint: str | Path | None = None) -> None:
    """What `load_model` would refuse before reading weights, found without building the model (`eval --models`
    checks every model before the first loads)."""
    if checkpoint is not None:
        check_architecture(resolve_checkpoint(checkpoint))
    elif name is None:
        raise ModelError("name a model (--model ViT-B-32) or a checkpoint (--checkpoint DIR)")
    elif name.startswith(PREFIX):
        peer = find_peer(name)
        if loadable_weights(peer) is None:
            hub_files(peer.hf_hub, peer)
    elif name.startswith(HF_HUB):
        hub_files(name.removeprefix(HF_HUB))
    else:
        tag, weights = open_clip_weights(name, pretrained)
        if tag is not None and weights is None:
            check_downloadable(name, tag)


def open_clip_weights(name: str, pretrained: str | None) -> tuple[str | None, Path | None]:
    """An open_clip model's pretrained tag (None: random init) and the local weights file it names, if any."""
    if open_clip.get_model_config(name) is None:
        raise ModelError(f"unknown open_clip model {name!r}; see open_clip.list_models(), or peer:NAME for a "
                         "published checkpoint")
    tag = None if pretrained in (None, "none", "") else pretrained
    weights = Path(tag) if tag is not None and Path(tag).is_file() else None
    if tag is not None and weights is None and tag not in open_clip.list_pretrained_tags_by_model(name):
        raise ModelError(f"pretrained tag {tag!r} does not exist for {name}; known tags: "
                         f"{open_clip.list_pretrained_tags_by_model(name)} (or a local weights file, or 'none')")
    return tag, weights


def load_peer(peer: Peer, device: str, precision: str, given: Path | None = None) -> ClipModel:
    """A published checkpoint with the architecture its registry entry states, from its file in the peers' folder
    or from ``given`` (a copy of it), the file's digest checked where one is published: another entry's file is
    refused naming both."""
    weights = loadable_weights(peer, given)
    if weights is None:
        return load_hub(peer.hf_hub, device, precision, peer)
    digest = file_digest(weights)
    other = by_sha256(digest)
    if other is not None and other != peer:
        raise ModelError(f"{weights} is {other.method}'s published checkpoint (sha256 {digest[:12]}…), not "
                         f"{peer.method}'s: use --model {PREFIX}{other.name}, or {peer.method}'s own file")
    if peer.sha256 and digest != peer.sha256:
        raise ModelError(f"{weights} is not the {peer.method} file its authors published (sha256 {digest}, "
                         f"published {peer.sha256}): another version or an incomplete download; download it "
                         f"again from {peer.weights}")
    if not peer.sha256:
        print(f"note: {weights}: no published digest to check it against (its sha256 is {digest})",
              file=sys.stderr)
    clip = load_model(peer.architecture, str(weights), device=device, precision=precision)
    clip.identity["pretrained"] = f"{PREFIX}{peer.name}"
    return clip


def load_hub(repo: str, device: str, precision: str, peer: Peer | None = None) -> ClipModel:
    """An open_clip model from the Hugging Face Hub (``hf-hub:ORG/NAME``): from the cache, or downloaded when the
    Hub can be reached (else one line, at once). A peer's activation is the registry's: a Hub config that does not
    record QuickGELU for a fine-tune of OpenAI's weights is corrected, said in one line."""
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    cached, _ = hub_files(repo, peer)
    if cached is None:
        cached = hf_hub_download(repo, CONFIG_FILE)
    config = json.loads(Path(cached).read_text(encoding="utf-8"))
    quick_gelu = bool(config["model_cfg"].get("quick_gelu"))
    wanted = quick_gelu if peer is None else peer.architecture.endswith("-quickgelu")
    if wanted != quick_gelu:
        if not wanted:
            raise ModelError(f"{HF_HUB}{repo} records QuickGELU, but {peer.method} ran GELU ({peer.start}); load it "
                             "from a local copy whose open_clip_config.json says quick_gelu: false")
        print(f"note: {HF_HUB}{repo}'s config does not record QuickGELU, but {peer.method} is {peer.start}: built "
              "with QuickGELU", file=sys.stderr)
    with torch.serialization.safe_globals(NUMPY_GLOBALS):
        model, _, preprocess = open_clip.create_model_and_transforms(f"{HF_HUB}{repo}", device=device,
                                                                     precision=precision, force_quick_gelu=wanted)
    config["model_cfg"]["quick_gelu"] = uses_quick_gelu(model)
    config = json.loads(json.dumps({"model_cfg": config["model_cfg"], "preprocess_cfg": _preprocess_cfg(model)}))
    weights = next((w for w in (try_to_load_from_cache(repo, f) for f in HUB_WEIGHTS) if isinstance(w, str)), None)
    identity = {"name": f"{HF_HUB}{repo}", "pretrained": f"{PREFIX}{peer.name}" if peer else "hub"} | (
        {"weights_sha1": file_digest(Path(weights), "sha1")} if weights else {}) | (
        {"precision": precision} if precision != "fp32" else {})
    return finite(ClipModel(model.eval(), preprocess, open_clip.get_tokenizer(f"{HF_HUB}{repo}"), config, identity),
                  weights or f"{HF_HUB}{repo}")


def non_finite(tensors: dict[str, torch.Tensor]) -> str | None:
    """The first floating tensor holding NaN or inf, with how many of its values do, in words; None if none."""
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and (bad := int((~torch.isfinite(tensor)).sum())):
            return f"tensor {name} holds {bad} NaN or infinite value(s) of {tensor.numel()}"
    return None


def finite(clip: ClipModel, source: str | Path) -> ClipModel:
    """The model, once every weight it loaded is a finite number: one NaN makes every feature NaN, and NaN
    similarities score 0 on every benchmark without an error."""
    found = non_finite(clip.model.state_dict())
    if found:
        raise ModelError(f"{source}: {found}, so every feature would be NaN; use another checkpoint (an earlier "
                         "step of the run) or train it again")
    return clip


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors a weights file holds as open_clip reads them (a ``state_dict`` entry unwrapped, DataParallel's
    ``module.`` prefix dropped): a safetensors file, or a pickle read with ``weights_only`` (tensors, numbers and
    numpy scalars; never code)."""
    again = "download it again (an incomplete or other file), or give the model's own weights file"
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except (SafetensorError, OSError) as e:
            raise ModelError(f"{path} is damaged or no safetensors file ({e}): {again}") from None
    with open(path, "rb") as f:
        head = f.read(4)
    if not head.startswith((b"PK\x03\x04", b"\x80")):  # torch.save's zip, or its older bare pickle
        raise ModelError(f"{path} is no weights file: neither safetensors nor a torch.save (it starts with bytes "
                         f"{head.hex()}): {again}")
    try:
        with torch.serialization.safe_globals(NUMPY_GLOBALS):
            loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds for a file that is not a pickle of tensors
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise ModelError(f"{path} cannot be read as weights without running code from it ({first}); give a "
                         "safetensors file or a torch.save of tensors") from None
    state = loaded.get("state_dict", loaded) if isinstance(loaded, dict) else None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ModelError(f"{path} holds no state dict of tensors (a dict of name -> tensor, or one under "
                         "'state_dict'); give the model's weights file")
    return {k.removeprefix("module."): v for k, v in state.items()}


def check_weights_file(name: str, path: Path, quick_gelu: bool) -> None:
    """A weights file loaded as ``name`` must be that architecture, as far as anything shows it:
    - every tensor the two share has the shape ``name`` builds (width, layers, patch and image size, context
      length, vocabulary, embedding size; open_clip would otherwise resize position embeddings without a word);
    - the activation, which no shape shows, where something records it: the registry (the file's sha256 is a
      published checkpoint's), the ``open_clip_config.json`` beside it (a Hub or local-dir folder, ours too), or
      the pretrained weights it was fine-tuned from (`lineage`: within a few percent of a cached tag's weights).
    Where none does, the name is taken and a note says how to settle it."""
    state = read_weights(path)
    with _random_init_is_intended(True):
        built = open_clip.create_model(name, device="meta", force_quick_gelu=quick_gelu).state_dict()
    differ = [f"{k} {list(state[k].shape)} in the file, {list(v.shape)} by {name}" for k, v in built.items()
              if k in state and state[k].shape != v.shape]
    missing = [k for k in built if k not in state]
    if differ or len(missing) > len(built) // 2:
        what = "; ".join(differ[:3]) if differ else f"{len(missing)} of its tensors are not in the file, e.g. " \
                                                   f"{', '.join(missing[:3])}"
        raise ModelError(f"{path} is not {name}'s weights: {what}; name the architecture they were trained as "
                         "(--model), or peer:NAME for a published checkpoint")
    activation = "QuickGELU" if quick_gelu else "GELU"
    peer = by_sha256(file_digest(path)) or by_file(path)
    if peer is not None and peer.architecture is not None and \
            peer.architecture.endswith("-quickgelu") != quick_gelu:
        raise ModelError(f"{path} is {peer.method}'s published checkpoint ({peer.start}), but --model {name} runs "
                         f"{activation}: use --model {PREFIX}{peer.name} (or --model {peer.architecture})")
    beside = path.parent / CONFIG_FILE
    if beside.is_file():
        recorded = json.loads(beside.read_text(encoding="utf-8")).get("model_cfg", {})
        if bool(recorded.get("quick_gelu")) != quick_gelu:
            raise ModelError(f"{beside} records quick_gelu={bool(recorded.get('quick_gelu'))} for {path.name}, but "
                             f"--model {name} runs {activation}: load the folder itself (--checkpoint "
                             f"{path.parent} for a checkpoint of ours), or name the model that matches")
        return
    twin = name.removesuffix("-quickgelu") if name.endswith("-quickgelu") else f"{name}-quickgelu"
    if peer is not None or twin not in open_clip.list_models():
        return  # the registry settled it, or the architecture has one activation only
    for ref_name, tag, ref_quick in reference_tags(name, twin):
        distance = lineage(state, read_weights(Path(cached_weights(ref_name, tag))))
        if distance < LINEAGE_DISTANCE and ref_quick != quick_gelu:
            raise ModelError(
                f"{path} is a fine-tune of {ref_name}'s {tag!r} weights (relative distance {distance:.3f}), which "
                f"run {'QuickGELU' if ref_quick else 'GELU'}, but --model {name} runs {activation}: use --model "
                f"{twin}")
        if distance < LINEAGE_DISTANCE:
            return
    other = ("trained with GELU (open_clip's own trainings on LAION or DataComp)" if quick_gelu
             else "a fine-tune of OpenAI's weights")
    print(f"note: the activation of {path} cannot be read from its weights: built with {activation}, as --model "
          f"{name} says; if they are {other}, name {twin} (docs/commands/models.md, 'Published checkpoints')",
          file=sys.stderr)


def reference_tags(*names: str) -> list[tuple[str, str, bool]]:
    """(name, tag, QuickGELU?) of every pretrained tag of these architectures whose weights are cached."""
    return [(n, tag, bool(get_pretrained_cfg(n, tag).get("quick_gelu"))) for n in names
            for tag in open_clip.list_pretrained_tags_by_model(n) if cached_weights(n, tag)]


def lineage(state: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> float:
    """How far weights are from a reference: ||w - w0|| / ||w0|| over the floating tensors both hold in one shape.
    A fine-tune stays within a few percent of its start; weights trained apart are about sqrt(2) from each
    other."""
    shared = [k for k, v in reference.items() if k in state and state[k].shape == v.shape and v.is_floating_point()
              and k != "logit_scale"]
    if not shared:
        return float("inf")
    diff = sum(float((state[k].double() - reference[k].double()).pow(2).sum()) for k in shared)
    norm = sum(float(reference[k].double().pow(2).sum()) for k in shared)
    return (diff / norm) ** 0.5 if norm else float("inf")


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


def save_checkpoint(directory: str | Path, model: torch.nn.Module, config: dict,
                    write_more: Callable[[Path], None] | None = None) -> Path:
    """Weights as safetensors, the exact open_clip config and its digest (``architecture.json``; and whatever
    ``write_more(folder)`` adds, e.g. the trainer's state), written into a temporary folder renamed into place when
    complete: a checkpoint folder is whole or absent, whenever the process dies."""
    import shutil

    from ..records import atomic_write_safetensors, atomic_write_text

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
