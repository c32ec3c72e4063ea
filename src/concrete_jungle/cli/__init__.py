"""The `concrete-jungle` command: one sub-command per capability, each in its own module of this package with
``add_parser(sub)`` and ``run(args, console)``; shared flags and argument types are in `args`.

Every command checks its arguments (flags, files, config keys) before it imports torch, spaCy or open_clip
and before it writes anything, so a mistake is reported in well under a second and leaves no file behind.
"""

from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from .. import __version__
from ..errors import Interrupted, JobError
from . import (
    analyze,
    cache,
    demo,
    evaluate,
    export,
    gallery,
    grid,
    import_set,
    keywords,
    model_card,
    plant,
    study,
    tradeoff,
    train,
    wise_ft,
)

COMMANDS = (keywords, plant, import_set, evaluate, train, cache, gallery, analyze, export, demo, study, grid,
            wise_ft, tradeoff, model_card)


# what a command interrupted by Ctrl-C tells its user (every long job writes atomically and resumes)
ON_INTERRUPT = {
    "keywords": "nothing is lost: the same command resumes where it stopped",
    "plant": "nothing is lost: finished shards stay, and the same command resumes from them",
    "import": "nothing is lost: finished shards stay, and the same command resumes from them",
    "cache": "nothing is lost: a cache is published only when complete; the same command builds it again",
    # a Ctrl-C after the first step is caught by the run, which saves a checkpoint and says so (`Interrupted`)
    "train": "stopped before the first step: no step was taken, so nothing needs resuming; run the same command "
             "again",
    "demo": "finished stages are kept: the same command reuses them",
    "eval": "no result was written for the benchmark in progress; with --models the same command evaluates only what "
            "is not complete; with --cache-dir, encoded embeddings are reused",
    "wise-ft": "finished alphas are kept (each checkpoint is written whole or not at all); the same command writes "
               "the rest",
}


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


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag of a command, its sub-commands' included (``analyze datasets``, ``analyze gradient-share``)."""
    out = []
    for action in parser._actions:
        out += action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                out += option_strings(child)
    return out


def reject_unknown(parser: argparse.ArgumentParser, command: str, extras: list[str]) -> None:
    """``unrecognized arguments``, with the flag meant where one is close (``--captoins``: ``--captions``)."""
    import difflib

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    known = sorted(set(option_strings(sub)))
    hints = [f"{x} (did you mean {match[0]}?)" if (match := difflib.get_close_matches(x.split("=")[0], known, 1, 0.7))
             else x for x in extras]
    sub.error(f"unrecognized arguments: {' '.join(hints)}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `analyze DATASET ...` is short for `analyze datasets DATASET ...`
    if argv[:1] == ["analyze"] and len(argv) > 1 and argv[1] not in ("datasets", "gradient-share", "-h", "--help"):
        argv.insert(1, "datasets")
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        reject_unknown(parser, args.command, extras)
    # results on stdout; progress bars and errors on stderr. Piped into a file or a log, a message is not wrapped at 80
    # columns: a path cut in two could not be copied back
    console = Console(soft_wrap=not sys.stdout.isatty())
    errors = Console(stderr=True, soft_wrap=not sys.stderr.isatty())
    try:
        return args.run(args, console)
    except Interrupted as e:  # the job saved what it had before it stopped
        errors.print(f"[bold yellow]interrupted:[/] {e}", highlight=False, soft_wrap=True)
        return 130
    except KeyboardInterrupt:
        hint = ON_INTERRUPT.get(args.command)
        errors.print(f"[bold yellow]interrupted[/]{f': {hint}' if hint else ''}", highlight=False, soft_wrap=True)
        return 130
    # every input error of ours is a ValueError (ratings, sources, configs, models, benchmark data), a missing
    # file, or a JobError (a run that cannot go on)
    except (ValueError, FileNotFoundError, JobError) as e:
        # escaped: a message's brackets are text ("pip install 'concrete-jungle[wandb]'"), not console markup
        errors.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return 2
    except OSError as e:  # a folder this user may not write into: every command meets it first making its output
        if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS) or e.filename is None:
            raise
        errors.print(f"[bold red]error:[/] {refused_access(e)}", highlight=False, soft_wrap=True)
        return 2


def refused_access(e: OSError) -> str:
    """A permission error in one line naming the folder that refused a new file (or the file itself, when it was
    an existing one that could not be opened)."""
    path = Path(e.filename)
    if e.errno == errno.EROFS or not path.exists():
        return (f"cannot write into {path.parent}: {e.strerror}; choose an output folder you can write to, or make "
                "this one writable")
    return f"cannot open {path}: {e.strerror}; fix its permissions (an output must be writable, an input readable)"


if __name__ == "__main__":
    sys.exit(main())
