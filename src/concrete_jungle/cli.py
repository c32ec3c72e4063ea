"""The `concrete-jungle` command: one sub-command per capability, each with its own --help.

Every command checks its arguments (flags, files, config keys) before it imports torch, spaCy or open_clip
and before it writes anything, so a mistake is reported in well under a second and leaves no file behind.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console

from . import __version__
from .errors import JobError

# ------------------------------------------------------------------------------------------------ arguments


def _number(kind, minimum, text: str, strict: bool = False):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None
    if value < minimum or (strict and value == minimum):
        raise argparse.ArgumentTypeError(f"{text} must be {'>' if strict else '>='} {minimum}")
    return value


def positive_int(text: str) -> int:
    return _number(int, 1, text)


def non_negative_int(text: str) -> int:
    return _number(int, 0, text)


def positive_float(text: str) -> float:
    return _number(float, 0.0, text, strict=True)


def strength(text: str) -> float:
    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text} must be in (0, 1]")
    return value


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, e.g. 0,1,2") from None
    return values


def positive_int_list(text: str) -> tuple[int, ...]:
    values = int_list(text)
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be >= 1")
    return values


def key_values(items: list[str], flag: str) -> dict:
    """``["a=1", "b=x"]`` -> {"a": 1, "b": "x"} (values read as YAML scalars)."""
    import yaml

    out = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"{flag} {item!r} must look like key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(value)
    return out


def _targets(text: str) -> dict[str, float]:
    """``attribute=0.5,object=0.5`` -> {'attribute': 0.5, 'object': 0.5}."""
    try:
        return {k.strip(): float(v) for k, v in (part.split("=") for part in text.split(","))}
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--targets {text!r}: write it as attribute=0.4,object=0.4,relation=0.2") from None


def add_sampler_args(p, required: bool = True) -> None:
    from .keywords import MODES, POLICIES, SamplerConfig

    default = SamplerConfig()
    p.add_argument("--mode", choices=MODES, required=required, help="hc: high, lc: low, wo: no concreteness preference")
    p.add_argument("--top-k", type=positive_int, default=default.top_k,
                   help="candidates kept by concreteness (default %(default)s)")
    p.add_argument("--temperature", type=positive_float, default=default.temperature,
                   help="softmax temperature (default %(default)s)")
    p.add_argument("--policy", choices=POLICIES, default=default.policy, help="category step (default %(default)s)")
    p.add_argument("--targets", type=_targets, default=None,
                   help="target category shares for the quota, e.g. attribute=0.4,object=0.4,relation=0.2")
    p.add_argument("--lc-softmax", choices=("c", "-c"), default=default.lc_softmax,
                   help="lc samples softmax(c/T) (paper, default) or softmax(-c/T) among its k least concrete")
    p.add_argument("--seed", type=int, default=default.seed,
                   help="seed of every random choice (each sample's is derived from it and the sample id; "
                   "default %(default)s)")
    p.add_argument("--scale", default="brysbaert", help="built-in scale: brysbaert or lancaster-visual")
    p.add_argument("--spacy-model", help="spaCy pipeline name or path (default: an installed English pipeline)")


def sampler_config(args):
    from .keywords import SamplerConfig

    return SamplerConfig(mode=args.mode, top_k=args.top_k, temperature=args.temperature, policy=args.policy,
                         seed=args.seed, lc_softmax=args.lc_softmax,
                         **({"targets": args.targets} if args.targets else {}))


def add_input_args(p, required: bool = True) -> None:
    from .sources import FORMATS

    p.add_argument("--captions", nargs="+", metavar="FILE", required=required,
                   help="caption files or directories: Karpathy dataset_*.json, COCO captions_*.json, "
                   "SugarCrepe JSON, JSONL or CSV")
    p.add_argument("--format", choices=FORMATS, help="input format (default: detected)")
    p.add_argument("--split", help="Karpathy split(s) to read, e.g. train or train,restval (default: all)")


# ------------------------------------------------------------------------------------------------ keywords


def add_keywords_parser(sub) -> None:
    p = sub.add_parser(
        "keywords",
        help="pick one concrete keyword per caption (ConcretePlant stage 1)",
        description="Parse captions with spaCy, rate candidate keywords for concreteness and sample one per "
        "sample. Re-running with the same --out resumes.",
    )
    add_input_args(p)
    add_sampler_args(p)
    p.add_argument("--ratings", help="a CSV of your own ratings instead of a built-in scale")
    p.add_argument("--word-column", default="Word", help="word column of --ratings (default %(default)s)")
    p.add_argument("--score-column", help="score column of --ratings")
    p.add_argument("--batch-size", type=positive_int, default=256, help="captions per spaCy batch")
    p.add_argument("--workers", type=positive_int, default=1,
                   help="processes that parse, extract and sample (default %(default)s)")
    p.add_argument("--max-words", type=positive_int, default=60, help="skip longer captions (default %(default)s)")
    p.add_argument("--out", required=True, help="output JSONL; an existing file is resumed")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run_keywords_command)


def run_keywords_command(args, console: Console) -> int:
    from .concreteness import load_ratings
    from .sources import expand_paths

    config = sampler_config(args)
    expand_paths(args.captions)  # a missing file is reported before spaCy loads
    ratings = load_ratings(args.scale, args.ratings, args.word_column, args.score_column)

    from .keywords import FilterConfig, load_spacy, run_keywords, summary_table

    summary, _ = run_keywords(
        args.captions, args.out, config, ratings, load_spacy(args.spacy_model), fmt=args.format, split=args.split,
        limits=FilterConfig(max_words=args.max_words), batch_size=args.batch_size, workers=args.workers,
        progress=not args.no_progress,
    )
    console.print(summary_table(summary, f"keywords ({args.mode}) -> {args.out}"))
    return 0


# ------------------------------------------------------------------------------------------------ plant


def add_plant_parser(sub) -> None:
    p = sub.add_parser(
        "plant",
        help="make a ConcreteBatch: keywords, caption rewrite, image edit (ConcretePlant)",
        description="Sample keywords, rewrite captions, edit images and write WebDataset shards plus a manifest. "
        "Re-running with the same --out resumes. `concrete-jungle plant merge DIR` joins the parts of a "
        "--num-shards run.",
    )
    p.add_argument("action", nargs="?", choices=["merge"], help="merge: check and join the parts in DIR")
    p.add_argument("--config", help="a YAML file of PlantConfig settings (e.g. configs/paper/plant_hc.yaml) instead "
                   "of the dataset flags below; change one with --set key=value")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a --config setting")
    p.add_argument("merge_dir", nargs="?", metavar="DIR", help="dataset directory to merge")
    add_input_args(p, required=False)
    add_sampler_args(p, required=False)
    p.add_argument("--images", help="folder the captions' image paths are relative to (COCO: the image folder)")
    p.add_argument("--out", help="dataset directory; an existing one is resumed")
    g = p.add_argument_group("caption rewrite")
    g.add_argument("--captioner", default="rules",
                   help="rules (default, offline), openai, transformers, a registered plugin, or package.module:Class")
    g.add_argument("--captioner-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a keyword argument of the captioner's constructor (repeatable)")
    g.add_argument("--model", help="LLM for openai/transformers, e.g. Qwen/Qwen3-32B")
    g.add_argument("--base-url", action="append", help="OpenAI-compatible server URL (repeat for several)")
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    g.add_argument("--concurrency", type=positive_int, default=64, help="requests in flight (openai)")
    g.add_argument("--max-attempts", type=positive_int, default=3, help="rewrites tried per sample before rejecting it")
    g = p.add_argument_group("image edit")
    g.add_argument("--editor", default="none",
                   help="none (default: text-only negatives), diffusers, a registered plugin, or package.module:Class")
    g.add_argument("--editor-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a keyword argument of the editor's constructor (repeatable), e.g. world=DIR for toyworld")
    g.add_argument("--editor-model", default="stabilityai/sdxl-turbo", help="img2img model id or path")
    g.add_argument("--strength", type=strength, default=0.75,
                   help="img2img strength in (0, 1]: how far the edit may move from the anchor (default %(default)s)")
    g.add_argument("--steps", type=positive_int, default=4,
                   help="denoising steps; int(steps x strength) must be >= 1 (default %(default)s)")
    g.add_argument("--size", type=positive_int, default=512,
                   help="the edited image's side in pixels (default %(default)s)")
    g.add_argument("--vae", help="a fp16-safe VAE to use instead of the model's (e.g. madebyollin/sdxl-vae-fp16-fix)")
    g.add_argument("--compile", action="store_true", help="torch.compile the UNet")
    g.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    g = p.add_argument_group("run")
    g.add_argument("--engine", choices=["local", "ray"], help="local (default): this process; ray: Ray Data over a "
                   "cluster, the same records (pip install 'concrete-jungle[ray]'; docs/scale.md)")
    g.add_argument("--ray-address", help="the Ray cluster to join: auto, or ray://HOST:10001 (default: start one here)")
    g.add_argument("--ray-actors", type=positive_int_list, metavar="K,R,E",
                   help="actors for keyword candidates, rewrites and edits (default 1,1,1)")
    g.add_argument("--ray-edit-gpus", type=float, help="GPUs per edit actor (default 0; 1 for SDXL-Turbo)")
    g.add_argument("--ray-edit-cpus", type=float, help="CPUs per edit actor (default 1; its threads without a GPU)")
    g.add_argument("--batch-size", type=positive_int, default=16, help="samples per rewrite/edit batch")
    g.add_argument("--samples-per-shard", type=positive_int, default=1000,
                   help="records per WebDataset tar shard (default %(default)s)")
    g.add_argument("--num-shards", type=positive_int,
                   help="split the run into K parts (default: $WORLD_SIZE, SLURM array, 1)")
    g.add_argument("--shard-index", type=non_negative_int, help="this part (default: $RANK, SLURM array task, 0)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run_plant_command)


def engine_config(args, base=None):
    """The engine of the flags, over ``base`` (a --config file's)."""
    from dataclasses import asdict

    from .plant import EngineConfig

    settings = asdict(base) if base is not None else {}
    given = {"name": args.engine, "address": args.ray_address, "edit_gpus": args.ray_edit_gpus,
             "edit_cpus": args.ray_edit_cpus}
    if args.ray_actors:
        if len(args.ray_actors) != 3:
            raise ValueError(f"--ray-actors {','.join(map(str, args.ray_actors))}: give three counts, K,R,E")
        given |= dict(zip(("keyword_actors", "rewrite_actors", "edit_actors"), args.ray_actors))
    return EngineConfig(**settings | {k: v for k, v in given.items() if v is not None})


def plant_config_from_flags(args, num_shards: int, shard_index: int):
    from .plant import PlantConfig

    missing = [f"--{n}" for n in ("captions", "images", "out", "mode") if not getattr(args, n)]
    if missing:
        raise ValueError(f"concrete-jungle plant needs {', '.join(missing)} (or --config FILE)")
    captioner_options = {}
    if args.captioner in ("openai", "transformers"):
        if not args.model:
            raise ValueError(f"--captioner {args.captioner} needs --model (e.g. Qwen/Qwen3-32B)")
        captioner_options["model"] = args.model
    if args.captioner == "openai":
        captioner_options.update(base_urls=args.base_url or ["http://localhost:8000/v1"],
                                 api_key_env=args.api_key_env, concurrency=args.concurrency)
    if args.captioner == "rules":
        captioner_options["seed"] = args.seed
    editor_options = {}
    if args.editor == "diffusers":
        editor_options = {"model": args.editor_model, "strength": args.strength, "steps": args.steps,
                          "size": args.size, "vae": args.vae, "compile": args.compile, "device": args.device}
    return PlantConfig(
        captions=list(args.captions), images=args.images, out=args.out, mode=args.mode, format=args.format,
        split=args.split, sampler=sampler_config(args), scale=args.scale, spacy_model=args.spacy_model,
        captioner=args.captioner,
        captioner_options=captioner_options | key_values(args.captioner_option, "--captioner-option"),
        editor=args.editor, editor_options=editor_options | key_values(args.editor_option, "--editor-option"),
        max_attempts=args.max_attempts, batch_size=args.batch_size, samples_per_shard=args.samples_per_shard,
        num_shards=num_shards, shard_index=shard_index, engine=engine_config(args),
    )


def run_plant_command(args, console: Console) -> int:
    from dataclasses import replace

    from rich.table import Table

    from .plant import Plant, PlantConfig, merge_parts, shard_from_environment

    # this part of a split run: the flags, else torchrun's or SLURM's environment, else the whole run
    env_index, env_count = shard_from_environment()
    shard_index = args.shard_index if args.shard_index is not None else env_index
    num_shards = args.num_shards if args.num_shards is not None else env_count
    if args.action == "merge":
        if not args.merge_dir:
            raise ValueError("usage: concrete-jungle plant merge DIR")
        summary = merge_parts(args.merge_dir)
    else:
        if args.config:
            from .configs import apply_overrides, from_dict, load_yaml

            given = [f"--{n}" for n in ("captions", "images", "out") if getattr(args, n)]
            if given:
                raise ValueError(f"{', '.join(given)} with --config: put them in the file or pass --set key=value")
            data = apply_overrides(load_yaml(args.config), args.set)
            data.setdefault("num_shards", num_shards)
            data.setdefault("shard_index", shard_index)
            config = from_dict(PlantConfig, data, where=args.config)
            config = replace(config, engine=engine_config(args, config.engine))
        else:
            config = plant_config_from_flags(args, num_shards, shard_index)
        config.check_inputs()  # files, folders, captioner and editor names: before anything is written
        if config.engine.name == "ray":
            import importlib.util

            if importlib.util.find_spec("ray") is None:
                raise ValueError("--engine ray needs Ray: pip install 'concrete-jungle[ray]'")
        summary = Plant(config, progress=not args.no_progress).run()
    table = Table(title="ConcreteBatch")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    for key, value in summary.items():
        table.add_row(key.replace("_", " "), f"{value:.3f}" if isinstance(value, float) else str(value))
    console.print(table)
    return 0


# ------------------------------------------------------------------------------------------------ models


def add_model_args(p) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", help="open_clip model name, e.g. ViT-B-32 (or cj-tiny for smoke tests)")
    g.add_argument("--pretrained", default="openai",
                   help="pretrained tag, a weights file, or none (default %(default)s)")
    g.add_argument("--checkpoint", help="a checkpoint directory of ours (carries its exact open_clip config)")
    g.add_argument("--seed", type=int, default=0, help="seed of a --pretrained none model (default %(default)s)")
    g.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    g.add_argument("--precision", default="fp32", help="open_clip precision (default fp32, the reference's)")


def check_model_args(args) -> None:
    """The model flags name something that exists (read from disk; open_clip is not imported yet)."""
    from .configs import open_clip_model_names

    if args.checkpoint:
        if not Path(args.checkpoint).is_dir():
            raise ValueError(f"--checkpoint {args.checkpoint} is not a directory")
    elif not args.model:
        raise ValueError("name a model (--model ViT-B-32) or a checkpoint (--checkpoint DIR)")
    elif ":" not in args.model and args.model not in open_clip_model_names():
        raise ValueError(f"--model {args.model!r} is not an open_clip model (see open_clip.list_models())")


def load_model_from_args(args):
    import torch

    from .models import load_model

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return load_model(args.model, args.pretrained, args.checkpoint, device=device, precision=args.precision,
                      seed=args.seed), device


# ------------------------------------------------------------------------------------------------ eval

EVAL_LAYOUT = """data root layout (only the benchmarks asked for are read):
  sugarcrepe/*.json                 official SugarCrepe JSON, images in coco/val2017/
  sugarcrepe_pp/*.json              official SugarCrepe++ JSON, images in coco/val2017/
  winoground/examples.jsonl         + winoground/images/<image>.png
  flickr30k/dataset_flickr30k.json  + flickr30k/images/ (retrieval: the Karpathy test split)
  imagenet/{train,val}/<class>/     linear_probe (ImageFolder)
  coco/annotations/instances_{train,val}2017.json + coco/{train,val}2017/   coco_probe
  vtab/<task>/{train,test}/<class>/ or a clip_benchmark dataset root per task
where to get each: docs/data.md"""


def add_eval_parser(sub) -> None:
    from .evaluation.names import BENCHMARKS

    p = sub.add_parser(
        "eval",
        help="evaluate a model: SugarCrepe, SugarCrepe++, Winoground, retrieval, linear probes, VTAB",
        description="Evaluate an open_clip model or a checkpoint on the benchmarks under --data-root. Writes one "
        "JSON per benchmark and results.md to --out. --check only checks the data (no model).",
        epilog=EVAL_LAYOUT, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--benchmarks", default="sugarcrepe", help=f"comma-separated, from {', '.join(BENCHMARKS)}")
    p.add_argument("--data-root", help="folder holding the benchmarks' data (layout below)")
    p.add_argument("--check", action="store_true",
                   help="check the data root's layout and images and print the item counts; loads no model")
    p.add_argument("--out", default="results", help="output folder (default %(default)s)")
    p.add_argument("--skip-missing", action="store_true", help="skip items whose images are missing or unreadable")
    p.add_argument("--batch-size", type=positive_int, default=64, help="images or texts per forward pass")
    p.add_argument("--workers", type=non_negative_int, default=0, help="image-loading processes")
    p.add_argument("--cache-dir", help="cache embeddings here (by model hash and file)")
    p.add_argument("--compare", nargs="+", metavar="JSON", help="print a side-by-side table of result files and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_model_args(p)
    p.set_defaults(run=run_eval_command)


def run_eval_command(args, console: Console) -> int:
    from rich.markdown import Markdown

    from . import evaluation

    if args.compare:
        console.print(Markdown(evaluation.compare(args.compare)))
        return 0
    if not args.data_root:
        raise ValueError("concrete-jungle eval needs --data-root (or --compare A.json B.json)")
    root = Path(args.data_root)
    if not root.is_dir():
        raise ValueError(f"--data-root {root} does not exist; it is the folder holding sugarcrepe/, coco/, ... "
                         "(see concrete-jungle eval --help and docs/data.md)")
    names = [n.strip() for n in args.benchmarks.split(",") if n.strip()]
    unknown = sorted(set(names) - set(evaluation.BENCHMARKS))
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; choose from {', '.join(evaluation.BENCHMARKS)}")
    if not args.check:
        check_model_args(args)
    # every benchmark's files are checked before the model is loaded
    loaded = {n: evaluation.load_data(n, root, args.skip_missing) for n in names}
    if args.check:
        console.print(Markdown(evaluation.layout_report(loaded)))
        return 0
    from .evaluation.encoding import Encoder

    clip, device = load_model_from_args(args)
    encoder = Encoder(clip, device=device, batch_size=args.batch_size, num_workers=args.workers,
                      cache_dir=args.cache_dir, progress=not args.no_progress)
    results = evaluation.run(encoder, names, loaded, out=args.out)
    console.print(Markdown(evaluation.markdown(results)))
    return 0


# ------------------------------------------------------------------------------------------------ train


def add_train_parser(sub) -> None:
    p = sub.add_parser(
        "train",
        help="fine-tune an open_clip model with Cement loss on ConcreteBatch (Slipform)",
        description="Train from a YAML config (configs/slipform_vitb32.yaml); flags and --set key.path=value "
        "override it. Under torchrun it runs data parallel. --resume latest continues exactly.",
    )
    p.add_argument("--config", help="YAML config (keys: see concrete_jungle.train_config.TrainConfig)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override, e.g. optim.lr=1e-5")
    p.add_argument("--out", help="run folder (checkpoints, metrics.jsonl)")
    p.add_argument("--model", help="open_clip model name")
    p.add_argument("--pretrained", help="pretrained tag or none")
    p.add_argument("--checkpoint", help="start from a checkpoint directory of ours")
    p.add_argument("--data", nargs="+", help="ConcreteBatch directories")
    p.add_argument("--loss", choices=["cement", "infonce", "static", "inverse"],
                   help="cement (adaptive margin), infonce (no margin), static (loss.static_margin), inverse")
    p.add_argument("--batch-size", type=positive_int, help="anchors per step, over all processes")
    p.add_argument("--steps", type=positive_int, help="optimisation steps (overrides --epochs)")
    p.add_argument("--epochs", type=positive_int, help="passes over the data")
    p.add_argument("--lr", type=positive_float, help="peak learning rate (optim.lr)")
    p.add_argument("--seed", type=int, help="seed of the initialisation, data order and RNG state")
    p.add_argument("--resume", help="latest, or a checkpoint directory")
    p.add_argument("--stop-at", type=positive_int,
                   help="stop after this step with a checkpoint (continue with --resume)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run_train_command)


def run_train_command(args, console: Console) -> int:
    from .train_config import check_config, load_config

    if not args.config:
        set_keys = [item.split("=", 1)[0] for item in args.set]
        missing = [flag for flag, given in (("--out DIR", args.out or "out" in set_keys),
                                            ("--data DIR", args.data or any(k.startswith("data.") for k in set_keys)))
                   if not given]
        if missing:
            raise ValueError(f"concrete-jungle train needs --config FILE (e.g. configs/slipform_vitb32.yaml), or "
                             f"{' and '.join(missing)} with the model flags")
    flags = {"out": args.out, "model.name": args.model, "model.pretrained": args.pretrained,
             "model.checkpoint": args.checkpoint, "loss.name": args.loss, "batch_size": args.batch_size,
             "steps": args.steps, "epochs": args.epochs, "optim.lr": args.lr, "seed": args.seed}
    overrides = [f"{k}={v}" for k, v in flags.items() if v is not None]
    if args.data:
        overrides.append("data.concretebatch=[" + ",".join(f'"{d}"' for d in args.data) + "]")
    config = load_config(args.config, overrides + args.set)
    check_config(config)  # before torch is imported

    from .train import train

    last = train(config, resume=args.resume, progress=not args.no_progress, stop_at=args.stop_at)
    if last and int(os.environ.get("RANK", 0)) == 0:
        share = "-" if last["hn_grad_share"] is None else f"{last['hn_grad_share']:.3f}"
        console.print(f"step {last['step']}: loss {last['loss']:.4f}, hard-negative gradient share {share} "
                      f"-> {config.out}")
    return 0


# ------------------------------------------------------------------------------------------------ cache


def add_cache_parser(sub) -> None:
    p = sub.add_parser(
        "cache",
        help="preprocess ConcreteBatch datasets once for a model, so training reads pixels instead of decoding JPEGs",
        description="Apply the model's resize and crop to every anchor and negative picture once and store them as "
        "uint8 (and the captions as tokens) in <dataset>/cache/<key>/. `train` then uses the cache of every "
        "dataset that has a current one: no JPEG decoding during training. Takes about 2 x 3 x H x W bytes a "
        "record (ViT-B-32: 0.3 MB).",
    )
    p.add_argument("datasets", nargs="+", metavar="DATASET", help="ConcreteBatch directories")
    p.add_argument("--workers", type=non_negative_int, default=4, help="decoding processes (default %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_model_args(p)
    p.set_defaults(run=run_cache_command)


def run_cache_command(args, console: Console) -> int:
    from .concretebatch import shard_urls

    for d in args.datasets:
        shard_urls(d)
    check_model_args(args)
    from .image_cache import build_cache

    clip, _ = load_model_from_args(args)
    for d in args.datasets:
        folder = build_cache(d, clip, workers=args.workers, progress=not args.no_progress)
        size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
        console.print(f"{d}: cache {folder} ({size:.0f} MiB)", highlight=False)
    return 0


# ------------------------------------------------------------------------------------------------ gallery


def add_gallery_parser(sub) -> None:
    p = sub.add_parser(
        "gallery",
        help="write a static HTML page of hard negatives (anchor and negative side by side)",
        description="One row per sampled anchor, one card per dataset (give D_hc D_lc D_wo of the same anchors "
        "to compare them). Opens from disk.",
    )
    p.add_argument("datasets", nargs="+", metavar="DATASET", help="ConcreteBatch directories")
    p.add_argument("--out", default="gallery", help="output folder (default %(default)s)")
    p.add_argument("--sample", type=positive_int, default=200, help="anchors on the page (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the anchor sample (default %(default)s)")
    p.add_argument("--sort", default="concreteness", choices=["concreteness", "category", "random"],
                   help="row order: most concrete first, by category, or random (default %(default)s)")
    p.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                   help="keep anchors whose record matches, e.g. category=relation or mode=hc (repeatable)")
    p.add_argument("--stats", help="an analysis stats.json with per-pair scores: {dataset: {id: {name: value}}}")
    p.set_defaults(run=run_gallery_command)


def run_gallery_command(args, console: Console) -> int:
    from .gallery import build_gallery

    filters = {}
    for item in args.filter:
        if "=" not in item:
            raise ValueError(f"--filter {item!r} must look like category=relation")
        key, value = item.split("=", 1)
        filters[key] = value
    page = build_gallery(args.datasets, args.out, sample=args.sample, seed=args.seed, sort=args.sort,
                         filters=filters, stats=args.stats)
    console.print(f"gallery written: {page}")
    return 0


# ------------------------------------------------------------------------------------------------ analyze


def add_analyze_parser(sub) -> None:
    p = sub.add_parser(
        "analyze",
        help="the paper's analyses: dataset statistics (Table 1, Fig. 5) and gradient share (Fig. 6)",
        description="`analyze datasets DATASET [DATASET ...]` (or just `analyze DATASET ...`): Table 1 statistics, "
        "Fig. 5 plots, stats.json and report.md. `analyze gradient-share --data DATASET`: the hard-negative "
        "gradient share of InfoNCE and each margin schedule against batch size (Fig. 6).",
    )
    tasks = p.add_subparsers(dest="analysis", required=True, metavar="ANALYSIS")
    d = tasks.add_parser("datasets", help="Table 1 statistics and Fig. 5 plots of ConcreteBatch datasets",
                         description="Table 1 statistics (concreteness, I2T/T2I under a reference CLIP, "
                         "CLIP-L, CLIP-V, DINOScore, BERTScore, edit distance), Fig. 5 plots, stats.json, report.md.")
    d.add_argument("datasets", nargs="+", metavar="DATASET", help="ConcreteBatch directories")
    d.add_argument("--dino-model", help="DINOv2 for DINOScore (name or path, e.g. facebook/dinov2-base)")
    d.add_argument("--bertscore-model", help="BERTScore model (paper: roberta-large)")
    d.add_argument("--bertscore-layers", type=positive_int,
                   help="BERTScore layer (needed for models bert-score does not know)")
    d.add_argument("--no-rescale", action="store_true", help="BERTScore without baseline rescaling")
    g = tasks.add_parser("gradient-share", help="hard-negative gradient share against batch size (Fig. 6)",
                         description="The hard-negative gradient share (mean p_{a,h(a)} / (1 - p_aa), both "
                         "directions) of InfoNCE and the static, adaptive and inverse margins, averaged over random "
                         "batches of N anchors of a model's features on a ConcreteBatch.")
    g.add_argument("--data", required=True, help="a ConcreteBatch directory")
    g.add_argument("--batch-sizes", type=positive_int_list, default=(64, 128, 256, 512, 1024),
                   help="anchors per batch, comma-separated (default 64,128,256,512,1024)")
    g.add_argument("--batches", type=positive_int, default=8, help="random batches averaged per size")
    g.add_argument("--logit-scale", type=positive_float, help="default: the model's own")
    for q in (d, g):
        q.add_argument("--limit", type=positive_int, help="use at most this many pairs")
        q.add_argument("--out", default="report", help="output folder (default %(default)s)")
        q.add_argument("--cache-dir", help="embeddings cache, by model and dataset (default <out>/embeddings)")
        add_model_args(q)
        q.set_defaults(run=run_analyze_command)


def run_analyze_command(args, console: Console) -> int:
    from .concretebatch import shard_urls

    for d in args.datasets if args.analysis == "datasets" else [args.data]:
        shard_urls(d)  # a ConcreteBatch directory, or a clear error before the model loads
    check_model_args(args)
    if args.analysis == "datasets":
        from .analysis import analyze_datasets

        clip, device = load_model_from_args(args)
        stats = analyze_datasets(args.datasets, clip, args.out, device=device, dino_model=args.dino_model,
                                 bertscore_model=args.bertscore_model, bertscore_layers=args.bertscore_layers,
                                 bertscore_rescale=not args.no_rescale, limit=args.limit, cache_dir=args.cache_dir)
        console.print(f"{len(stats['datasets'])} datasets analysed: {Path(args.out) / 'report.md'}, stats.json, "
                      "figures")
        return 0
    from rich.table import Table

    from .analysis import LABELS, concretebatch_features, gradient_share_by_batch_size, plot_gradient_share
    from .records import atomic_write_json

    sizes = list(args.batch_sizes)
    clip, device = load_model_from_args(args)
    image, text, c, _, _ = concretebatch_features(clip, args.data, device=device, limit=args.limit,
                                                  cache_dir=args.cache_dir or Path(args.out) / "embeddings")
    scale = args.logit_scale or clip.model.logit_scale.exp().item()
    curves = gradient_share_by_batch_size(image, text, c, scale, sizes, batches=args.batches)
    out = Path(args.out)
    atomic_write_json(out / "gradient_share.json", {"model": clip.identity, "data": args.data, "logit_scale": scale,
                                                    "pairs": len(c), "curves": curves})
    plot_gradient_share(curves, out / "gradient_share.png")
    table = Table(title=f"hard-negative gradient share ({len(c)} pairs, logit scale {scale:.1f})")
    table.add_column("N", justify="right")
    for schedule in curves:
        table.add_column(LABELS[schedule], justify="right")
    for n in sizes:
        table.add_row(str(n), *(f"{curves[s][n]:.3f}" for s in curves))
    console.print(table)
    console.print(f"written: {out / 'gradient_share.json'}, {out / 'gradient_share.png'}")
    return 0


# ------------------------------------------------------------------------------------------------ demo


def add_demo_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="the whole method offline on a CPU: toy world, ConcreteBatch, Cement fine-tuning, evaluation, report",
        description="Render a toy world, pretrain a tiny CLIP, make D_hc/D_lc/D_wo with ConcretePlant, fine-tune "
        "with InfoNCE, static margin and Cement (and a control without negatives), evaluate, and write "
        "<out>/report.md. Finished stages are reused.",
    )
    p.add_argument("--quick", action="store_true", help="a smaller world, fewer steps, one seed (about 2 minutes)")
    p.add_argument("--study", action="store_true",
                   help="the pre-registered, powered experiment instead (docs/toyworld.md; about 80 minutes on 2 "
                   "cores); writes <out>/study.md")
    p.add_argument("--profile", choices=["cpu", "gpu"], default="cpu",
                   help="--study's size: cpu (default) or gpu (a larger world and model, N up to 1024, one GPU)")
    p.add_argument("--out", help="output directory (default runs/demo, or runs/study with --study)")
    p.add_argument("--seeds", type=int_list, help="fine-tuning seeds, comma-separated (default 0,1,2; --quick: 0)")
    p.add_argument("--pretrain-steps", type=positive_int, help="baseline pretraining steps (default 250; --quick: 120)")
    p.add_argument("--finetune-steps", type=positive_int, help="steps of each fine-tune (default 40; --quick: 25)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(run=run_demo_command)


def run_demo_command(args, console: Console) -> int:
    if args.study:
        return run_study(args, console)
    from .demo import QUICK, Demo, DemoConfig, rich_table

    args.out = args.out or "runs/demo"

    options = dict(QUICK) if args.quick else {}
    if args.seeds:
        options["seeds"] = args.seeds
    for name in ("pretrain_steps", "finetune_steps"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    result = Demo(DemoConfig(out=args.out, **options), progress=not args.no_progress, console=console).run()
    Console(width=max(console.width, 150)).print(rich_table(result["table"]))  # whole rows in a log file too
    console.print("What it shows:", highlight=False)
    for finding in result["findings"]:
        console.print(f"- {finding}", highlight=False)
    console.print(f"report: {args.out}/report.md", highlight=False)
    return 0


def run_study(args, console: Console) -> int:
    if args.quick or args.pretrain_steps or args.finetune_steps:
        raise ValueError("--study takes its settings from its design (docs/toyworld.md); use --profile, --seeds, "
                         "--out")
    from .study import PROFILES, Study, StudyConfig

    options = dict(PROFILES[args.profile]) | ({"seeds": args.seeds} if args.seeds else {})
    out = args.out or "runs/study"
    result = Study(StudyConfig(out=out, **options), progress=not args.no_progress, console=console).run()
    for h in result["hypotheses"]:
        console.print(f"{h['name']}: {h['claim']}: {h['estimate']:+.2f} points, 95 % interval "
                      f"[{h['ci95'][0]:+.2f}, {h['ci95'][1]:+.2f}] -> {h['verdict']}", highlight=False)
    console.print(f"report: {out}/study.md", highlight=False)
    return 0


# ------------------------------------------------------------------------------------------------ main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="concrete-jungle",
        description="Concreteness-aware hard negatives and Cement loss for compositional CLIP training.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_keywords_parser(sub)
    add_plant_parser(sub)
    add_eval_parser(sub)
    add_train_parser(sub)
    add_cache_parser(sub)
    add_gallery_parser(sub)
    add_analyze_parser(sub)
    add_demo_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `analyze DATASET ...` is short for `analyze datasets DATASET ...`
    if argv[:1] == ["analyze"] and len(argv) > 1 and argv[1] not in ("datasets", "gradient-share", "-h", "--help"):
        argv.insert(1, "datasets")
    args = build_parser().parse_args(argv)
    console = Console()  # results on stdout; progress bars and errors on stderr
    try:
        return args.run(args, console)
    # every input error of ours is a ValueError (ratings, sources, configs, models, benchmark data), a missing
    # file, or a JobError (a run that cannot go on)
    except (ValueError, FileNotFoundError, JobError) as e:
        Console(stderr=True).print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
