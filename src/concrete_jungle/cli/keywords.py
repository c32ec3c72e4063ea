"""`concrete-jungle keywords`: pick one concrete keyword per caption (ConcretePlant stage 1)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from .args import add_input_args, add_sampler_args, column_names, positive_int, sampler_config


def add_parser(sub) -> None:
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
    p.add_argument("--batch-size", type=positive_int, default=256, help="captions per spaCy batch")
    p.add_argument("--workers", type=positive_int, default=1,
                   help="processes that parse captions and extract their candidates (default %(default)s: this "
                   "process); sampling stays in this process, in input order, so the output is the same for any N")
    p.add_argument("--max-words", type=positive_int, default=60, help="skip longer captions (default %(default)s)")
    p.add_argument("--limit", type=positive_int, help="only the first N samples of the input: try settings on a few")
    p.add_argument("--out", required=True, help="output JSONL; an existing file is resumed")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def run(args, console: Console) -> int:
    from ..plant.concreteness import load_ratings
    from ..sources import expand_paths

    config = sampler_config(args)
    expand_paths(args.captions)  # a missing file is reported before spaCy loads
    ratings = load_ratings(args.scale, args.ratings, args.word_column, args.score_column)

    from ..files.locks import locked
    from ..nlp import load_spacy
    from ..plant.keyword_job import FilterConfig, run_keywords, summary_table

    out = Path(args.out)
    with locked(out.with_name(f".{out.name}.lock"), f"--out {out}", "concrete-jungle keywords"):
        summary, _ = run_keywords(
            args.captions, args.out, config, ratings, load_spacy(args.spacy_model), fmt=args.format, split=args.split,
            columns=column_names(args.columns), limits=FilterConfig(max_words=args.max_words),
            batch_size=args.batch_size, workers=args.workers,
            progress=not args.no_progress, limit=args.limit,
        )
    from ..records import atomic_write_text
    from .tables import print_table, table_markdown

    table = summary_table(summary, f"keywords ({args.mode}) -> {args.out}")
    print_table(console, table)  # whole rows through a pipe; and kept beside the summary's JSON
    atomic_write_text(out.with_name(out.stem + ".summary.md"), table_markdown(table))
    return 0
