"""`concrete-jungle demo`: the whole method offline on the toy world, or (--study) the pre-registered study."""

from __future__ import annotations

from rich.console import Console

from .args import int_list, positive_int
from .study import add_preregistration_flag


def add_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="the whole method offline on a CPU: toy world, ConcreteBatch, Cement fine-tuning, evaluation, report",
        description="Render a toy world, pretrain a tiny CLIP, make D_hc/D_lc/D_wo with ConcretePlant, fine-tune "
        "with InfoNCE, static margin and Cement (and a control without negatives), evaluate, and write "
        "<out>/report.md. Finished stages are reused.",
    )
    p.add_argument("--quick", action="store_true",
                   help="a smaller world, fewer steps, one seed (run times of each: README, `demo`)")
    p.add_argument("--study", action="store_true",
                   help="the pre-registered, powered experiment instead (docs/studies/study1.md); "
                        "writes <out>/study.md")
    add_preregistration_flag(p)  # --study: the study's check of its design, as `study run study1`
    p.add_argument("--profile", choices=["cpu", "gpu"], default="cpu",
                   help="--study's size: cpu (default) or gpu (a larger world and model, N up to 1024, one GPU)")
    p.add_argument("--out", help="output directory (default runs/demo, or runs/study with --study)")
    p.add_argument("--seeds", type=int_list, help="fine-tuning seeds, comma-separated (default 0,1,2; --quick: 0)")
    p.add_argument("--pretrain-steps", type=positive_int, help="baseline pretraining steps (default 250; --quick: 120)")
    p.add_argument("--finetune-steps", type=positive_int, help="steps of each fine-tune (default 40; --quick: 25)")
    p.add_argument("--threads", type=positive_int, help="torch threads (default: torch's, one per core); on a "
                   "busy machine fewer can be faster (docs/benchmarks.md, \"The demo's wall time\")")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(run=run)


def run(args, console: Console) -> int:
    from ..files.outputs import output_folder

    if args.out:
        output_folder(args.out)  # a file there: one line naming it, before any work
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.study:
        return run_study(args, console)
    if args.not_preregistered:
        raise ValueError("--not-preregistered applies to --study only (the demo is no pre-registered study); drop it")
    from ..experiments.demo import QUICK, Demo, DemoConfig, positive_control_finding
    from ..experiments.report import rich_table

    args.out = args.out or "runs/demo"

    options = dict(QUICK) if args.quick else {}
    if args.seeds:
        options["seeds"] = args.seeds
    for name in ("pretrain_steps", "finetune_steps"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    result = Demo(DemoConfig(out=args.out, **options), progress=not args.no_progress, console=console).run()
    # the instrument first: whether the testbed registers negatives that teach, before the rows it measures
    console.print(positive_control_finding(result["positive_control"]), highlight=False)
    Console(width=max(console.width, 150)).print(rich_table(result["table"]))  # whole rows in a log file too
    console.print("What it shows:", highlight=False)
    for finding in result["findings"]:
        console.print(f"- {finding}", highlight=False)
    console.print(f"report: {args.out}/report.md", highlight=False)
    return 0


def run_study(args, console: Console) -> int:
    if args.quick or args.pretrain_steps or args.finetune_steps:
        raise ValueError("--study takes its settings from its design (docs/studies/study1.md); use --profile, --seeds, "
                         "--out")
    from .study import run_study as run_named_study

    args.name = "study1"
    return run_named_study(args, console)
