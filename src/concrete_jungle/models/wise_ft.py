"""WiSE-FT (Wortsman et al., "Robust fine-tuning of zero-shot models", CVPR 2022): the weights of a fine-tune
interpolated with those it started from, theta = (1 - alpha) * start + alpha * finetuned, for every tensor.

Hard-negative fine-tuning buys composition with zero-shot recognition; the interpolation walks back along that
line without training. Each alpha gives a checkpoint of ours (``<out>/alpha-<alpha>/``: safetensors, the exact
open_clip config, ``wise_ft.json`` naming both ends), which ``eval --checkpoint`` takes like any other. alpha 0 and
1 are the two ends themselves, bit for bit. Two models of different architectures have no line between them: they
are refused before anything is written, naming the config entry or the tensor that differs.

An end is named as the command takes it (`check_end`): a checkpoint of ours (its folder,
``<run>/checkpoints/latest`` or a run), ``peer:NAME``, ``hf-hub:ORG/NAME``, or ``NAME:TAG`` for an open_clip
pretrained model (``ViT-B-32-quickgelu:openai``; ``ViT-B-32:openai`` is built with QuickGELU too, `models`).
"""

from __future__ import annotations

import json
from pathlib import Path

RECORD = "wise_ft.json"
SCHEMES = ("peer:", "hf-hub:")


class WiseFtError(ValueError):
    """Ends that cannot be interpolated, or an output that may not be replaced; the message says which and why."""


def check_end(spec: str, role: str) -> dict:
    """What an end names, checked without loading anything: {"checkpoint": folder} or {"name", "pretrained"}."""
    from ..configs import open_clip_model_names
    from .checkpoints import CheckpointError, resolve_checkpoint

    if spec.startswith(SCHEMES):
        return {"name": spec, "pretrained": None}
    try:
        return {"checkpoint": str(resolve_checkpoint(spec))}
    except CheckpointError as e:
        if Path(spec).exists() or Path(spec).name == "latest":
            raise WiseFtError(f"{role}: {e}") from None
    name, colon, tag = spec.rpartition(":")
    if colon and name in open_clip_model_names():
        return {"name": name, "pretrained": tag}
    raise WiseFtError(f"{role} {spec!r} names no model: give a checkpoint folder (or <run>/checkpoints/latest, or a "
                      "run's folder), peer:NAME, hf-hub:ORG/NAME, or an open_clip name and pretrained tag as "
                      "NAME:TAG (e.g. ViT-B-32-quickgelu:openai)")


def alpha_name(alpha: float) -> str:
    """``alpha-0.5``: six significant digits where they name the alpha exactly, else every digit it takes
    (``alpha-0.500000001``), so two alphas never share a folder."""
    short = f"{alpha:g}"
    return f"alpha-{short if float(short) == alpha else repr(alpha)}"


def differences(start, finetuned) -> list[str]:
    """Why two models have no interpolation: every config entry and tensor (name, shape, dtype) that differs."""
    found = []

    def walk(a, b, where: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                walk(a.get(key, "absent"), b.get(key, "absent"), f"{where}.{key}" if where else key)
        elif a != b:
            found.append(f"config {where}: {json.dumps(a)} in START, {json.dumps(b)} in FINETUNED")

    walk(start.config, finetuned.config, "")
    # the fine-tune's own values, kept apart from the model each alpha is loaded into
    a, b = start.model.state_dict(), {k: v.detach().clone() for k, v in finetuned.model.state_dict().items()}
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            found.append(f"tensor {key}: only in {'FINETUNED' if key in b else 'START'}")
        elif (a[key].shape, a[key].dtype) != (b[key].shape, b[key].dtype):
            found.append(f"tensor {key}: {list(a[key].shape)} {a[key].dtype} in START, {list(b[key].shape)} "
                         f"{b[key].dtype} in FINETUNED")
    return found


def interpolate(start: dict, finetuned: dict, alpha: float) -> dict:
    """(1 - alpha) * start + alpha * finetuned per tensor, computed in float64 and stored in the tensors' dtype;
    alpha 0 and 1 return the ends' own values (no arithmetic: -0.0 stays -0.0). Tensors that are not floating point
    (counters, masks) must be equal in both ends."""
    import torch

    if alpha in (0.0, 1.0):
        return {k: v.clone() for k, v in (start if alpha == 0.0 else finetuned).items()}
    out = {}
    for key, a in start.items():
        b = finetuned[key]
        if not a.is_floating_point():
            if not torch.equal(a, b):
                raise WiseFtError(f"tensor {key} ({a.dtype}) differs between START and FINETUNED and is not a weight "
                                  "that can be interpolated")
            out[key] = b.clone()
            continue
        out[key] = ((1 - alpha) * a.double() + alpha * b.double()).to(b.dtype)
    return out


def describe(clip) -> dict:
    """An end as its record names it: its label and the hash of its weights and config."""
    return {"label": clip.label, "hash": clip.hash, "identity": clip.identity}


def planned(out: Path, alphas: list[float], record: dict, overwrite: bool) -> list[float]:
    """The alphas still to write: a folder that holds this interpolation already is kept (a stopped run resumes);
    one that holds anything else is refused, unless ``overwrite``."""
    todo = []
    for alpha in alphas:
        folder = out / alpha_name(alpha)
        done = folder / RECORD
        if done.is_file() and json.loads(done.read_text(encoding="utf-8")) == record | {"alpha": alpha}:
            continue
        if folder.exists() and not overwrite:
            raise WiseFtError(f"{folder} holds something else than this interpolation (another START or "
                              "FINETUNED, or not ours); pass --overwrite to replace it, or choose another --out")
        todo.append(alpha)
    return todo


def wise_ft(start_spec: str, finetuned_spec: str, alphas: list[float], out: str | Path,
            overwrite: bool = False, progress=None) -> list[Path]:
    """Write one checkpoint per alpha under ``out``; the folders, in the order of ``alphas``. ``progress(text)``
    hears what is done."""
    from ..files.outputs import output_folder
    from ..records import atomic_write_json
    from .factory import load_model, non_finite, save_checkpoint

    out = output_folder(out)
    ends = [check_end(start_spec, "START"), check_end(finetuned_spec, "FINETUNED")]
    start, finetuned = (load_model(**end) for end in ends)
    found = differences(start, finetuned)
    if found:
        raise WiseFtError(f"START ({start.label}) and FINETUNED ({finetuned.label}) are not one architecture, so no "
                          f"weights lie between them: {len(found)} difference(s): {'; '.join(found[:4])}")
    record = {"start": describe(start), "finetuned": describe(finetuned),
              "formula": "(1 - alpha) * start + alpha * finetuned, every tensor"}
    # the fine-tune's own values, kept apart from the model each alpha is loaded into
    a, b = start.model.state_dict(), {k: v.detach().clone() for k, v in finetuned.model.state_dict().items()}
    for alpha in planned(out, alphas, record, overwrite):
        weights = interpolate(a, b, alpha)
        found = non_finite(weights)
        if found:  # the ends were checked as they loaded; what is written is checked as a checkpoint loaded is
            raise WiseFtError(f"{alpha_name(alpha)}: {found}; nothing written for it (both ends loaded as finite "
                              "weights, so their interpolation should be: report it with both ends)")
        finetuned.model.load_state_dict(weights)
        save_checkpoint(out / alpha_name(alpha), finetuned.model, finetuned.config,
                        lambda folder, alpha=alpha: atomic_write_json(folder / RECORD, record | {"alpha": alpha}))
        if progress:
            progress(f"{alpha_name(alpha)}: {out / alpha_name(alpha)}")
    return [out / alpha_name(alpha) for alpha in alphas]
