"""`concrete-jungle study report`: a study's tables, intervals and verdicts, recomputed from its published files."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console


def add_parser(sub) -> None:
    p = sub.add_parser(
        "study",
        help="re-check a study from its published files (no model, no world)",
        description="`study report DIR`: rebuild every table, interval and verdict of a study from the files it "
        "published (DIR: <study out>/published, or docs/studies/<name>): design.json, world.json, recipes.json, "
        "answers.jsonl.gz, run.json. Run `concrete-jungle demo --study` to make a study.",
    )
    tasks = p.add_subparsers(dest="task", required=True, metavar="TASK")
    r = tasks.add_parser("report", help="recompute a study's report from its published files")
    r.add_argument("folder", metavar="DIR", help="a study's published folder")
    r.add_argument("--out", help="also write study.md and results.json here")
    p.set_defaults(run=run)


def run(args, console: Console) -> int:
    from rich.markdown import Markdown

    from ..experiments.published import load
    from ..experiments.study import study_report, summarise
    from ..records import atomic_write_json, atomic_write_text

    design, world_info, items, seconds = load(args.folder)
    result = summarise(design, items, seconds)
    report = study_report(result, world_info)
    console.print(Markdown(report))
    if args.out:
        atomic_write_json(Path(args.out) / "results.json", result)
        atomic_write_text(Path(args.out) / "study.md", report)
    return 0
