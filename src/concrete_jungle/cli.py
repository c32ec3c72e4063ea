"""The `concrete-jungle` command: one sub-command per capability, each with its own --help."""

from __future__ import annotations

import argparse
import os
import sys

from rich.console import Console


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
    p.add_argument("--top-k", type=int, default=default.top_k,
                   help="candidates kept by concreteness (default %(default)s)")
    p.add_argument("--temperature", type=float, default=default.temperature,
                   help="softmax temperature (default %(default)s)")
    p.add_argument("--policy", choices=POLICIES, default=default.policy, help="category step (default %(default)s)")
    p.add_argument("--targets", type=_targets, default=None,
                   help="target category shares for the quota, e.g. attribute=0.4,object=0.4,relation=0.2")
    p.add_argument("--lc-softmax", choices=("c", "-c"), default=default.lc_softmax,
                   help="lc samples softmax(c/T) (paper, default) or softmax(-c/T) (SPEC) among its k least concrete")
    p.add_argument("--seed", type=int, default=default.seed)
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
    p.add_argument("--batch-size", type=int, default=256, help="captions per spaCy batch")
    p.add_argument("--workers", type=int, default=1, help="spaCy processes (nlp.pipe n_process)")
    p.add_argument("--max-words", type=int, default=60, help="skip longer captions (default %(default)s)")
    p.add_argument("--out", required=True, help="output JSONL; an existing file is resumed")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run_keywords_command)


def run_keywords_command(args, console: Console) -> int:
    from .concreteness import load_ratings
    from .keywords import FilterConfig, load_spacy, run_keywords, summary_table

    config = sampler_config(args)
    ratings = load_ratings(args.scale, args.ratings, args.word_column, args.score_column)
    nlp = load_spacy(args.spacy_model)
    summary, _ = run_keywords(
        args.captions, args.out, config, ratings, nlp, fmt=args.format, split=args.split,
        limits=FilterConfig(max_words=args.max_words), batch_size=args.batch_size, workers=args.workers,
        progress=not args.no_progress,
    )
    console.print(summary_table(summary, f"keywords ({args.mode}) -> {args.out}"))
    return 0


def add_plant_parser(sub) -> None:
    from .captioners import CAPTIONERS
    from .editors import EDITORS

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
    g.add_argument("--captioner", choices=CAPTIONERS, default="rules", help="default %(default)s (offline)")
    g.add_argument("--model", help="LLM for openai/transformers, e.g. Qwen/Qwen3-32B")
    g.add_argument("--base-url", action="append", help="OpenAI-compatible server URL (repeat for several)")
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    g.add_argument("--concurrency", type=int, default=64, help="requests in flight (openai)")
    g.add_argument("--max-attempts", type=int, default=3, help="rewrites tried per sample before rejecting it")
    g = p.add_argument_group("image edit")
    g.add_argument("--editor", choices=EDITORS, default="none", help="default %(default)s (text-only negatives)")
    g.add_argument("--editor-model", default="stabilityai/sdxl-turbo", help="img2img model id or path")
    g.add_argument("--strength", type=float, default=0.75)
    g.add_argument("--steps", type=int, default=4)
    g.add_argument("--size", type=int, default=512)
    g.add_argument("--vae", help="a fp16-safe VAE to use instead of the model's (e.g. madebyollin/sdxl-vae-fp16-fix)")
    g.add_argument("--compile", action="store_true", help="torch.compile the UNet")
    g.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    g.add_argument("--toy-world", help="the toy world's directory, for --editor toyworld (demo: <out>/world)")
    g = p.add_argument_group("run")
    g.add_argument("--batch-size", type=int, default=16, help="samples per rewrite/edit batch")
    g.add_argument("--samples-per-shard", type=int, default=1000)
    g.add_argument("--num-shards", type=int, help="split the run into K parts (default: $WORLD_SIZE, SLURM array, 1)")
    g.add_argument("--shard-index", type=int, help="this part (default: $RANK, SLURM array task, 0)")
    g.add_argument("--no-progress", action="store_true")
    p.set_defaults(run=run_plant_command)


def run_plant_command(args, console: Console) -> int:
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
    elif args.config:
        from .configs import apply_overrides, from_dict, load_yaml

        given = [f"--{n}" for n in ("captions", "images", "out") if getattr(args, n)]
        if given:
            raise ValueError(f"{', '.join(given)} with --config: put them in the file or pass --set key=value")
        data = apply_overrides(load_yaml(args.config), args.set)
        data.setdefault("num_shards", num_shards)
        data.setdefault("shard_index", shard_index)
        summary = Plant(from_dict(PlantConfig, data, where=args.config), progress=not args.no_progress).run()
    else:
        missing = [f"--{n}" for n in ("captions", "images", "out", "mode") if not getattr(args, n)]
        if missing:
            raise ValueError(f"concrete-jungle plant needs {', '.join(missing)}")
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
        if args.editor == "toyworld":
            if not args.toy_world:
                raise ValueError("--editor toyworld needs --toy-world DIR (the world's directory)")
            editor_options = {"world": args.toy_world}
        config = PlantConfig(
            captions=list(args.captions), images=args.images, out=args.out, mode=args.mode, format=args.format,
            split=args.split, sampler=sampler_config(args), scale=args.scale, spacy_model=args.spacy_model,
            captioner=args.captioner, captioner_options=captioner_options, editor=args.editor,
            editor_options=editor_options, max_attempts=args.max_attempts, batch_size=args.batch_size,
            samples_per_shard=args.samples_per_shard,
            num_shards=num_shards, shard_index=shard_index,
        )
        summary = Plant(config, progress=not args.no_progress).run()
    table = Table(title="ConcreteBatch")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    for key, value in summary.items():
        table.add_row(key.replace("_", " "), f"{value:.3f}" if isinstance(value, float) else str(value))
    console.print(table)
    return 0


def add_model_args(p) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", help="open_clip model name, e.g. ViT-B-32 (or cj-tiny for smoke tests)")
    g.add_argument("--pretrained", default="openai",
                   help="pretrained tag, a weights file, or none (default %(default)s)")
    g.add_argument("--checkpoint", help="a checkpoint directory of ours (carries its exact open_clip config)")
    g.add_argument("--seed", type=int, default=0, help="seed of a --pretrained none model")
    g.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    g.add_argument("--precision", default="fp32", help="open_clip precision (default fp32, the reference's)")


def load_model_from_args(args):
    import torch

    from .models import load_model

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return load_model(args.model, args.pretrained, args.checkpoint, device=device, precision=args.precision,
                      seed=args.seed), device


def add_eval_parser(sub) -> None:
    from .evaluation.names import BENCHMARKS

    p = sub.add_parser(
        "eval",
        help="evaluate a model: SugarCrepe, SugarCrepe++, Winoground, retrieval, linear probes, VTAB",
        description="Evaluate an open_clip model or a checkpoint on the benchmarks under --data-root (layout: "
        "see `concrete_jungle.evaluation`). Writes one JSON per benchmark and results.md to --out.",
    )
    p.add_argument("--benchmarks", default="sugarcrepe", help=f"comma-separated, from {', '.join(BENCHMARKS)}")
    p.add_argument("--data-root", help="folder holding the benchmarks' data")
    p.add_argument("--out", default="results", help="output folder (default %(default)s)")
    p.add_argument("--skip-missing", action="store_true", help="skip items whose images are missing or unreadable")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=0, help="image-loading processes")
    p.add_argument("--cache-dir", help="cache embeddings here (by model hash and file)")
    p.add_argument("--compare", nargs="+", metavar="JSON", help="print a side-by-side table of result files and exit")
    p.add_argument("--no-progress", action="store_true")
    add_model_args(p)
    p.set_defaults(run=run_eval_command)


def run_eval_command(args, console: Console) -> int:
    from pathlib import Path

    from rich.markdown import Markdown

    from . import evaluation
    from .evaluation.encoding import Encoder

    if args.compare:
        console.print(Markdown(evaluation.compare(args.compare)))
        return 0
    if not args.data_root:
        raise ValueError("concrete-jungle eval needs --data-root (or --compare A.json B.json)")
    names = [n.strip() for n in args.benchmarks.split(",") if n.strip()]
    unknown = sorted(set(names) - set(evaluation.BENCHMARKS))
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; choose from {', '.join(evaluation.BENCHMARKS)}")
    # every benchmark's files are checked before the model is loaded
    loaded = {n: evaluation.load_data(n, Path(args.data_root), args.skip_missing) for n in names}
    clip, device = load_model_from_args(args)
    encoder = Encoder(clip, device=device, batch_size=args.batch_size, num_workers=args.workers,
                      cache_dir=args.cache_dir, progress=not args.no_progress)
    results = evaluation.run(encoder, names, loaded, out=args.out)
    console.print(Markdown(evaluation.markdown(results)))
    return 0


def add_train_parser(sub) -> None:
    p = sub.add_parser(
        "train",
        help="fine-tune an open_clip model with Cement loss on ConcreteBatch (Slipform)",
        description="Train from a YAML config (configs/slipform_vitb32.yaml); flags and --set key.path=value "
        "override it. Under torchrun it runs data parallel. --resume latest continues exactly.",
    )
    p.add_argument("--config", help="YAML config (keys: see concrete_jungle.train.TrainConfig)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override, e.g. optim.lr=1e-5")
    p.add_argument("--out", help="run folder (checkpoints, metrics.jsonl)")
    p.add_argument("--model", help="open_clip model name")
    p.add_argument("--pretrained", help="pretrained tag or none")
    p.add_argument("--checkpoint", help="start from a checkpoint directory of ours")
    p.add_argument("--data", nargs="+", help="ConcreteBatch directories")
    p.add_argument("--loss", choices=["cement", "infonce", "static", "inverse"])
    p.add_argument("--batch-size", type=int, help="anchors per step, over all processes")
    p.add_argument("--steps", type=int)
    p.add_argument("--epochs", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--seed", type=int)
    p.add_argument("--resume", help="latest, or a checkpoint directory")
    p.add_argument("--stop-at", type=int, help="stop after this step with a checkpoint (continue with --resume)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(run=run_train_command)


def run_train_command(args, console: Console) -> int:
    from .train import load_config, train

    flags = {"out": args.out, "model.name": args.model, "model.pretrained": args.pretrained,
             "model.checkpoint": args.checkpoint, "loss.name": args.loss, "batch_size": args.batch_size,
             "steps": args.steps, "epochs": args.epochs, "optim.lr": args.lr, "seed": args.seed}
    overrides = [f"{k}={v}" for k, v in flags.items() if v is not None]
    if args.data:
        overrides.append("data.concretebatch=[" + ",".join(f'"{d}"' for d in args.data) + "]")
    config = load_config(args.config, overrides + args.set)
    last = train(config, resume=args.resume, progress=not args.no_progress, stop_at=args.stop_at)
    if last and int(os.environ.get("RANK", 0)) == 0:
        console.print(f"step {last['step']}: loss {last['loss']:.4f}, hard-negative gradient share "
                      f"{last['hn_grad_share']:.3f} -> {config.out}")
    return 0


def add_gallery_parser(sub) -> None:
    p = sub.add_parser(
        "gallery",
        help="write a static HTML page of hard negatives (anchor and negative side by side)",
        description="One row per sampled anchor, one card per dataset (give D_hc D_lc D_wo of the same anchors "
        "to compare them). Opens from disk.",
    )
    p.add_argument("datasets", nargs="+", metavar="DATASET", help="ConcreteBatch directories")
    p.add_argument("--out", default="gallery", help="output folder (default %(default)s)")
    p.add_argument("--sample", type=int, default=200, help="anchors on the page (default %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sort", default="concreteness", choices=["concreteness", "category", "random"])
    p.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE", help="e.g. category=relation")
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


def add_analyze_parser(sub) -> None:
    p = sub.add_parser(
        "analyze",
        help="the paper's analyses: dataset statistics (Table 1, Fig. 5) and gradient share (Fig. 6)",
        description="`analyze DATASET [DATASET ...]`: Table 1 statistics, Fig. 5 plots, stats.json and report.md. "
        "`analyze gradient-share --data DATASET`: the hard-negative gradient share of InfoNCE and each margin "
        "schedule against batch size (Fig. 6).",
    )
    p.add_argument("targets", nargs="+", metavar="DATASET", help="ConcreteBatch directories, or gradient-share")
    p.add_argument("--data", help="gradient-share: a ConcreteBatch directory")
    p.add_argument("--dino-model", help="DINOv2 for DINOScore (name or path, e.g. facebook/dinov2-base)")
    p.add_argument("--bertscore-model", help="BERTScore model (paper: roberta-large)")
    p.add_argument("--bertscore-layers", type=int, help="BERTScore layer (needed for models bert-score does not know)")
    p.add_argument("--no-rescale", action="store_true", help="BERTScore without baseline rescaling")
    p.add_argument("--batch-sizes", default="64,128,256,512,1024", help="anchors per batch (default %(default)s)")
    p.add_argument("--batches", type=int, default=8, help="random batches averaged per size")
    p.add_argument("--limit", type=int, help="use at most this many pairs")
    p.add_argument("--logit-scale", type=float, help="default: the model's own")
    p.add_argument("--out", default="report", help="output folder (default %(default)s)")
    p.add_argument("--cache-dir", help="embeddings cache, by model and dataset (default <out>/embeddings)")
    add_model_args(p)
    p.set_defaults(run=run_analyze_command)


def run_analyze_command(args, console: Console) -> int:
    from pathlib import Path

    from rich.table import Table

    from .analysis import LABELS, concretebatch_features, gradient_share_by_batch_size, plot_gradient_share
    from .records import atomic_write_json

    if args.targets != ["gradient-share"]:
        from .analysis import analyze_datasets

        clip, device = load_model_from_args(args)
        stats = analyze_datasets(args.targets, clip, args.out, device=device, dino_model=args.dino_model,
                                 bertscore_model=args.bertscore_model, bertscore_layers=args.bertscore_layers,
                                 bertscore_rescale=not args.no_rescale, limit=args.limit, cache_dir=args.cache_dir)
        console.print(f"{len(stats['datasets'])} datasets analysed: {Path(args.out) / 'report.md'}, stats.json, "
                      "figures")
        return 0
    if not args.data:
        raise ValueError("analyze gradient-share needs --data DATASET")
    sizes = [int(n) for n in args.batch_sizes.split(",")]
    clip, device = load_model_from_args(args)
    image, text, c, _, _ = concretebatch_features(clip, args.data, device=device, limit=args.limit,
                                                  cache_dir=args.cache_dir or Path(args.out) / "embeddings")
    scale = args.logit_scale or clip.model.logit_scale.exp().item()
    curves = gradient_share_by_batch_size(image, text, c, scale, sizes, batches=args.batches)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
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


def add_demo_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="the whole method offline on a CPU: toy world, ConcreteBatch, Cement fine-tuning, evaluation, report",
        description="Render a toy world, pretrain a tiny CLIP, make D_hc/D_lc/D_wo with ConcretePlant, fine-tune "
        "with InfoNCE, static margin and Cement, evaluate, and write <out>/report.md. Finished stages are reused.",
    )
    p.add_argument("--quick", action="store_true", help="a smaller world, fewer steps, one seed (about 3 minutes)")
    p.add_argument("--out", default="runs/demo", help="output directory (default %(default)s)")
    p.add_argument("--seeds", type=seed_list, help="fine-tuning seeds, comma-separated (default 0,1,2; --quick: 0)")
    p.add_argument("--pretrain-steps", type=int, help="baseline pretraining steps (default 250; --quick: 120)")
    p.add_argument("--finetune-steps", type=int, help="steps of each fine-tune (default 40; --quick: 25)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(run=run_demo_command)


def seed_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, e.g. 0,1,2") from None


def run_demo_command(args, console: Console) -> int:
    from .demo import QUICK, Demo, DemoConfig, rich_table

    options = dict(QUICK) if args.quick else {}
    if args.seeds:
        options["seeds"] = args.seeds
    for name in ("pretrain_steps", "finetune_steps"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    result = Demo(DemoConfig(out=args.out, **options), progress=not args.no_progress, console=console).run()
    Console(width=max(console.width, 150)).print(rich_table(result["table"]))  # whole rows in a log file too
    console.print(f"report: {args.out}/report.md", highlight=False)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="concrete-jungle",
        description="Concreteness-aware hard negatives and Cement loss for compositional CLIP training.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_keywords_parser(sub)
    add_plant_parser(sub)
    add_eval_parser(sub)
    add_train_parser(sub)
    add_gallery_parser(sub)
    add_analyze_parser(sub)
    add_demo_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # before the imports below: --help stays instant
    from .captioners import CaptionerError
    from .plant import PlantError
    from .train import TrainingError

    console = Console()  # results on stdout; progress bars and errors on stderr
    try:
        return args.run(args, console)
    # every input error of ours is a ValueError (ratings, sources, configs, models, benchmark data) or one of these
    except (ValueError, FileNotFoundError, PlantError, CaptionerError, TrainingError) as e:
        Console(stderr=True).print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
