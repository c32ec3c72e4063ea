"""`concrete-jungle study run study3`: the paper's question on the gated testbed (design: docs/studies/study3.md).

Do hard negatives planted by concreteness teach the subsets their edits make, and does Cement's adaptive margin add
to InfoNCE and to NegCLIP's loss there? Rows: the control (D_hc's anchors, every negative masked) and each of D_hc,
D_lc and D_wo with each of InfoNCE, Cement and NegCLIP's loss, every seed, every fine-tune from one baseline with
the same batches per seed.

The runner refuses to start unless gate 2's published folder, rebuilt as `study report` does, says gate 2 passes,
and while any of the design's requirements is missing. Before the world is built it times each kind of step on a
small world of another seed and projects the run; a projection over the profile's budget does not start. Before any
fine-tune it measures N* (InfoNCE's hard-negative gradient share on the baseline's features of D_hc, as Study 1) and
the planted sets' shares of entailed negatives, which decide the N factor (the gpu profile) and the entailment
factor's rows. `study3_result.summarise` computes the result from the published files alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..concretebatch import iter_records
from ..records import atomic_write_json, read_jsonl
from ..toyworld.attributes import ATTRIBUTE_SUBSETS
from ..toyworld.build import SUBSETS, WorldConfig
from .gate import publish_result, read_study_design
from .gate2 import TIMING_STEPS, TIMING_WORLD, check_model, projected_words, step_seconds, timed_stages, torch_threads
from .published import PublishedError
from .stages import BASELINE, StageConfig, Stages, log, stage_dir
from .study import Study, choose_batch_size
from .study3_result import LOSSES, rows, study_report, summarise, test_items

DESIGN = "docs/studies/study3/design.json"
DESIGN_SECTION = ("docs/studies/study3.md", "## Pre-registration")  # committed with the design file
GATE2 = "docs/studies/gate2"  # gate 2's published folder: Study 3 runs only if its result passes
KEYS = ("world", "data", "model", "pretrain", "finetune", "batch_size", "entailment_factor", "matched_outcome",
        "hypotheses", "primary", "decision", "seeds", "bootstrap", "budget", "requires", "secondary")
PROFILES = ("cpu", "gpu")
N_STAR_CANDIDATES = (128, 256, 512, 1024)
SHARE_PAIRS, SHARE_BATCHES = 2048, 16  # D_hc pairs and random batches of the gradient share, as Study 1


class Study3DesignError(ValueError):
    """A Study 3 design that cannot be run as written, or a start its design does not allow."""


@dataclass(frozen=True)
class Study3Config:
    out: str = "runs/study3"
    design: str = DESIGN  # the pre-registered design, read by the runner and published unchanged
    profile: str = "cpu"  # cpu: N = 64 only; gpu: every row at N = 64 and at N*
    gate2: str = GATE2


def read_design(path: str | Path) -> dict:
    """Study 3's design, checked for what the runner needs; an error naming the file and the fix."""
    from ..train.config import LossConfig

    design = read_study_design(path, "study3", KEYS, DESIGN, Study3DesignError)
    check_model(path, design, Study3DesignError)
    problems = []
    if design["world"]["test_subsets"] != list(SUBSETS + ATTRIBUTE_SUBSETS):
        problems.append(f"world.test_subsets must be {', '.join(SUBSETS + ATTRIBUTE_SUBSETS)} (the world with "
                        "attribute_subsets)")
    if set(design["finetune"]["losses"]) != set(LOSSES):
        problems.append(f"finetune.losses must be {', '.join(LOSSES)}")
    for loss, settings in design["finetune"]["losses"].items():
        if loss not in LOSSES or LossConfig(name=loss, **settings) != LossConfig(name=loss):
            problems.append(f"finetune.losses.{loss} {settings} is not one of {', '.join(LOSSES)} with the "
                            "defaults the stages train with")
    n_star = design["batch_size"]["n_star"]
    if ", ".join(map(str, N_STAR_CANDIDATES)) not in n_star or "2,048 pairs, 16 batches" not in n_star:
        problems.append(f"batch_size.n_star does not name the candidates {N_STAR_CANDIDATES} and the 2,048 pairs, 16 "
                        "batches the runner measures")
    if set(design["budget"]) - {"step_time_measured_first"} != set(PROFILES):
        problems.append(f"budget must hold one budget per profile ({', '.join(PROFILES)})")
    if problems:
        raise Study3DesignError(f"{path}: " + "; ".join(problems) + "; write the design as it will run")
    return design


def check_requirements(design: dict) -> None:
    """The design's requirements (the world's attribute subsets, ``mask_entailed`` in its losses, the viewer's
    entailment, each planted record's edit kind) and the names the design uses: refused while any is missing,
    naming each (`study3_requirements`)."""
    from .study3_requirements import check_study3_requirements

    check_study3_requirements(design)


def check_gate2(folder: str | Path) -> list[str]:
    """Gate 2's result rebuilt from its published folder as `study report` does; the controls that passed, or the
    refusal when it does not pass."""
    from . import gate2
    from .published import load

    try:
        design, _, items, seconds = load(folder)
        if design.get("study") != "gate2":
            raise PublishedError(f"{folder} is the published folder of {design.get('study') or 'another study'}")
        gate2.check_answers(folder, design, items)
        result = gate2.summarise(design, items, seconds)
    except PublishedError as e:
        raise Study3DesignError(f"gate 2's published folder cannot be rebuilt ({e}); run from the repository root, "
                                f"which holds {GATE2}: Study 3 runs only if gate 2 passes") from None
    if not result["gated"]:
        raise Study3DesignError(f"gate 2's published result in {folder} does not pass: Study 3 runs only if gate 2 "
                                "passes (its design's runs_only_if)")
    return result["passed"]


def world_settings(design: dict) -> dict:
    """The design's world as `WorldConfig` takes it: the ten test subsets are the world with attribute subsets."""
    return {k: v for k, v in design["world"].items() if k != "test_subsets"} | {"attribute_subsets": True}


class Study3(Study):
    def __init__(self, config: Study3Config, progress: bool = True, console=None, preregistration: dict | None = None):
        if config.profile not in PROFILES:
            raise Study3DesignError(f"profile {config.profile!r} is not one of {', '.join(PROFILES)}")
        self.keep(config, progress, console, preregistration)
        self.design = read_design(config.design)
        check_requirements(self.design)
        self.gate2_passed = check_gate2(config.gate2)
        self.budget_seconds = budget_seconds(self.design, config.profile)

    def stages(self, world: dict, out: Path, pretrain_steps: int) -> Stages:
        d = self.design
        return Stages(StageConfig(out=str(out), world=WorldConfig(**world), model=d["model"]["model"],
                                  batch_size=d["pretrain"]["batch_size"], pretrain_steps=pretrain_steps,
                                  pretrain_lr=d["pretrain"]["lr"], finetune_lr=d["finetune"]["lr"],
                                  seeds=tuple(d["seeds"]), no_leak=True, entailment=True),
                      progress=self.progress, console=self.console)

    def plant(self, stages: Stages, world: Path) -> dict[str, Path]:
        return {mode: stages.plant(world, mode) for mode in self.design["data"]["modes"]}

    def project(self) -> dict:
        """Each kind of step timed on a small world of another seed at the design's first N, and the run of the rows
        every profile runs projected from it (seconds; `projected` adds the rows the run decides later)."""
        d = self.design
        timing_world = world_settings(d) | TIMING_WORLD | {"seed": d["world"]["seed"] + 1000}
        d_timing = stage_dir(self.out, "timing", {"world": timing_world, "steps": TIMING_STEPS})
        if (d_timing / "projection.json").is_file():
            return json.loads((d_timing / "projection.json").read_text())
        stages = self.stages(timing_world, d_timing, TIMING_STEPS)
        timed = timed_stages(stages, lambda world: self.plant(stages, world),
                             [(kind, row.mode, row, n) for kind, (row, n) in kinds(d).items()], d["seeds"][0])
        step = timed["step_seconds"]
        w = d["world"]
        parts = {"world": timed["world"] * (w["train"] + w["test"]) / (timing_world["train"] + timing_world["test"]),
                 "plants": timed["datasets"] * w["train"] / timing_world["train"],
                 "pretrain": step["pretrain"] * d["model"]["pretrain_steps"]}
        projection = {"step_seconds": step, "parts_seconds": parts, "timed_batch_size": d["batch_size"]["cpu"][0],
                      "evaluation_seconds": timed["evaluation"] * w["test"] / timing_world["test"],
                      "timing_world": timing_world,
                      "timing_steps": TIMING_STEPS, "torch_threads": torch_threads()}
        parts["finetunes and evaluations"] = sum(row_seconds(projection, d, row, n) for _, row, n in rows(d, BASE))
        projection["seconds"] = sum(parts.values())
        atomic_write_json(d_timing / "projection.json", projection)
        return projection

    def time_steps(self, stages: Stages, baseline: Path, data: dict[str, Path], n: int) -> dict[str, float]:
        """The seconds of a step of each kind at batch size ``n``, timed on the study's own D_hc from its baseline
        (no such step can be timed before the baseline exists), ``TIMING_STEPS`` steps each; never compared."""
        return {kind: step_seconds(stages.finetune(baseline, data[row.mode], row, self.design["seeds"][0],
                                                   batch_size=n, steps=TIMING_STEPS))
                for kind, (row, _) in kinds(self.design).items()}

    def datasets_info(self, data: dict[str, Path]) -> dict:
        """Each planted set's kept records, records per edit kind and entailed negatives; refused if the viewer left
        a negative undecided (the entailment factor needs every one decided)."""
        from ..analysis.entailed import entailed_shares
        from ..toyworld.edit_kinds import edit_kind_counts

        info = {}
        for mode, path in data.items():
            records = [(r["meta"], [n["image"] is None for n in r["negatives"]]) for r in iter_records(path)]
            shares = entailed_shares([meta for meta, _ in records])["all"]
            if shares["unknown"] or not shares["negatives"]:
                raise Study3DesignError(f"{path}: {shares['unknown']} of {shares['negatives']} planted negatives have "
                                        "no anchor_true_of_negative; plant with the viewer's entailment "
                                        "(plant --entailment) before Study 3")
            info[mode] = {"records": json.loads((path / "summary.json").read_text())["ok"],
                          "edit_kinds": edit_kind_counts(path), "entailed": shares,
                          "negatives_without_picture": sum(sum(blank) for _, blank in records)}
        return info

    def run(self) -> dict:
        d = self.design
        self.start_clock()
        self.stage(f"[1/5] gate 2 passes (control {' and '.join(self.gate2_passed)}); timing {TIMING_STEPS} steps "
                   "of each kind on a small world of another seed, and projecting the run")
        projection = self.project()
        self.stage(projected_words(projection, f"{self.budget_seconds / 60:.0f} min ({self.c.profile} profile)"))
        check_budget(projection["seconds"], self.budget_seconds, self.c.profile,
                     f"{self.out}/timing-*/projection.json, {projection['torch_threads']} torch thread(s): it does "
                     "not start; step times measured on a loaded machine overstate the run, so remove that folder "
                     "to time again on an idle one")
        self.stage("[2/5] rendering the world (ten test subsets), the baseline, ConcretePlant: "
                   + ", ".join(f"D_{m}" for m in d["data"]["modes"]) + " (the viewer decides each negative's "
                   "anchor_true_of_negative)")
        stages = self.stages(world_settings(d), self.out, d["model"]["pretrain_steps"])
        world = stages.world()
        world_info = json.loads((world / "world.json").read_text())
        lacking = [s for s in d["world"]["test_subsets"] if s not in test_items(world_info)]
        if lacking:
            raise Study3DesignError(f"{world}: the world has no test subset {', '.join(lacking)}; the design's ten "
                                    "need WorldConfig(attribute_subsets=True)")
        baseline = stages.baseline(world)
        data = self.plant(stages, world)
        datasets = self.datasets_info(data)
        self.stage("[3/5] measuring N* and the planted sets' entailed shares (the N and entailment factors)")
        hc = datasets[d["data"]["modes"][0]]["records"]
        n_star = choose_batch_size(stages, baseline, data["hc"], SHARE_PAIRS, N_STAR_CANDIDATES,
                                   d["batch_size"]["share_threshold"], SHARE_BATCHES) | {
            "pairs": min(SHARE_PAIRS, hc), "batches": SHARE_BATCHES, "candidates": list(N_STAR_CANDIDATES)}
        if n_star["n"] is not None and "n_star" in d["batch_size"][self.c.profile]:
            projection = projection | {"step_seconds_at": {str(n_star["n"]): self.time_steps(
                stages, baseline, data, n_star["n"])}}
        world_info |= {"profile": self.c.profile, "gate2": {"folder": self.c.gate2, "passed": self.gate2_passed},
                       "datasets": datasets, "n_star": n_star, "projection": projection}
        world_info = decide_factors(d, self.c.profile, world_info, projection)
        planned = rows(d, world_info)
        log(f"    N* = {n_star['n']}; entailment factor: {world_info['entailment_factor']}", self.console)
        self.stage(f"[4/5] {len(planned)} rows x {len(d['seeds'])} seeds from one baseline (nothing is compared "
                   "before the last)")
        runs = {(BASELINE, None): baseline}
        for seed in d["seeds"]:
            for label, row, n in planned:
                runs[(label, seed)] = stages.finetune(baseline, data[row.mode], row, seed, batch_size=n,
                                                      steps=d["finetune"]["steps"])
                self.lap()
        items, curves = {}, {}
        test = stages.test_data(world, "test")
        for key, checkpoint in runs.items():
            items[key] = stages.evaluate(checkpoint, test, name="study3_outcomes.json", per_item=True, blind=True)
            curves[key] = [r for r in read_jsonl(checkpoint.parent.parent / "metrics.jsonl") if "loss" in r]
            self.lap()
        self.stage("[5/5] publishing the answers and Study 3's result")
        world_info = json.loads(json.dumps(world_info, sort_keys=True))  # as world.json holds it: one report
        return publish_result(self, world_info, items, curves,
                              lambda design, answers, seconds: summarise(design, answers, seconds, world_info),
                              study_report, Study3DesignError)


# the rows every profile runs, as `rows` reads them before the run decides its factors
BASE = {"profile": "cpu", "entailment_factor": {"sets": [], "runs": False}}


def step_kind(row) -> str:
    """What a step's time depends on: the loss, or the control's (no negatives)."""
    return row.loss if row.negatives else "control"


def kinds(design: dict) -> dict:
    """Each kind of step (`step_kind`) with a row of it and the batch size every profile runs it at."""
    return {step_kind(row): (row, n) for _, row, n in rows(design, BASE)}


def row_seconds(projection: dict, design: dict, row, n: int) -> float:
    """A row's projected seconds over every seed: its kind's step timed at N (the small world's at the design's
    first N; at N*, the study's own: `Study3.time_steps`; else the first N's scaled by N), and its evaluations."""
    timed = projection.get("step_seconds_at", {}).get(str(n))
    step = timed[step_kind(row)] if timed else \
        projection["step_seconds"][step_kind(row)] * n / projection["timed_batch_size"]
    return len(design["seeds"]) * (step * design["finetune"]["steps"] + projection["evaluation_seconds"])


def budget_seconds(design: dict, profile: str) -> float:
    return 60 * design["budget"][profile]["minutes"]


def check_budget(seconds: float, budget: float, profile: str, where: str) -> None:
    """Refuse a projection over the profile's budget (``where``: what it is from, and what does not start)."""
    if seconds > budget:
        raise Study3DesignError(f"the run is projected to take {seconds / 60:.0f} min, over the {profile} profile's "
                                f"budget of {budget / 60:.0f} min ({where}); a changed design is a new design, "
                                "registered before it runs")


def projected(design: dict, projection: dict, world_info: dict) -> float:
    """The whole run's projected seconds with the rows ``world_info`` decides (N*, the entailment factor)."""
    fixed = projection["seconds"] - projection["parts_seconds"]["finetunes and evaluations"]
    return fixed + sum(row_seconds(projection, design, row, n) for _, row, n in rows(design, world_info))


def decide_factors(design: dict, profile: str, world_info: dict, projection: dict) -> dict:
    """``world_info`` with the entailment factor decided (the planted sets whose share of entailed negatives exceeds
    the design's; on the cpu profile their rows do not run if they push the projection over its budget, and the
    reason is kept) and the projection of the rows so decided; refused when that is over the budget."""
    share, budget = design["entailment_factor"]["share_above"], budget_seconds(design, profile)
    sets = [m for m, info in world_info["datasets"].items() if info["entailed"]["share_true"] > share]
    info = world_info | {"entailment_factor": {"sets": sets, "runs": bool(sets)}}
    total = projected(design, projection, info)
    if sets and profile == "cpu" and total > budget:
        info["entailment_factor"] = {"sets": sets, "runs": False, "why": (
            f"with them the cpu profile's projection is {total / 60:.0f} min, over its budget of {budget / 60:.0f} "
            "min (the gpu profile runs them)")}
        total = projected(design, projection, info)
    check_budget(total, budget, profile, f"with N* = {info['n_star']['n']} and the entailment factor decided; no "
                 "fine-tune starts")
    return info | {"projected_seconds": total}
