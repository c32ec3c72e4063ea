"""`concrete-jungle wise-ft`: checkpoints between a start model and its fine-tune (weight interpolation)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console


def alpha(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} must be in [0, 1] (0: START, 1: FINETUNED)")
    return value


def add_parser(sub) -> None:
    p = sub.add_parser(
        "wise-ft",
        help="interpolate the weights of a fine-tune with those it started from (WiSE-FT): one checkpoint per alpha",
        description="theta = (1 - alpha) * START + alpha * FINETUNED for every tensor, written as a checkpoint of "
        "ours per alpha (OUT/alpha-<alpha>/, with wise_ft.json naming both ends and a model card), which eval "
        "--checkpoint takes. alpha 0 and 1 are START and FINETUNED bit for bit. Models of different architectures "
        "are refused, naming the config entry or tensor that differs. An end is a checkpoint of ours (its folder, "
        "<run>/checkpoints/latest or a run), peer:NAME, hf-hub:ORG/NAME, or NAME:TAG (ViT-B-32-quickgelu:openai).",
    )
    p.add_argument("start", metavar="START", help="the model the fine-tune started from")
    p.add_argument("finetuned", metavar="FINETUNED", help="the fine-tuned model")
    p.add_argument("--alpha", type=alpha, nargs="+", required=True, metavar="ALPHA",
                   help="one or more weights of FINETUNED in [0, 1], e.g. --alpha 0.25 0.5 0.75")
    p.add_argument("--out", required=True, help="output folder (one checkpoint folder per alpha inside)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace alpha folders in --out that hold another interpolation")
    p.set_defaults(run=run)


def run(args, console: Console) -> int:
    from ..files.locks import locked
    from ..files.outputs import output_folder
    from ..models.wise_ft import check_end, wise_ft

    check_end(args.start, "START")  # both named right before any model loads
    check_end(args.finetuned, "FINETUNED")
    output_folder(args.out)
    alphas = list(dict.fromkeys(args.alpha))
    with locked(Path(args.out) / ".wise_ft.lock", f"--out {args.out}", "concrete-jungle wise-ft"):
        folders = wise_ft(args.start, args.finetuned, alphas, args.out, overwrite=args.overwrite,
                          progress=lambda text: console.print(text, highlight=False))
        from ..analysis.model_card import write_card

        for folder in folders:
            write_card(folder)
    console.print(f"{len(folders)} checkpoint(s) in {args.out}: evaluate each with concrete-jungle eval --checkpoint "
                  f"{Path(args.out) / 'alpha-<alpha>'}, then plot them with concrete-jungle tradeoff", highlight=False)
    return 0
