"""`concrete-jungle train`: fine-tune an open_clip model with Cement loss on ConcreteBatch (Slipform)."""

from __future__ import annotations

import os

from rich.console import Console

from ..loss.options import LOSS_NAMES, PEER_LOSSES
from .args import add_print_config, positive_float, positive_int, print_config


def add_parser(sub) -> None:
    p = sub.add_parser(
        "train",
        help="fine-tune an open_clip model with Cement loss on ConcreteBatch (Slipform)",
        description="Train from a YAML config (configs/slipform_vitb32.yaml); flags and --set key.path=value "
        "override it. Under torchrun it runs data parallel. --resume latest continues exactly.",
    )
    p.add_argument("--config", help="YAML config (keys: see concrete_jungle.train.config.TrainConfig)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override, e.g. optim.lr=1e-5")
    p.add_argument("--out", help="run folder (checkpoints, metrics.jsonl)")
    p.add_argument("--model", help="open_clip model name")
    p.add_argument("--pretrained", help="pretrained tag or none")
    p.add_argument("--checkpoint", help="start from a checkpoint directory of ours")
    p.add_argument("--data", nargs="+", help="ConcreteBatch directories")
    p.add_argument("--loss", choices=LOSS_NAMES, metavar="NAME",
                   help="loss.name: cement (adaptive margin), infonce (no margin), static (loss.static_margin), "
                        f"inverse, or a peer's loss, {', '.join(PEER_LOSSES)} (its section loss.NAME; docs/peers.md)")
    p.add_argument("--batch-size", type=positive_int, help="anchors per step, over all processes")
    p.add_argument("--steps", type=positive_int, help="optimisation steps (overrides --epochs)")
    p.add_argument("--epochs", type=positive_int, help="passes over the data")
    p.add_argument("--lr", type=positive_float, help="peak learning rate (optim.lr)")
    p.add_argument("--seed", type=int, help="seed of the initialisation, data order and RNG state")
    p.add_argument("--seeds", type=int, nargs="+", metavar="SEED",
                   help="one run per seed, in turn, each in --out/seed-N (for eval --compare --vs); with --resume "
                        "latest, finished seeds are kept and the others continue or start")
    p.add_argument("--resume", help="latest, or a checkpoint directory")
    p.add_argument("--overwrite", action="store_true",
                   help="start over in an --out that holds a run (its checkpoints and metrics are removed first)")
    p.add_argument("--stop-at", type=positive_int,
                   help="stop after this step with a checkpoint (continue with --resume)")
    p.add_argument("--wandb", metavar="PROJECT", help="log the metrics to this Weights & Biases project too "
                   "(wandb.project; the wandb extra)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_print_config(p)
    p.set_defaults(run=run)


def run(args, console: Console) -> int:
    from ..train.config import check_config, load_config

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
             "steps": args.steps, "epochs": args.epochs, "optim.lr": args.lr, "seed": args.seed,
             "wandb.project": args.wandb}
    overrides = [f"{k}={v}" for k, v in flags.items() if v is not None]
    if args.data:
        overrides.append("data.concretebatch=[" + ",".join(f'"{d}"' for d in args.data) + "]")
    if args.seeds and (args.seed is not None or any(item.split("=", 1)[0].strip() == "seed" for item in args.set)):
        raise ValueError("--seeds runs one seed per folder: leave out --seed (and --set seed=...)")
    if args.seeds and args.resume not in (None, "latest"):
        raise ValueError("--seeds takes --resume latest (each seed's folder resumes its own run), not a checkpoint")
    if args.seeds and len(set(args.seeds)) < len(args.seeds):
        raise ValueError(f"--seeds {' '.join(map(str, args.seeds))}: a seed is given twice")
    config = load_config(args.config, overrides + args.set)
    if args.print_config:
        return print_config(config, console)
    check_config(config)  # before torch is imported

    from ..train.loop import train

    for run_config, resume in seed_runs(config, args.seeds, args.resume, console):
        last = train(run_config, resume=resume, progress=not args.no_progress, stop_at=args.stop_at,
                     overwrite=args.overwrite)
        if last and int(os.environ.get("RANK", 0)) == 0:
            share = "-" if last["hn_grad_share"] is None else f"{last['hn_grad_share']:.3f}"
            console.print(f"step {last['step']}: loss {last['loss']:.4f}, hard-negative gradient share {share} "
                          f"-> {run_config.out}", highlight=False)
    return 0


def seed_runs(config, seeds: list[int] | None, resume: str | None, console: Console):
    """(config, resume) of each run: the config itself, or with --seeds one run per seed in ``<out>/seed-N``. A
    seed's folder is a run of its own; with --resume latest one already complete is kept as it is and one that
    holds no checkpoint starts, so the same command picks a stopped series up where it stopped. Every seed's run
    made so far, complete or not, is checked against the settings first (`check_resumable`): a series is one
    recipe, so none trains when one was made otherwise."""
    import json
    from dataclasses import replace
    from pathlib import Path

    from ..train.config import check_resumable

    if not seeds:
        yield config, resume
        return
    runs = [replace(config, out=str(Path(config.out) / f"seed-{seed}"), seed=seed) for seed in seeds]
    if resume == "latest":
        for run_config in runs:
            check_resumable(run_config, resume)
    for run_config in runs:
        latest = Path(run_config.out) / "checkpoints" / "latest.json"
        if resume != "latest" or not latest.is_file():
            yield run_config, None  # not resumed, or nothing there to resume yet
            continue
        try:
            finished = json.loads(latest.read_text(encoding="utf-8")).get("reason") == "final"
        except (OSError, ValueError, AttributeError):
            finished = False  # the run names the damage when it resumes
        if finished:
            console.print(f"seed {run_config.seed}: {run_config.out} holds a complete run; kept", highlight=False)
            continue
        yield run_config, resume
