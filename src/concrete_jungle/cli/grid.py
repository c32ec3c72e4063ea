"""`concrete-jungle grid`: train every dataset with every loss from one start and compare them on one harness."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

# `grid --toy --quick`: toy_grid's small settings, the ones its end-to-end test runs
QUICK_TOY = {"world": {"train": 160, "test": 80}, "pretrain_steps": 20, "steps": 3, "batch_size": 16}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "grid", help="a data x loss grid: each dataset trained with each loss from one start, compared with intervals",
        description="Train every dataset (rows) with every loss (columns) from the same start, recipe, steps and "
        "data order, evaluate each on the same items, and write grid.md (each cell's gain over the start with its "
        "95 % interval), grid.json and a heat-map per benchmark. Resumable cell by cell: run the same command "
        "again. --toy OUT makes the toy world's grid (D_hc and NegCLIP-style swaps of the same anchors) and runs it.")
    p.add_argument("config", nargs="?", help="the grid's YAML file (docs/commands/train.md, grid)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key of the grid file, e.g. --set eval.resamples=5000")
    p.add_argument("--toy", metavar="OUT", help="render the toy world, pretrain its baseline, plant D_hc, import "
                   "rule swaps of the same captions, and run their grid in OUT")
    p.add_argument("--overwrite", action="store_true",
                   help="replace grid.md, grid.json or grid-<benchmark>.png in the grid's out that a grid did not "
                   "write, or that were edited")
    p.add_argument("--quick", action="store_true", help=f"with --toy: a small world ({QUICK_TOY['world']['train']} "
                   f"training scenes, {QUICK_TOY['world']['test']} held out), {QUICK_TOY['pretrain_steps']} "
                   f"pretraining and {QUICK_TOY['steps']} fine-tuning steps at batch {QUICK_TOY['batch_size']}: "
                   "shows the grid runs, in minutes")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(run=run)


def run(args, console: Console) -> int:
    from ..experiments.grid import load_grid_config

    if bool(args.config) == bool(args.toy):
        raise ValueError("concrete-jungle grid needs a grid file or --toy OUT (not both): concrete-jungle grid "
                         "configs/grid.yaml, or concrete-jungle grid --toy runs/grid")
    if args.quick and not args.toy:
        raise ValueError("--quick makes the toy world's grid small: give it with --toy OUT")
    grid = load_grid_config(args.config, args.set) if args.config else None
    from ..experiments.grid import grid_markdown, run_grid, toy_grid
    from .tables import print_markdown

    def say(message: str) -> None:
        console.print(message, highlight=False)

    from ..files.locks import locked
    from ..files.outputs import output_folder

    out = output_folder(args.toy if grid is None else grid.out, "--toy" if grid is None else "out")
    # the output folder is taken first (a lock in it): a folder it cannot write into is refused before any work
    with locked(out / ".grid.lock", f"the grid {out}", "concrete-jungle grid"):
        if grid is None:
            grid = toy_grid(args.toy, **(QUICK_TOY if args.quick else {}), progress=not args.no_progress, log=say)
        table = run_grid(grid, progress=not args.no_progress, log=say, overwrite=args.overwrite)
    print_markdown(console, grid_markdown(table))
    say(f"written: {Path(grid.out) / 'grid.md'}, grid.json and grid-<benchmark>.png")
    return 0
