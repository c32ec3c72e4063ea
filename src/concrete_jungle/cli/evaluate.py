"""`concrete-jungle eval`: evaluate a model on the benchmarks, check their data, compare result files, or evaluate
several models into one leaderboard (``--models A B C ... --suite KIND``, `evaluation.leaderboard`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from ..outcomes import RESAMPLES
from .args import add_model_args, check_model_args, load_model_from_args, non_negative_int, positive_int
from .tables import print_markdown

SUITES = ("compositional", "recognition", "all")


def eval_layout() -> str:
    """The data root's layout, benchmark by benchmark, for `eval --help`."""
    from ..evaluation.names import BENCHMARKS

    width = max(map(len, BENCHMARKS)) + 2
    lines = [f"  {name:<{width}}{spec.layout}" for name, spec in BENCHMARKS.items()]
    return "\n".join(["data root layout (only the benchmarks asked for are read):", *lines,
                      "where to get each: docs/data.md"])


def add_parser(sub) -> None:
    from ..evaluation.leaderboard import FORMS
    from ..evaluation.names import BENCHMARKS

    p = sub.add_parser(
        "eval",
        help="evaluate one model or several (one leaderboard) on the compositional and recognition benchmarks",
        description="Evaluate an open_clip model or a checkpoint on the benchmarks under --data-root. Writes one "
        "JSON per benchmark and results.md to --out. --models A B C: several models, one leaderboard against the "
        "first. --check only checks the data (no model).",
        epilog=eval_layout(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--benchmarks",
                   help=f"comma-separated, from {', '.join(BENCHMARKS)}; or all: every benchmark whose data is under "
                   "--data-root (it says which it found and which not) (default sugarcrepe)")
    p.add_argument("--data-root", help="folder holding the benchmarks' data (layout below)")
    p.add_argument("--check", action="store_true",
                   help="check the data root's layout, every item of its benchmark files and every image; print the "
                   "item counts and the digest of each benchmark's files; loads no model")
    p.add_argument("--out", help="output folder (default results); one model's: results of another model there are "
                   "refused, its own are kept and reported with the new ones. With --compare: where the comparison "
                   "is written, compare-<benchmark>.json and its table as .md (default: printed only)")
    p.add_argument("--overwrite", action="store_true",
                   help="remove the results of another model from --out first (with --models: replace, too, the "
                   "leaderboard files there that it did not write)")
    p.add_argument("--skip-missing", action="store_true", help="skip items whose images are missing or unreadable")
    p.add_argument("--batch-size", type=positive_int, default=64, help="images or texts per forward pass")
    p.add_argument("--workers", type=non_negative_int, default=0, help="image-loading processes")
    p.add_argument("--cache-dir", help="cache embeddings here (by model hash and file)")
    p.add_argument("--compare", nargs="+", metavar="JSON",
                   help="compare result files of one benchmark and exit: each file against the first, with the "
                   "difference's 95 %% interval (paired bootstrap over images) and McNemar's p; results computed on "
                   "other benchmark files (another benchmark_files_sha256) are refused")
    p.add_argument("--vs", nargs="+", metavar="JSON",
                   help="with --compare A1.json A2.json ...: the runs to compare them with (e.g. the seeds of another "
                   "model); the runs are resampled within each side too")
    p.add_argument("--resamples", type=positive_int, default=RESAMPLES,
                   help="bootstrap resamples of --compare and of --models' intervals (default %(default)s)")
    p.add_argument("--compare-json", metavar="FILE", help="also write the comparison as JSON here, and its table as "
                   "Markdown beside it (FILE with the suffix .md)")
    p.add_argument("--no-trim-text", action="store_true",
                   help="encode every caption at the full context (77 tokens) instead of the batch's longest caption; "
                   "the features are the same either way (docs/method.md §7)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_model_args(p)
    p.add_argument("--models", nargs="+", metavar="MODEL",
                   help="evaluate several models and write one leaderboard (models x benchmarks, each cell with the "
                   "difference from the first model and its 95 %% interval, the summary means) to --out as "
                   "leaderboard.md, .json, .png and .html (a page to sort and drill into), each model's results "
                   "in its own folder there; a rerun evaluates only what is not complete. Each MODEL: " + FORMS)
    p.add_argument("--suite", choices=SUITES,
                   help="instead of --benchmarks: every benchmark of this kind (all: of both) whose data is under "
                   "--data-root (it says which it found and which not)")
    p.set_defaults(run=run)


def run(args, console: Console) -> int:
    from .. import evaluation
    from ..evaluation.report import compare, compare_markdown, layout_report, markdown

    if args.vs and not args.compare:
        raise ValueError("--vs needs --compare: concrete-jungle eval --compare A1.json A2.json --vs B1.json B2.json")
    models = check_models(args)  # --models: every model named, checked before any data or model loads
    if args.compare:
        if len(args.compare) + len(args.vs or []) < 2:
            raise ValueError(f"--compare needs two or more result files, it got one ({args.compare[0]}): "
                             "concrete-jungle eval --compare A.json B.json [C.json ...], or --compare A.json "
                             "--vs B.json")
        if args.compare_json and Path(args.compare_json).suffix == ".md":
            raise ValueError(f"--compare-json {args.compare_json}: give the JSON a name ending in .json; its table is "
                             "written beside it with the suffix .md")
        comparison = compare(args.compare, args.vs, resamples=args.resamples)
        table = compare_markdown(comparison)
        print_markdown(console, table)
        if len(set(comparison["rules"].values())) > 1:  # also said in the table's notes; here where logs look
            import sys

            print(f"warning: the files were scored under different versions of the {comparison['benchmark']} rule "
                  f"({', '.join(f'{n}: {v}' for n, v in comparison['rules'].items())}); see the note under the "
                  "table", file=sys.stderr)
        written = [Path(args.compare_json)] if args.compare_json else []
        if args.out:  # the table kept beside its JSON, named by the benchmark: comparisons of several share a folder
            written.append(Path(args.out) / f"compare-{comparison['benchmark']}.json")
        from ..records import atomic_write_json, atomic_write_text

        for path in written:
            atomic_write_json(path, comparison)
            atomic_write_text(path.with_suffix(".md"), table)
        return 0
    if not args.data_root:
        raise ValueError("concrete-jungle eval needs --data-root (or --compare A.json B.json)")
    root = Path(args.data_root)
    if not root.is_dir():
        raise ValueError(f"--data-root {root} does not exist; it is the folder holding sugarcrepe/, coco/, ... "
                         "(see concrete-jungle eval --help and docs/data.md)")
    if args.suite and args.benchmarks:
        raise ValueError(f"--suite {args.suite} and --benchmarks {args.benchmarks} both choose the benchmarks: give "
                         "one")
    names = [n.strip() for n in (args.benchmarks or "sugarcrepe").split(",") if n.strip()]
    if args.suite:
        names = benchmarks_present(root, console, args.suite, f"--suite {args.suite}")
    elif names == ["all"]:
        names = benchmarks_present(root, console)
    unknown = sorted(set(names) - set(evaluation.BENCHMARKS))
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; choose from {', '.join(evaluation.BENCHMARKS)}, or all "
                         "(alone: every benchmark whose data is under --data-root)")
    if not args.check and models is None:
        check_model_args(args)
    # every benchmark's files are checked before the model is loaded
    loaded = {n: evaluation.load_data(n, root, args.skip_missing) for n in names}
    if args.check:
        print_markdown(console, layout_report(loaded))
        return 0
    args.out = args.out or "results"
    from ..files.outputs import output_folder

    output_folder(args.out)  # a file there is refused before any model loads
    if models is not None:
        return run_models(args, models, loaded, console)
    from ..evaluation.encoding import Encoder

    clip, device = load_model_from_args(args)
    encoder = Encoder(clip, device=device, batch_size=args.batch_size, num_workers=args.workers,
                      trim_text=not args.no_trim_text,
                      cache_dir=args.cache_dir, progress=not args.no_progress)
    from ..files.locks import locked

    with locked(Path(args.out) / ".eval.lock", f"--out {args.out}", "concrete-jungle eval"):
        results = evaluation.run(encoder, names, loaded, out=args.out, overwrite=args.overwrite)
    print_markdown(console, markdown(results))
    console.print(f"written: {Path(args.out) / 'results.md'} and one JSON per benchmark in {args.out}", highlight=False)
    return 0


def benchmarks_present(root: Path, console: Console, kind: str = "all", flag: str = "--benchmarks all") -> list[str]:
    """The benchmarks of ``kind`` (``all``: of every kind) whose data is under ``root``, said with those of that kind
    that are not there (``--benchmarks all``, ``--suite KIND``)."""
    from ..evaluation import BENCHMARKS, present

    found = {n: there for n, there in present(root).items() if kind == "all" or BENCHMARKS[n].kind == kind}
    names = [n for n, there in found.items() if there]
    expected = {n: " or ".join(BENCHMARKS[n].markers) for n in found}
    if not names:
        raise ValueError(f"{flag}: no {'' if kind == 'all' else kind + ' '}benchmark's data is under --data-root "
                         f"{root} (none of {'; '.join(expected.values())} is there); see the layout in "
                         "concrete-jungle eval --help and docs/data.md")
    absent = [f"{n} (no {expected[n]})" for n, there in found.items() if not there]
    console.print(f"{flag}: found under {root}: {', '.join(names)}; not found: {', '.join(absent) or 'none'}",
                  highlight=False)
    built = "; ".join(f"{n} from {' and '.join(found[n])}" for n in names)
    console.print(f"{flag}: built from {built}", highlight=False)
    return names


def check_models(args) -> list | None:
    """The entries of ``--models`` (`leaderboard.entries`), each checked as far as it can be without loading it
    (`models.check_model`: its weights there, its config loadable) before any data or model loads; None without."""
    if not args.models:
        return None
    from ..evaluation.leaderboard import entries
    from ..models import check_model

    given = [flag for flag, value in (("--model", args.model), ("--checkpoint", args.checkpoint)) if value]
    if given or args.compare:
        raise ValueError(f"--models names every model; drop {' and '.join(given) or '--compare'} (the first of "
                         "--models is the reference)")
    models = entries(args.models, args.pretrained)
    for entry in models:
        check_model(entry.name, entry.pretrained, entry.checkpoint)
    return models


def run_models(args, models: list, loaded: dict, console: Console) -> int:
    """Evaluate each model of ``models`` where its results are not complete, then write and print the leaderboard."""
    import torch

    from ..evaluation.encoding import Encoder
    from ..evaluation.leaderboard import OUTPUTS, evaluate_models, table, write
    from ..files.locks import locked
    from ..files.outputs import claim, written
    from ..models import load_model

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")

    def encoder_of(entry):
        clip = load_model(entry.name, entry.pretrained, entry.checkpoint, device=device, precision=args.precision,
                          seed=args.seed)
        return Encoder(clip, device=device, batch_size=args.batch_size, num_workers=args.workers,
                       trim_text=not args.no_trim_text, cache_dir=args.cache_dir, progress=not args.no_progress)

    out = claim(args.out, OUTPUTS, "eval --models", args.overwrite)  # before any model is evaluated
    with locked(out / ".eval.lock", f"--out {out}", "concrete-jungle eval --models"):
        results = evaluate_models(models, loaded, out, encoder_of, overwrite=args.overwrite,
                                  log=lambda text: console.print(text, highlight=False))
        text = write(table(models, results, resamples=args.resamples), out)
        written(out, OUTPUTS)
    print_markdown(console, text)
    console.print(f"written: {out / 'leaderboard.md'}, leaderboard.json, leaderboard.png and leaderboard.html (the "
                  f"page: sort, raw or chance-normalised, subsets); each model's results in its folder under {out}",
                  highlight=False)
    return 0
