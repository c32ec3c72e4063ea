"""`concrete-jungle tradeoff`: where each evaluated model sits between composition and recognition."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ..outcomes import RESAMPLES
from .args import positive_int


def add_parser(sub) -> None:
    p = sub.add_parser(
        "tradeoff",
        help="plot the compositional mean against the recognition mean of several evaluated models, with 95 %% "
        "intervals and the Pareto front",
        description="Each RESULTS is one model's `concrete-jungle eval --out` folder (or one result file), "
        "optionally labelled LABEL=PATH: a start model, its fine-tunes, a WiSE-FT sweep. Writes OUT/tradeoff.png, "
        "OUT/tradeoff.md (the same numbers as a table) and OUT/tradeoff.json. Every model must have been evaluated "
        "on the same compositional and recognition benchmarks, on the same files.",
    )
    p.add_argument("results", nargs="+", metavar="RESULTS", help="eval --out folders or result files, or LABEL=PATH")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--normalised", action="store_true",
                   help="plot chance-normalised means (0 at chance, 100 perfect) instead of raw ones")
    p.add_argument("--resamples", type=positive_int, default=RESAMPLES,
                   help="bootstrap resamples of the intervals (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default %(default)s)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace tradeoff.* files in --out that another command wrote, or that were edited")
    p.set_defaults(run=run)


def run(args, console: Console) -> int:
    from ..analysis.tradeoff import tradeoff
    from .tables import print_markdown

    table = tradeoff(args.results, args.out, resamples=args.resamples, seed=args.seed, normalised=args.normalised,
                     overwrite=args.overwrite)
    print_markdown(console, (Path(args.out) / "tradeoff.md").read_text(encoding="utf-8"))  # whole through a pipe
    front = [row["label"] for row in table["points"] if row["front"]]
    console.print(f"on the front: {', '.join(front)}; written: {Path(args.out) / 'tradeoff.png'}, tradeoff.md, "
                  "tradeoff.json", highlight=False)
    return 0
