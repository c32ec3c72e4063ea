"""The `concrete-jungle` command: one sub-command per capability, each in its own module of this package with
``add_parser(sub)`` and ``run(args, console)``; shared flags and argument types are in `args`.

Every command checks its arguments (flags, files, config keys) before it imports torch, spaCy or open_clip
and before it writes anything, so a mistake is reported in well under a second and leaves no file behind.
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from .. import __version__
from ..errors import JobError
from . import analyze, cache, demo, evaluate, gallery, keywords, plant, train

COMMANDS = (keywords, plant, evaluate, train, cache, gallery, analyze, demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="concrete-jungle",
        description="Concreteness-aware hard negatives and Cement loss for compositional CLIP training.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
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
