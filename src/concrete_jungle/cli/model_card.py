"""`concrete-jungle model-card`: the README.md a Hugging Face Hub page shows, written into a checkpoint folder."""

from __future__ import annotations

from rich.console import Console

from ..outcomes import RESAMPLES
from .args import positive_int


def repo_id(text: str) -> str:
    """A Hub repository id as the Hub takes it (its own rule: letters, digits, '-', '_', '.', one '/')."""
    import argparse

    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a Hub repository id: give ORG/NAME of letters, digits, "
                                         "'-', '_' and '.' (no '--' or '..', at most 96 characters)") from None
    return text


def add_parser(sub) -> None:
    p = sub.add_parser(
        "model-card",
        help="write a checkpoint's model card (README.md): architecture, data and recipe, loss, steps, evaluation "
        "with 95 %% intervals, licence of the start weights, how to load and publish it",
        description="Writes CHECKPOINT/README.md from the training run beside the checkpoint (or its wise_ft.json) "
        "and, with --results, the evaluation of this checkpoint (eval --out folders). The folder is open_clip's Hub "
        "layout: `hf upload ORG/NAME CHECKPOINT . --exclude 'trainer_state.*'` publishes it. A "
        "README.md written by anything else is kept.",
    )
    p.add_argument("checkpoint", metavar="CHECKPOINT",
                   help="a checkpoint folder, <run>/checkpoints/latest, or a training run's folder")
    p.add_argument("--results", nargs="+", metavar="DIR", help="eval --out folders of this checkpoint")
    p.add_argument("--repo", type=repo_id, default="ORG/NAME", help="the Hub repository the card's examples name")
    p.add_argument("--resamples", type=positive_int, default=RESAMPLES,
                   help="bootstrap resamples of the intervals (default %(default)s)")
    p.set_defaults(run=run)


def run(args, console: Console) -> int:
    from ..analysis.model_card import upload_line, write_card
    from ..files.locks import locked
    from ..models.checkpoints import resolve_checkpoint

    folder = resolve_checkpoint(args.checkpoint)
    # the folder is taken first (a lock in it): one it cannot write into is refused before the card is made
    with locked(folder / ".model-card.lock", f"the checkpoint folder {folder}", "concrete-jungle model-card"):
        path = write_card(folder, args.results, args.repo, args.resamples)
    console.print(f"written: {path}; publish the folder with: {upload_line(args.repo, folder)}", highlight=False)
    return 0
