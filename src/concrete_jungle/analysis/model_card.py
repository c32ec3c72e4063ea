"""A model card for a checkpoint of ours: the ``README.md`` a Hugging Face Hub page shows, written from what made
the checkpoint (`concrete-jungle model-card`; `wise-ft` writes one beside each checkpoint).

It says what the checkpoint is (architecture, activation), how it was made (the training run's data and the
recipe that planted it, the loss, steps, batch, learning rate and seed; or the WiSE-FT interpolation and its two
ends), the licence of the weights it started from (followed back through the checkpoints it was fine-tuned from),
the evaluation with 95 % intervals where ``eval --out`` folders of this very checkpoint are given, and how to load
and publish it. A checkpoint folder is open_clip's Hub layout already (``open_clip_config.json``,
``open_clip_model.safetensors``), so ``hf upload`` of the folder publishes a model that
``open_clip.create_model_and_transforms("hf-hub:ORG/NAME")`` loads. A ``README.md`` not written here is never
replaced.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..outcomes import RESAMPLES

CARD = "README.md"
MARK = "<!-- written by concrete-jungle model-card -->"
OPENAI = ("MIT (OpenAI's CLIP weights: github.com/openai/CLIP); OpenAI's model card restricts deployed uses", "mit")


class CardError(ValueError):
    """A card that cannot be written as asked; the message says why."""


def start_licence(model: dict, depth: int = 0) -> tuple[str, str | None]:
    """(licence in words, Hub licence id or None) of the weights a model section (``name``, ``pretrained``,
    ``checkpoint``) starts from, followed through checkpoints of ours to the first weights not trained here."""
    from ..models import pretrained as published

    if model.get("checkpoint") and depth < 8:
        run = Path(model["checkpoint"]).resolve()
        for config in (run.parents[1] / "config.json", run / "config.json"):
            if config.is_file():
                return start_licence(json.loads(config.read_text(encoding="utf-8"))["model"], depth + 1)
        return "unknown: the checkpoint it started from has no training run beside it", None
    name, tag = model.get("name") or "", model.get("pretrained") or "none"
    if name.startswith(published.PREFIX) or tag.startswith(published.PREFIX):
        peer = published.find(name if name.startswith(published.PREFIX) else tag)
        return f"{peer.licence} ({peer.method}, {peer.repository})", None
    if tag == "openai":
        return OPENAI
    if tag in ("none", ""):
        return "none: trained from a random initialisation", None
    from open_clip.pretrained import get_pretrained_cfg

    cfg = get_pretrained_cfg(name, tag)
    where = f"https://huggingface.co/{cfg['hf_hub'].rstrip('/')}" if cfg.get("hf_hub") else cfg.get("url", "its source")
    return f"that of open_clip's {name} {tag!r} weights (see {where})", None


def architecture_lines(config: dict) -> list[str]:
    m = config["model_cfg"]
    v, t = m.get("vision_cfg", {}), m.get("text_cfg", {})
    return [f"- image tower: width {v.get('width')}, {v.get('layers')} layers, patch {v.get('patch_size')}, image "
            f"size {v.get('image_size')}",
            f"- text tower: width {t.get('width')}, {t.get('layers')} layers, {t.get('heads')} heads, context "
            f"{t.get('context_length')}, vocabulary {t.get('vocab_size')}",
            f"- embedding {m.get('embed_dim')}; activation {'QuickGELU' if m.get('quick_gelu') else 'GELU'} "
            "(recorded in open_clip_config.json, so open_clip rebuilds it exactly)"]


def dataset_lines(folder: str) -> list[str]:
    """A ConcreteBatch's recipe (its config.yaml: mode, captioner, editor, sampler) and size (summary.json)."""
    import yaml

    path = Path(folder)
    recipe = (yaml.safe_load((path / "config.yaml").read_text()) or {}).get("dataset", {}) \
        if (path / "config.yaml").is_file() else {}
    summary = json.loads((path / "summary.json").read_text()) if (path / "summary.json").is_file() else {}
    sampler = recipe.get("sampler") or {}
    parts = [f"mode {recipe['mode']}" if "mode" in recipe else None,
             f"captioner {recipe['captioner']}" if "captioner" in recipe else None,
             f"editor {recipe['editor']}" if "editor" in recipe else None,
             f"scale {recipe['scale']}" if "scale" in recipe else None,
             ", ".join(f"{k} {sampler[k]}" for k in ("top_k", "temperature", "policy") if k in sampler) or None,
             f"{summary['ok']} records" if "ok" in summary else None]
    shown = "; ".join(p for p in parts if p) or "its recipe was not recorded (no config.yaml)"
    return [f"- ConcreteBatch `{path.name}`: {shown}"]


def training_lines(folder: Path) -> tuple[list[str], tuple[str, str | None]]:
    """How a training run's checkpoint was made, and the licence of its start weights."""
    run = folder.parents[1]
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    model, data, loss, optim = config["model"], config["data"], config["loss"], config.get("optim", {})
    step = int(folder.name.removeprefix("step-")) if folder.name.removeprefix("step-").isdigit() else "?"
    start = (f"checkpoint {model['checkpoint']}" if model.get("checkpoint")
             else f"a random initialisation of open_clip {model.get('name')}" if model.get("pretrained") in
             (None, "none", "") else f"open_clip {model.get('name')} with the {model.get('pretrained')!r} weights")
    lines = [f"Fine-tuned by `concrete-jungle train` (Slipform) from {start}, for {step} of {config.get('steps')} "
             f"steps at batch size {config.get('batch_size')}, seed {config.get('seed')}.", "",
             f"- loss: {loss.get('name')}" + (f" (margins m_min {loss.get('m_min')}, m_max {loss.get('m_max')}, "
                                              f"center {loss.get('center')}, tau {loss.get('tau')})"
                                              if loss.get("name") == "cement" else ""),
             f"- optimiser: learning rate {optim.get('lr')}, warm-up {optim.get('warmup')} steps, weight decay "
             f"{optim.get('weight_decay')}; precision {model.get('precision')}",
             f"- hard negatives: {'used' if data.get('negatives', True) else 'masked (the control without them)'}"]
    lines += [line for d in data.get("concretebatch", []) for line in dataset_lines(d)]
    lines += [f"- plain pairs: `{p}`" for p in data.get("pairs", [])]
    return lines, start_licence(model)


def wise_ft_lines(folder: Path) -> tuple[list[str], tuple[str, str | None]]:
    record = json.loads((folder / "wise_ft.json").read_text(encoding="utf-8"))
    start, finetuned = record["start"], record["finetuned"]
    lines = [f"WiSE-FT weight interpolation (`concrete-jungle wise-ft`), alpha {record['alpha']:g}: "
             f"{record['formula']}, between", "",
             f"- START: {start['label']}", f"- FINETUNED: {finetuned['label']}"]
    ends = [start_licence(start["identity"] if "checkpoint" not in start["identity"]
                          else {"checkpoint": start["identity"]["path"]}),
            start_licence({"checkpoint": finetuned["identity"]["path"]} if "checkpoint" in finetuned["identity"]
                          else finetuned["identity"])]
    words = ends[0][0] if ends[0] == ends[1] else f"START: {ends[0][0]}; FINETUNED: {ends[1][0]}"
    return lines, (words, ends[0][1] if ends[0][1] == ends[1][1] else None)


def evaluation_lines(folder: Path, results: list[str], resamples: int) -> list[str]:
    """Each benchmark's headline number and the two means, with 95 % intervals, from ``eval --out`` folders of
    this checkpoint (results of another model are refused)."""
    from ..models import checkpoint_digest
    from .tradeoff import interval_text, place, read_point

    if not results:
        return ["Not evaluated here: `concrete-jungle model-card CHECKPOINT --results EVAL_OUT` adds the table."]
    digest, merged = checkpoint_digest(folder), {}
    for path in results:
        for name, result in read_point(path).items():
            if (result.get("model") or {}).get("checkpoint") != digest:
                raise CardError(f"{path}/{name}.json holds the results of {result.get('model_label', 'another model')}"
                                f", not of {folder}: give eval --out folders of this checkpoint")
            merged[name] = result
    placed = place(merged, resamples=resamples)
    lines = ["| benchmark | headline (%) | 95 % interval |", "| --- | --- | --- |"]
    for kind, part in placed.items():
        lines += [f"| {name} ({kind}) | {p['value']:.2f} | {interval_text(p['ci95'])} |"
                  for name, p in part["parts"].items()]
        lines.append(f"| **{kind} mean** | **{part['mean']:.2f}** | {interval_text(part['ci95'])} |")
    return lines + ["", f"Intervals: bootstrap over each benchmark's images, {resamples} resamples. The data each "
                    "number came from:", ""] + [f"- {n}: {data_source(r)}" for n, r in merged.items()]


def data_source(result: dict) -> str:
    """Where a result's benchmark data was read (its data root, the digest of its files), and whether that data
    is a rendered toy world's (a folder holding world.json, `toyworld/build.py`, behind the root or its links)
    rather than the benchmark's own."""
    digest = f"files sha256 `{result.get('benchmark_files_sha256', '?')[:12]}`"
    root = result.get("data_root")
    if root is None:
        return f"{digest} (data root not recorded: evaluated before results recorded it)"
    inside = [Path(root)] + [child.resolve() for child in Path(root).glob("*")] if Path(root).is_dir() else []
    toy = any((folder / "world.json").is_file() for path in inside for folder in (path, *path.parents))
    return f"`{root}`, {digest}" + (": **the toy world** (rendered scenes in the benchmark's format, not the "
                                   "benchmark's own data)" if toy else "")


def card(folder: str | Path, results: list[str] | None = None, repo: str = "ORG/NAME",
         resamples: int = RESAMPLES) -> str:
    from ..models.checkpoints import CONFIG_FILE, resolve_checkpoint

    folder = resolve_checkpoint(folder)
    config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    if (folder / "wise_ft.json").is_file():
        made, (licence, licence_id) = wise_ft_lines(folder)
    elif folder.parent.name == "checkpoints" and (folder.parents[1] / "config.json").is_file():
        made, (licence, licence_id) = training_lines(folder)
    else:
        made, (licence, licence_id) = ["How it was made is not recorded beside it."], ("unknown", None)
    head = ["---", "library_name: open_clip", f"license: {licence_id or 'other'}",
            "tags:", "- clip", "- open_clip", "- compositionality", "- concrete-jungle",
            "pipeline_tag: zero-shot-image-classification", "---", "", MARK, "",
            f"# {repo if repo != 'ORG/NAME' else folder.name}", "",
            "A CLIP model (open_clip) trained for compositional understanding with concrete-jungle "
            "(concreteness-aware hard negatives and the Cement loss).", ""]
    body = ["## Architecture", "", *architecture_lines(config), "", "## How it was made", "", *made, "",
            "## Evaluation", "", *evaluation_lines(folder, results or [], resamples), "",
            "## Licence", "", f"Start weights: {licence}. The fine-tuned weights follow the start weights' terms.", "",
            "## Use", "", "```python", "import open_clip", "",
            f'model, _, preprocess = open_clip.create_model_and_transforms("hf-hub:{repo}")',
            f'tokenizer = open_clip.get_tokenizer("hf-hub:{repo}")', "```", "",
            f"or, from this folder: `open_clip.create_model_and_transforms(\"local-dir:{folder}\")`; "
            f"`concrete-jungle eval --checkpoint {folder}`.", "",
            "## Publish", "", "```bash",
            upload_line(repo, folder), "```", ""]
    return "\n".join(head + body)


def upload_line(repo: str, folder: Path) -> str:
    """The shell command that publishes ``folder``, each argument quoted: a folder name is pasted as it is."""
    import shlex

    return f"hf upload {shlex.quote(repo)} {shlex.quote(str(folder))} . --exclude 'trainer_state.*'"


def write_card(folder: str | Path, results: list[str] | None = None, repo: str = "ORG/NAME",
               resamples: int = RESAMPLES) -> Path:
    """Write the card into the checkpoint folder (replacing only a card written here); its path."""
    from ..models.checkpoints import resolve_checkpoint
    from ..records import atomic_write_text

    folder = resolve_checkpoint(folder)
    target = folder / CARD
    if target.is_file() and MARK not in target.read_text(encoding="utf-8", errors="replace"):
        raise CardError(f"{target} was not written by concrete-jungle model-card; it is kept: move it away first")
    atomic_write_text(target, card(folder, results, repo, resamples))
    return target
