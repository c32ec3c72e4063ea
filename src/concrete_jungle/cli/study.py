"""`concrete-jungle study`: run a pre-registered toy-world study (`run`), or recompute a study's tables,
intervals and verdicts from its published files alone (`report`)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from .args import int_list, positive_int


def add_parser(sub) -> None:
    p = sub.add_parser(
        "study",
        help="run a pre-registered toy-world study, or re-check one from its published files",
        description="`study run study2`: the second pre-registered study (docs/studies/study2.md); "
        "`study run study1` is `demo --study`. A stopped run resumes where it stopped, row by row. "
        "`study report DIR`: rebuild every table, interval and verdict of a study from the files it published "
        "(DIR: <study out>/published, or docs/studies/<name>): design.json, world.json, recipes.json, "
        "answers.jsonl.gz, run.json (each start's code) and curves.jsonl.gz (the training curves; absent from older "
        "folders), checked against the sha256 each has in digests.json; no model, no world. `study run` refuses to "
        "start unless the study's design (its design file, and its section of docs/studies/<name>.md) is committed and "
        "the package's source is clean; --not-preregistered starts it anyway, recorded as not pre-registered.",
    )
    tasks = p.add_subparsers(dest="task", required=True, metavar="TASK")
    r = tasks.add_parser("run", help="run a study (its settings are its design's)")
    r.add_argument("name", choices=["study1", "study2", "gate", "gate2", "study3"],
                   help="which study (gate: docs/studies/gate.md; gate2: docs/studies/gate2.md; study3: "
                   "docs/studies/study3.md)")
    r.add_argument("--profile", choices=["cpu", "gpu"], default="cpu",
                   help="cpu (default: 2 cores) or gpu (study1, study2: a larger world and model, one GPU; study3: "
                   "every row at N* too)")
    r.add_argument("--out", help="output directory (default runs/<name>)")
    r.add_argument("--seeds", type=int_list, help="fine-tuning seeds, comma-separated (default 0,1,2)")
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    r.add_argument("--design", help="gate, gate2 and study3 only: the pre-registered design file (default "
                   "docs/studies/<name>/design.json)")
    r.add_argument("--threads", type=positive_int, help="torch threads (default: torch's, one per core); recorded "
                   "with the run where it is timed (gate2)")
    add_preregistration_flag(r)
    r = tasks.add_parser("report", help="recompute a study's report from its published files")
    r.add_argument("folder", metavar="DIR", help="a study's published folder")
    r.add_argument("--out", help="also write study.md and results.json here")
    p.set_defaults(run=run)


def add_preregistration_flag(parser) -> None:
    parser.add_argument("--not-preregistered", action="store_true",
                        help="start even though the design file, its docs section or the package's source is not "
                             "committed; the run, run.json and every report then say \"not pre-registered\"")


def preregistration(args, module, design_files: list[Path], settings) -> dict:
    """This start's check of the study's design (`experiments.preregistration`): refused unless the design and its
    docs section are committed and the package's source is clean; with --not-preregistered, what it found.
    ``settings``: the run's configuration, resolved from the design (a profile, the seeds), in its digest."""
    from dataclasses import asdict

    from ..experiments import preregistration as prereg
    from ..experiments.stages import PACKAGE

    page, heading = module.DESIGN_SECTION
    check = prereg.waive if getattr(args, "not_preregistered", False) else prereg.check
    return check(design_files, PACKAGE.parents[1] / page, heading,
                 settings={k: v for k, v in asdict(settings).items() if k != "out"})


def run(args, console: Console) -> int:
    return run_study(args, console) if args.task == "run" else report(args, console)


def run_study(args, console: Console) -> int:
    from ..experiments import study, study2

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.name in ("gate", "gate2"):
        return run_gate(args, console)
    if args.name == "study3":
        return run_study3(args, console)
    module, config, runner = (study, study.StudyConfig, study.Study) if args.name == "study1" else \
        (study2, study2.Study2Config, study2.Study2)
    options = dict(module.PROFILES[args.profile]) | ({"seeds": args.seeds} if args.seeds else {})
    out = args.out or f"runs/{args.name}"
    settings = config(out=out, **options)
    checked = preregistration(args, module, [Path(module.__file__)], settings)  # the design: the module's settings
    result = runner(settings, progress=not args.no_progress, console=console, preregistration=checked).run()
    for h in result.get("primary", result.get("hypotheses", [])):
        console.print(f"{h['name']}: {h['claim']}: {h['estimate']:+.2f} points, 95 % interval "
                      f"[{h['ci95'][0]:+.2f}, {h['ci95'][1]:+.2f}] -> {h['verdict']}", highlight=False)
    console.print(f"report: {out}/study.md", highlight=False)
    return 0


def run_gate(args, console: Console) -> int:
    from ..experiments import gate, gate2

    if args.profile != "cpu" or args.seeds:
        console.print(f"study run {args.name}: the seeds and the sizes are its pre-registered design's "
                      "(--design FILE); --profile gpu and --seeds do not apply", highlight=False)
        return 2
    module, config, runner = (gate, gate.GateConfig, gate.Gate) if args.name == "gate" else \
        (gate2, gate2.Gate2Config, gate2.Gate2)
    out = args.out or f"runs/{args.name}"
    config = config(out=out, **({"design": args.design} if args.design else {}))
    checked = preregistration(args, module, [Path(config.design)], config)
    result = runner(config, progress=not args.no_progress, console=console, preregistration=checked).run()
    if module is gate2:
        for c in result["controls"]:
            console.print(f"control {c['control']}: " + ("no matched subset" if c["mean"] is None else
                          f"positive control - control {c['mean']:+.2f} points, seed-level "
                          f"{100 * result['design']['margin']['confidence']:.1f} % interval [{c['t_interval'][0]:+.2f},"
                          f" {c['t_interval'][1]:+.2f}]") + f" -> {'passes' if c['passes'] else 'does not pass'}",
                          highlight=False)
        console.print(f"gate 2 {'passes' if result['gated'] else 'does not pass'}; report: {out}/study.md",
                      highlight=False)
        return 0
    for r in result["rungs"]:
        console.print(f"{r['rung']} ({r['model']}, {r['pretrain_steps']} pretraining steps): positive control - "
                      f"control {r['mean']:+.2f} points, seed-level 95 % interval [{r['t95'][0]:+.2f}, "
                      f"{r['t95'][1]:+.2f}] -> {'passes' if r['passes'] else 'does not pass'}", highlight=False)
    console.print(f"gated model: {result['gated'] or 'none'}; report: {out}/study.md", highlight=False)
    return 0


def run_study3(args, console: Console) -> int:
    from ..experiments import study3

    if args.seeds:
        console.print("study run study3: the seeds are its pre-registered design's (--design FILE); --seeds does not "
                      "apply", highlight=False)
        return 2
    out = args.out or "runs/study3"
    config = study3.Study3Config(out=out, profile=args.profile, **({"design": args.design} if args.design else {}))
    checked = preregistration(args, study3, [Path(config.design)], config)
    result = study3.Study3(config, progress=not args.no_progress, console=console, preregistration=checked).run()
    for h in result["primary"]:
        console.print(f"{h['name']}: {h['claim']}: " + ("no matched subset" if h["estimate"] is None else
                      f"{h['estimate']:+.2f} points of its matched outcome, p {h['p']:.4f}, Holm p "
                      f"{h['p_holm']:.4f}") + f" -> {h['verdict']}", highlight=False)
    console.print(f"report: {out}/study.md", highlight=False)
    return 0


def report(args, console: Console) -> int:
    from ..experiments import gate, gate2, study, study2, study3_result
    from ..experiments.published import RESTORE, PublishedError, check_rows, load, run_record
    from ..records import atomic_write_json, atomic_write_text

    design, world_info, items, seconds = load(args.folder)
    module = {"study2": study2, "gate": gate, "gate2": gate2, "study3": study3_result}.get(design.get("study"), study)
    try:
        if module is study3_result:
            module.check_answers(args.folder, design, items, world_info)
            result = module.summarise(design, items, seconds, world_info)
        else:
            if module in (gate, gate2):
                module.check_answers(args.folder, design, items)
            else:
                check_rows(args.folder, items, module.CONTRASTED, design["config"]["seeds"])
            result = module.summarise(design, items, seconds)
        text = module.study_report(result, world_info, run_record(args.folder))
    except KeyError as e:  # the answers were checked whole: what is missing is a setting of the design
        raise PublishedError(f"{Path(args.folder) / 'design.json'} has no {e} (not a design a study of this version "
                             f"wrote); {RESTORE}") from None
    from .tables import print_markdown

    print_markdown(console, text)
    if args.out:
        atomic_write_json(Path(args.out) / "results.json", result)
        atomic_write_text(Path(args.out) / "study.md", text)
    return 0
