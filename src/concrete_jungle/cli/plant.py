"""`concrete-jungle plant`: make a ConcreteBatch (keywords, caption rewrite, image edit), or merge its parts."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from .args import (
    add_input_args,
    add_print_config,
    add_sampler_args,
    column_names,
    key_values,
    non_negative_int,
    positive_int,
    positive_int_list,
    print_config,
    sampler_config,
    strength,
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "plant",
        help="make a ConcreteBatch: keywords, caption rewrite, image edit (ConcretePlant)",
        description="Sample keywords, rewrite captions, edit images and write WebDataset shards plus a manifest. "
        "Re-running with the same --out resumes. `concrete-jungle plant merge DIR` joins the parts of a "
        "--num-shards run.",
        add_help=False,
    )
    p.add_argument("-h", "--help", action=PlantHelp, help="show this help message and exit (after merge: merge's)")
    # no `choices`: argparse would check them before it reports a misspelled flag, and `--captoins x.jsonl` would
    # read as "invalid choice: 'x.jsonl'"
    p.add_argument("action", nargs="?", metavar="merge", help="merge: check and join the parts in DIR")
    p.add_argument("--config", help="a YAML file of PlantConfig settings (e.g. configs/paper/plant_hc.yaml) instead "
                   "of the dataset flags below; change one with --set key=value")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a --config setting")
    p.add_argument("merge_dir", nargs="?", metavar="DIR", help="dataset directory to merge")
    add_input_args(p, required=False)
    add_sampler_args(p, required=False)
    p.add_argument("--images", help="folder the captions' image paths are relative to (COCO: the image folder); "
                   "not needed for stores, which hold their images")
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
    g = p.add_argument_group("scores and gates (docs/method.md §3)")
    g.add_argument("--score", action="store_true", help="score every pair as it is made: text_sim (BERTScore), "
                   "image_sim (DINOv2) and agreement (open_clip ViT-L-14), stored in its record and manifest row")
    g.add_argument("--scorer", action="append", default=[], metavar="NAME",
                   help="score with these scorers instead (repeatable): bertscore, dino, open_clip, clip_sim, "
                   "pixel, a registered plugin, or package.module:Class; implies --score")
    g.add_argument("--scorer-option", action="append", default=[], metavar="SCORER.KEY=VALUE",
                   help="an option of a scorer's constructor (repeatable), e.g. open_clip.model=ViT-B-32")
    g.add_argument("--score-device", help="where the scorers run (default: the editor's device)")
    g.add_argument("--gate", action="append", default=[], metavar="SCORE>=NUMBER",
                   help="reject a pair whose score fails the threshold (repeatable; >=, <=, > or <), e.g. "
                   "agreement>=0.0, image_sim<=0.95; a re-plant with other gates decides again from the stored "
                   "scores. With --config: replaces its gates")
    g.add_argument("--entailment", metavar="SCORE<NUMBER",
                   help="decide from a score whether the anchor's caption is still true of each negative picture "
                   "(>=, <=, > or <), e.g. agreement_negative<0.0, or viewer_anchor_true>=1 with --scorer toyworld in "
                   "the toy world; recorded with each negative as anchor_true_of_negative; implies --score")
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
    g.add_argument("--limit", type=positive_int, help="only the first N samples of the input: try settings on a few "
                   "(a dataset setting: resuming with another limit is refused)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_print_config(g)
    g = p.add_argument_group("the bill before the run")
    g.add_argument("--estimate", action="store_true",
                   help="print what the run would cost (anchors, LLM requests, edits, disk, GPU-hours per stage), each "
                   "figure counted, measured or assumed, and stop: no model is loaded, nothing is written (--out is "
                   "not needed)")
    g.add_argument("--throughput", metavar="FILE", help="with --estimate: your own measured rates (YAML or JSON: "
                   "docs/scale.md) instead of the documented anchors")
    g.add_argument("--json", nargs="?", const="-", metavar="FILE",
                   help="with --estimate: the figures as JSON, printed instead of the table, or written to FILE")
    p.set_defaults(run=run)


def merge_parser(prog: str) -> argparse.ArgumentParser:
    """`plant merge`'s own help: it takes DIR alone, none of plant's flags."""
    m = argparse.ArgumentParser(
        prog=f"{prog} merge", description="Check that every part of a --num-shards run finished, holds its own ids "
        "and was made with the same settings, and join the parts' manifests into the dataset's manifest.jsonl, "
        "rejects.jsonl and summary.json.")
    m.add_argument("merge_dir", metavar="DIR", help="the dataset directory the parts were written to (their --out)")
    return m


class PlantHelp(argparse.Action):
    """``--help``: plant's help, or after ``merge`` (``plant merge --help``) merge's alone."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        # argparse has already taken the positional `merge` when it reaches the flag after it
        (merge_parser(parser.prog) if getattr(namespace, "action", None) == "merge" else parser).print_help()
        parser.exit()


def engine_config(args, base=None):
    """The engine of the flags, over ``base`` (a --config file's)."""
    from dataclasses import asdict

    from ..plant import EngineConfig

    settings = asdict(base) if base is not None else {}
    given = {"name": args.engine, "address": args.ray_address, "edit_gpus": args.ray_edit_gpus,
             "edit_cpus": args.ray_edit_cpus}
    if args.ray_actors:
        if len(args.ray_actors) != 3:
            raise ValueError(f"--ray-actors {','.join(map(str, args.ray_actors))}: give three counts, K,R,E")
        given |= dict(zip(("keyword_actors", "rewrite_actors", "edit_actors"), args.ray_actors))
    return EngineConfig(**settings | {k: v for k, v in given.items() if v is not None})


def store_images(captions: list[str] | None):
    """The folder the stores the captions name lie under, when every input is a store (their images are inside
    them: their locators are relative to that folder); else None."""
    from ..sources import expand_paths
    from ..sources.stores import store_root

    return store_root(expand_paths(captions)) if captions else None


def plant_config_from_flags(args, num_shards: int, shard_index: int):
    from ..plant import PlantConfig

    images = args.images or store_images(args.captions)
    needed = ("captions", "images", "mode") if args.estimate else ("captions", "images", "out", "mode")
    missing = [n for n in needed if not (images if n == "images" else getattr(args, n))]
    if missing:
        # the sentence on stores only when --images is missing: after another missing flag it would mislead
        stores = ("; --images may be left out when every input is a store (WebDataset, Parquet, a saved dataset), "
                  "which holds its images") if "images" in missing else ""
        flags = ", ".join("--mode (hc, lc or wo)" if n == "mode" else f"--{n}" for n in missing)
        raise ValueError(f"concrete-jungle plant needs {flags} (or --config FILE){stores}")
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
    scoring = scoring_from_flags(args)
    return PlantConfig(
        captions=list(args.captions), images=str(images), out=args.out or "", mode=args.mode, format=args.format,
        split=args.split, columns=column_names(args.columns), sampler=sampler_config(args), scale=args.scale,
        spacy_model=args.spacy_model, captioner=args.captioner,
        captioner_options=captioner_options | key_values(args.captioner_option, "--captioner-option"),
        editor=args.editor, editor_options=editor_options | key_values(args.editor_option, "--editor-option"),
        max_attempts=args.max_attempts, batch_size=args.batch_size, samples_per_shard=args.samples_per_shard,
        num_shards=num_shards, shard_index=shard_index, engine=engine_config(args), limit=args.limit,
        scoring=scoring, gates=list(args.gate),
    )


def scoring_from_flags(args):
    """The `ScoringConfig` of --score, --scorer, --scorer-option and --score-device, or None (scoring off)."""
    from ..plant.scorers import DEFAULT_SCORERS
    from ..plant.scoring import ScoringConfig

    if not (args.score or args.scorer or args.scorer_option or args.score_device or args.entailment):
        return None
    scorers = {name: {} for name in args.scorer} if args.scorer else {k: dict(v) for k, v in DEFAULT_SCORERS.items()}
    for key, value in key_values(args.scorer_option, "--scorer-option").items():
        name, _, option = key.rpartition(".")
        if name not in scorers:
            raise ValueError(f"--scorer-option {key}={value}: {name or key!r} is not a scorer of this run "
                             f"({', '.join(scorers)}); write it as SCORER.KEY=VALUE, e.g. open_clip.model=ViT-B-32")
        scorers[name][option] = value
    return ScoringConfig(scorers=scorers, device=args.score_device, entailment=args.entailment)


def run(args, console: Console) -> int:
    from dataclasses import replace

    from rich.table import Table

    from .. import plant
    from ..plant import PlantConfig, merge_parts, shard_from_environment
    from ..plant.config import hoist_mode
    from .tables import print_table

    # this part of a split run: the flags, else torchrun's or SLURM's environment, else the whole run
    env_index, env_count = shard_from_environment()
    shard_index = args.shard_index if args.shard_index is not None else env_index
    num_shards = args.num_shards if args.num_shards is not None else env_count
    if (args.json or args.throughput) and not args.estimate:
        raise ValueError("--json and --throughput go with --estimate")
    if args.action not in (None, "merge"):
        raise ValueError(f"plant: unexpected argument {args.action!r}; the only action is `plant merge DIR` "
                         "(caption files go after --captions)")
    if args.action == "merge":
        if not args.merge_dir:
            raise ValueError("usage: concrete-jungle plant merge DIR")
        summary = merge_parts(args.merge_dir)
    else:
        if args.config:
            from ..configs import apply_overrides, from_dict, load_yaml

            given = [f"--{n}" for n in ("captions", "images", "out") if getattr(args, n)]
            if given:
                raise ValueError(f"{', '.join(given)} with --config: put them in the file or pass --set key=value")
            data = hoist_mode(apply_overrides(load_yaml(args.config), args.set, PlantConfig),
                              f"{args.config}{' with --set' if args.set else ''}")
            if args.limit:
                data["limit"] = args.limit
            data.setdefault("num_shards", num_shards)
            data.setdefault("shard_index", shard_index)
            scoring_flags = [f for f, v in (("--score", args.score), ("--scorer", args.scorer), ("--scorer-option",
                             args.scorer_option), ("--score-device", args.score_device),
                                                   ("--entailment", args.entailment)) if v]
            if scoring_flags:
                raise ValueError(f"{', '.join(scoring_flags)} with --config: put scoring in the file (scoring: "
                                 "{scorers: {...}, entailment: ...}) or pass --set scoring.device=...")
            if args.gate:
                data["gates"] = list(args.gate)
            config = from_dict(PlantConfig, data, where=args.config)
            config = replace(config, engine=engine_config(args, config.engine))
        else:
            config = plant_config_from_flags(args, num_shards, shard_index)
        if args.print_config:
            return print_config(config, console)
        if args.estimate:
            return print_estimate(config, args, console)
        config.check_inputs()  # files, folders, captioner and editor names: before anything is written
        if config.engine.name == "ray":
            import importlib.util

            if importlib.util.find_spec("ray") is None:
                raise ValueError("--engine ray needs Ray: pip install 'concrete-jungle[ray]'")
        summary = plant.run(config, progress=not args.no_progress)
    table = Table(title="ConcreteBatch")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    for key, value in summary.items():
        table.add_row(key.replace("_", " "), readable(value))
    print_table(console, table)  # whole rows through a pipe
    if args.action == "merge":
        summary_json = Path(args.merge_dir) / "summary.json"
    else:
        summary_json = Path(config.out) / ("summary.json" if config.num_shards == 1 else f"summary-{config.part}.json")
    write_table(table, summary_json.with_suffix(".md"))
    if args.action != "merge":
        console.print(f"written: {config.out} (shards, manifest.jsonl, rejects.jsonl, {summary_json.name}, "
                      f"{summary_json.with_suffix('.md').name})", highlight=False)
    return 0


def write_table(table, path: Path) -> None:
    """The summary table as Markdown beside the summary's JSON (the table the command printed, whole)."""
    from ..records import atomic_write_text
    from .tables import table_markdown

    atomic_write_text(path, table_markdown(table))


def print_estimate(config, args, console: Console) -> int:
    """`plant --estimate`: the bill as a table (whole rows when piped), or JSON with --json (to a FILE: both)."""
    import json
    import sys

    from ..plant.estimate import estimate, estimate_table, load_throughput
    from ..records import atomic_write_text
    from .tables import print_table

    result = estimate(config, load_throughput(args.throughput) if args.throughput else None)
    text = json.dumps(result, indent=2, ensure_ascii=False) + "\n"
    if args.json == "-":
        sys.stdout.write(text)
        return 0
    print_table(console, estimate_table(result))
    if args.json:
        atomic_write_text(args.json, text)
        console.print(f"written: {args.json}", highlight=False)
    return 0


def readable(value) -> str:
    """A summary value for the table: numbers rounded, a mapping one ``key: value`` line per entry (reject reasons
    whole, on lines of their own), nothing as a Python literal."""
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, dict):
        return "\n".join(f"{k}: {f'{v:.0%}' if isinstance(v, float) and 0 <= v <= 1 else readable(v)}"
                         for k, v in value.items()) or "none"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return "-" if value is None else str(value)
