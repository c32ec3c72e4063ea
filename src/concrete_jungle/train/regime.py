"""What a run trains (``regime`` in the config): every weight, LoRA adapters, or what `freeze` leaves.

Frozen weights get no gradient and stay out of the optimizer (`state.param_groups` takes the parameters that
require one): AdamW's weight decay never touches them, and a checkpoint's optimizer state holds the trained ones
alone. A LoRA run freezes every weight of the model and trains adapters (`lora`); each of its checkpoints holds the
merged weights, which open_clip loads as any model, and the adapters beside them (``lora_adapters.safetensors``,
with the digest of the frozen weights they were trained on), from which a run resumes bitwise: the frozen weights
are rebuilt as the run began, checked against that digest, and the adapters loaded onto them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn

from ..configs import ConfigError
from ..errors import TrainingError
from ..records import atomic_write_bytes
from .config import FreezeConfig, RegimeConfig
from .lora import adapt_block, adaptable, adapter_state, base_state, merged

ADAPTERS_FILE = "lora_adapters.safetensors"  # in a LoRA run's checkpoint folder, beside the merged weights
LOGIT_PARAMETERS = ("logit_scale", "logit_bias")  # the temperature, and a SigLIP model's bias
# the parameters of each tower that come before its first block
STEMS = {"image": ("conv1", "class_embedding", "positional_embedding", "ln_pre"),
         "text": ("token_embedding", "positional_embedding", "cls_emb")}


def in_tower(name: str, which: str) -> bool:
    """Whether parameter ``name`` of an open_clip model belongs to its image or its text tower."""
    if which == "image":
        return name.startswith("visual.")
    return not name.startswith("visual.") and name not in LOGIT_PARAMETERS


def tower(model: nn.Module, which: str, needed_by: str) -> tuple[str, nn.Module]:
    """The name prefix and the module of an open_clip model's image or text transformer (the module holding
    ``transformer.resblocks`` and the stem); a `ConfigError` naming ``needed_by`` for a tower of another kind."""
    from open_clip.transformer import TextTransformer, Transformer, VisionTransformer

    if which == "image":
        prefix, module = "visual.", getattr(model, "visual", None)
        own = isinstance(module, VisionTransformer)
    elif isinstance(getattr(model, "text", None), TextTransformer):
        prefix, module, own = "text.", model.text, True
    else:
        prefix, module = "", model
        own = isinstance(getattr(model, "transformer", None), Transformer) and hasattr(model, "token_embedding")
    if not own:
        kind = type(getattr(model, "visual" if which == "image" else "text", model)).__name__
        raise ConfigError(f"{needed_by} needs open_clip's own {which} transformer; this model's {which} tower is "
                          f"{kind}" + (f": freeze the whole tower (regime.freeze.{which}) instead"
                                       if needed_by.startswith("regime.freeze") else ""))
    return prefix, module


def frozen_names(model: nn.Module, freeze: FreezeConfig) -> set[str]:
    """The names of the parameters ``freeze`` leaves as they are."""
    names = [n for n, _ in model.named_parameters()]
    frozen = {n for n in names if n in LOGIT_PARAMETERS} if freeze.logit_scale else set()
    for which in ("image", "text"):
        if getattr(freeze, which):
            frozen |= {n for n in names if in_tower(n, which)}
        k = getattr(freeze, f"{which}_blocks")
        if not k:
            continue
        setting = f"regime.freeze.{which}_blocks"
        prefix, module = tower(model, which, setting)
        blocks = len(module.transformer.resblocks)
        if k > blocks:
            raise ConfigError(f"{setting} {k} is more than the {blocks} blocks of the {which} tower; to freeze it all, "
                              f"set regime.freeze.{which}")
        parts = [f"{prefix}{s}" for s in STEMS[which]] + [f"{prefix}transformer.resblocks.{i}" for i in range(k)]
        frozen |= {n for n in names if any(n == p or n.startswith(p + ".") for p in parts)}
    return frozen


def weights_digest(tensors: dict[str, torch.Tensor]) -> str:
    """The sha256 of tensors by name: their names, dtypes, shapes and bytes."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach()
        h.update(f"{name} {t.dtype} {tuple(t.shape)}\n".encode())
        h.update(t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class Regime:
    """``Regime(model, config)`` freezes ``model``'s weights and adds its adapters as ``config`` says (in place,
    before the optimizer is made); `checkpoint_model` is what a checkpoint saves, `save` and `load` the adapters
    beside it."""

    def __init__(self, model: nn.Module, config: RegimeConfig):
        self.model, self.config = model, config
        self.lora = config.lora.rank > 0
        if self.lora:
            adapt_towers(model, config)
            self.base_digest = weights_digest(base_state(model))
        else:
            frozen = frozen_names(model, config.freeze)
            for name, p in model.named_parameters():
                p.requires_grad_(name not in frozen)
        if not any(p.requires_grad for p in model.parameters()):
            raise ConfigError("regime: no parameter of the model is left to train")

    def describe(self) -> str:
        """The regime in one line, with the number of parameters it trains; "" for full fine-tuning."""
        params = list(self.model.parameters())
        trained = sum(p.numel() for p in params if p.requires_grad)
        counts = f"{trained / 1e6:.3g} M of {sum(p.numel() for p in params) / 1e6:.3g} M parameters train"
        if self.lora:
            c = self.config.lora
            return (f"regime: LoRA rank {c.rank}, alpha {c.alpha:g}, dropout {c.dropout:g} on the "
                    f"{' and '.join(c.modules)} projections of the {' and '.join(c.towers)} tower(s), every model "
                    f"weight frozen: {counts}")
        frozen = [k if v is True else f"{k} {v}" for k, v in asdict(self.config.freeze).items() if v]
        return f"regime: frozen {', '.join(frozen)}: {counts}" if frozen else ""

    def checkpoint_model(self) -> nn.Module:
        """What a checkpoint's weights are: the model, with its adapters merged into a copy in a LoRA run."""
        return merged(self.model) if self.lora else self.model

    def save(self, directory: Path) -> None:
        """A LoRA run's adapters, their settings and the digest of the weights they adapt, as safetensors."""
        if not self.lora:
            return
        from safetensors.torch import save

        meta = {"lora": json.dumps(asdict(self.config.lora)), "base_sha256": self.base_digest}
        tensors = {k: v.detach().cpu().contiguous() for k, v in adapter_state(self.model).items()}
        atomic_write_bytes(directory / ADAPTERS_FILE, save(tensors, metadata=meta))

    def load(self, directory: Path, fix: str) -> None:
        """The adapters `save` wrote in ``directory``, onto this run's frozen weights once they are checked to be
        the ones the adapters were trained on; a `TrainingError` with ``fix`` (what to do instead) before any
        change otherwise."""
        from safetensors import SafetensorError, safe_open

        path = directory / ADAPTERS_FILE
        if not path.is_file():
            raise TrainingError(f"{directory} holds no {ADAPTERS_FILE}: it is not a checkpoint of a LoRA run; {fix}")
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = f.metadata() or {}
                tensors = {k: f.get_tensor(k) for k in f.keys()}
        except (SafetensorError, OSError) as e:
            raise TrainingError(f"{path} is damaged ({e}); {fix}") from None
        own = adapter_state(self.model)
        recorded = meta.get("lora")
        if recorded is None or json.loads(recorded) != json.loads(json.dumps(asdict(self.config.lora))):
            raise TrainingError(f"{path} holds adapters of other settings ({recorded}) than this run's regime.lora; "
                                f"{fix}")
        if meta.get("base_sha256") != self.base_digest:
            raise TrainingError(f"{path} adapts other weights (sha256 {meta.get('base_sha256')}) than this run's "
                                f"model ({self.base_digest}): the run must start from the model its adapters were "
                                f"trained on; {fix}")
        if tensors.keys() != own.keys() or any(tensors[k].shape != own[k].shape for k in own):
            raise TrainingError(f"{path} does not hold this model's adapters; {fix}")
        with torch.no_grad():
            for k, v in own.items():
                v.copy_(tensors[k])


def adapt_towers(model: nn.Module, config: RegimeConfig) -> None:
    """Every weight of ``model`` frozen, adapters on the blocks of the towers ``config.lora`` names (the first
    drawn from the torch generator as it stands: a seeded run draws the same adapters)."""
    c = config.lora
    model.requires_grad_(False)
    for which in c.towers:
        _, module = tower(model, which, "regime.lora")
        for i, block in enumerate(module.transformer.resblocks):
            if (reason := adaptable(block)) is not None:
                raise ConfigError(f"regime.lora cannot adapt block {i} of the {which} tower: {reason}; leave the "
                                  "tower out of regime.lora.towers")
            adapt_block(block, c.modules, c.rank, c.alpha, c.dropout)
