"""The `concrete-jungle` command: one sub-command per capability, each with its own --help."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console


def _targets(text: str) -> dict[str, float]:
    """``attribute=0.5,object=0.5`` -> {'attribute': 0.5, 'object': 0.5}."""
    try:
        return {k.strip(): float(v) for k, v in (part.split("=") for part in text.split(","))}
    except ValueError:
        raise argparse.ArgumentTypeError(f"--targets {text!r}: write it as attribute=0.4,object=0.4,relation=0.2")


def add_keywords_parser(sub) -> None:
    from .keywords import MODES, POLICIES, SamplerConfig
    from .sources import FORMATS

    default = SamplerConfig()
    p = sub.add_parser(
        "keywords",
        help="pick one concrete keyword per caption (ConcretePlant stage 1)",
        description="Parse captions with spaCy, rate candidate keywords for concreteness and sample one per "
        "sample. Re-running with the same --out resumes.",
    )
    p.add_argument("--captions", nargs="+", required=True, metavar="FILE",
                   help="caption files or directories: Karpathy dataset_*.json, COCO captions_*.json, "
                   "SugarCrepe JSON, JSONL or CSV")
    p.add_argument("--format", choices=FORMATS, help="input format (default: detected)")
    p.add_argument("--split", help="Karpathy split(s) to read, e.g. train or train,restval (default: all)")
    p.add_argument("--mode", choices=MODES, required=True, help="hc: high, lc: low, wo: no concreteness preference")
    p.add_argument("--top-k", type=int, default=default.top_k, help="candidates kept by concreteness (default %(default)s)")
    p.add_argument("--temperature", type=float, default=default.temperature, help="softmax temperature (default %(default)s)")
    p.add_argument("--policy", choices=POLICIES, default=default.policy, help="category step (default %(default)s)")
    p.add_argument("--targets", type=_targets, default=None,
                   help="target category shares for the quota, e.g. attribute=0.4,object=0.4,relation=0.2")
    p.add_argument("--seed", type=int, default=default.seed)
    p.add_argument("--scale", default="brysbaert", help="built-in scale: brysbaert or lancaster-visual")
    p.add_argument("--ratings", help="a CSV of your own ratings instead of a built-in scale")
    p.add_argument("--word-column", default="Word", help="word column of --ratings (default %(default)s)")
    p.add_argument("--score-column", help="score column of --ratings")
    p.add_argument("--spacy-model", help="spaCy pipeline name or path (default: an installed English pipeline)")
    p.add_argument("--batch-size", type=int, default=256, help="captions per spaCy batch")
    p.add_argument("--workers", type=int, default=1, help="spaCy processes (nlp.pipe n_process)")
    p.add_argument("--max-words", type=int, default=60, help="skip longer captions (default %(default)s)")
    p.add_argument("--out", required=True, help="output JSONL; an existing file is resumed")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run_keywords_command)


def run_keywords_command(args, console: Console) -> int:
    from .concreteness import load_ratings
    from .keywords import FilterConfig, SamplerConfig, load_spacy, run_keywords, summary_table

    config = SamplerConfig(
        mode=args.mode, top_k=args.top_k, temperature=args.temperature, policy=args.policy, seed=args.seed,
        **({"targets": args.targets} if args.targets else {}),
    )
    ratings = load_ratings(args.scale, args.ratings, args.word_column, args.score_column)
    nlp = load_spacy(args.spacy_model)
    summary = run_keywords(
        args.captions, args.out, config, ratings, nlp, fmt=args.format, split=args.split,
        limits=FilterConfig(max_words=args.max_words), batch_size=args.batch_size, workers=args.workers,
        progress=not args.no_progress,
    )
    console.print(summary_table(summary, f"keywords ({args.mode}) -> {args.out}"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="concrete-jungle",
        description="Concreteness-aware hard negatives and Cement loss for compositional CLIP training.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_keywords_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .concreteness import RatingsError
    from .keywords import KeywordJobError
    from .sources import SourceError

    args = build_parser().parse_args(argv)
    console = Console(stderr=True)
    try:
        return args.run(args, console)
    except (RatingsError, SourceError, KeywordJobError, ValueError) as e:
        console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
