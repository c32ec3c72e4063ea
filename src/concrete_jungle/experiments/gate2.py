"""`concrete-jungle study run gate2`: can the toy world register a method that works, with true negatives?
(design: docs/studies/gate2.md)

Two positive controls, each against the same records with every negative masked (same seeds, same batches): A, the
test generator's swap_att and swap_obj pairs on training scenes, every pair whose anchor caption reads true of its
negative picture dropped; B, all seven edit kinds, such negatives kept and masked by the loss (``mask_entailed``).
Each control's outcome is the mean of the subsets its edits make that the text alone cannot solve: a subset whose
blind score (every test picture replaced by the test's mean picture), averaged over an arm's seeds, exceeds chance +
10 points in either arm leaves the outcome. A control passes when its per-seed difference has a mean of at least the
design's margin and a seed-level t interval above 0; the setup is gated when either passes.

Before the world is built the runner times each kind of step on a small world of another seed and projects the
whole run; a projection over the design's budget does not start. `summarise` computes the result from the design and
the answers alone, so `concrete-jungle study report` rebuilds it from the published files.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from ..records import atomic_write_json, read_jsonl
from ..toyworld.build import WorldConfig
from .gate import build_pairs, publish_result, read_study_design, seed_interval, t_quantile
from .published import RESTORE, PublishedError, counts_all_starts, starts_words, wall_time_words
from .report import results_table, signed, table_markdown
from .stages import BLIND, Finetune, StageConfig, Stages, stage_dir
from .study import Study

DESIGN = "docs/studies/gate2/design.json"
DESIGN_SECTION = ("docs/studies/gate2.md", "## Pre-registration")  # committed with the design file (`preregistration`)
BASELINE = "CLIP baseline"
KEYS = ("world", "controls", "model", "pretrain", "finetune", "seeds", "margin", "matched_outcome", "bootstrap",
        "budget")
TIMING_STEPS = 20  # steps of each kind the runner times before the world is built
TIMING_WORLD = {"train": 256, "test": 64}  # the timing world's size; its seed is the design's + 1000


class Gate2DesignError(ValueError):
    """A gate 2 design file that cannot be run as written, or a run its budget does not allow."""


@dataclass(frozen=True)
class Gate2Config:
    out: str = "runs/gate2"
    design: str = DESIGN  # the pre-registered design, read by the runner and published unchanged


def read_design(path: str | Path) -> dict:
    """Gate 2's design, checked for what the runner needs; an error naming the file and the fix."""
    design = read_study_design(path, "gate2", KEYS, DESIGN, Gate2DesignError)
    from ..models import CONFIG_DIR

    config = CONFIG_DIR / f"{design['model']['model']}.json"
    if not config.is_file():
        raise Gate2DesignError(f"{path}: model {design['model']['model']} is not one of the package's configs "
                               f"({CONFIG_DIR}); name one of them")
    vision = json.loads(config.read_text())["vision_cfg"]
    stated = {k: design["model"][k] for k in ("width", "layers", "patch", "image_size")}
    actual = {"width": vision["width"], "layers": vision["layers"], "patch": vision["patch_size"],
              "image_size": vision["image_size"]}
    if stated != actual:
        raise Gate2DesignError(f"{path}: model {design['model']['model']} is {actual}, the design says {stated}; "
                               "write the design as it will run")
    return design


def labels(control: str) -> dict[str, str]:
    """A control's two arms as the answers name them."""
    return {"positive": f"{control}: positive control", "control": f"{control}: control"}


def arms(design: dict) -> list[tuple[str, str, Finetune]]:
    """(control, arm, its fine-tune) for every arm of the design, controls in their order."""
    loss = design["finetune"]["loss"]
    return [(name, arm, Finetune(labels(name)[arm], loss, f"gate2{name}", negatives=arm == "positive",
                                 mask_entailed=arm == "positive" and bool(spec.get("mask_entailed"))))
            for name, spec in design["controls"].items() for arm in ("positive", "control")]


def check_requirements(design: dict) -> None:
    """The design's requirements: the loss takes ``mask_entailed`` where a control asks for it."""
    from ..train.config import LossConfig

    for name, spec in design["controls"].items():
        if spec.get("mask_entailed"):
            LossConfig(name=design["finetune"]["loss"], mask_entailed=True)  # refused, naming why, if it cannot


# ------------------------------------------------------------------------------------------------------ the runner


class Gate2(Study):
    def __init__(self, config: Gate2Config, progress: bool = True, console=None, preregistration: dict | None = None):
        self.c = config
        self.out = Path(config.out)
        self.console = console
        self.preregistration = preregistration
        self.progress = progress
        self.design = read_design(config.design)
        check_requirements(self.design)

    def stages(self, world: dict, out: Path, pretrain_steps: int) -> Stages:
        d = self.design
        return Stages(StageConfig(out=str(out), world=WorldConfig(**world), model=d["model"]["model"],
                                  batch_size=d["pretrain"]["batch_size"], pretrain_steps=pretrain_steps,
                                  pretrain_lr=d["pretrain"]["lr"], finetune_lr=d["finetune"]["lr"],
                                  seeds=tuple(d["seeds"])), progress=self.progress, console=self.console)

    def datasets(self, stages: Stages, world: Path) -> dict[str, Path]:
        """Each control's ConcreteBatch, from the world's training scenes (`gate.build_pairs`)."""
        mirror = self.design["world"].get("test_negatives") == "viewer"
        out = {}
        for name, spec in self.design["controls"].items():
            d = stage_dir(stages.out, f"D_gate2{name}", {"world": str(world), "control": spec}) / f"D_gate2{name}"
            out[name] = build_pairs(world, d, spec["seed"], mirror, spec["edit_kinds"],
                                    drop_entailed=spec["anchor_true_of_negative"] == "drop")
        return out

    def project(self) -> dict:
        """Each kind of step timed on a small world of another seed, and the whole run projected from it (seconds)."""
        d = self.design
        world_settings = d["world"] | TIMING_WORLD | {"seed": d["world"]["seed"] + 1000}
        d_timing = stage_dir(self.out, "timing", {"world": world_settings, "steps": TIMING_STEPS})
        if (d_timing / "projection.json").is_file():
            return json.loads((d_timing / "projection.json").read_text())
        stages = self.stages(world_settings, d_timing, TIMING_STEPS)
        clock = time.perf_counter()
        world = stages.world()
        world_s = time.perf_counter() - clock
        clock = time.perf_counter()
        data = self.datasets(stages, world)
        data_s = time.perf_counter() - clock
        baseline = stages.baseline(world)
        step = {"pretrain": step_seconds(baseline)}
        for name, arm, row in arms(d):
            run = stages.finetune(baseline, data[name], row, d["seeds"][0], batch_size=d["finetune"]["batch_size"],
                                  steps=TIMING_STEPS)
            step[f"{name}: {arm}"] = step_seconds(run)
        test = stages.test_data(world, "test")
        clock = time.perf_counter()
        stages.evaluate(baseline, test, name="timing_eval.json", per_item=True, blind=True)
        eval_s = time.perf_counter() - clock
        train_scenes, test_scenes = world_settings["train"], world_settings["test"]
        w = d["world"]
        rows = len(d["seeds"]) * len(arms(d)) + 1
        parts = {"world": world_s * (w["train"] + w["test"]) / (train_scenes + test_scenes),
                 "datasets": data_s * w["train"] / train_scenes,
                 "pretrain": step["pretrain"] * d["model"]["pretrain_steps"],
                 "finetunes": sum(step[f"{name}: {arm}"] for name, arm, _ in arms(d)) * len(d["seeds"]) *
                 d["finetune"]["steps"],
                 "evaluations": eval_s * rows * w["test"] / test_scenes}
        projection = {"step_seconds": step, "parts_seconds": parts, "seconds": sum(parts.values()),
                      "budget_seconds": 60 * d["budget"]["minutes"], "timing_world": world_settings,
                      "timing_steps": TIMING_STEPS, "torch_threads": torch_threads()}
        atomic_write_json(d_timing / "projection.json", projection)
        return projection

    def run(self) -> dict:
        d = self.design
        self.start_clock()
        self.stage(f"[1/4] timing {TIMING_STEPS} steps of each kind on a small world of another seed, and "
                   "projecting the run")
        projection = self.project()
        self.stage(f"    projected: {projection['seconds'] / 60:.1f} min (" + ", ".join(
            f"{k} {v / 60:.1f}" for k, v in projection["parts_seconds"].items()) + f"); budget "
            f"{d['budget']['minutes']} min")
        if projection["seconds"] > projection["budget_seconds"]:
            raise Gate2DesignError(f"the run is projected to take {projection['seconds'] / 60:.0f} min, over the "
                                   f"design's budget of {d['budget']['minutes']} min ({self.out}/timing-*/"
                                   "projection.json): it does not start; a changed design is a new design, "
                                   "registered before it runs")
        self.stage("[2/4] rendering the world and each control's data (the test's edits, training scenes)")
        stages = self.stages(d["world"], self.out, d["model"]["pretrain_steps"])
        world = stages.world()
        data = self.datasets(stages, world)
        test = stages.test_data(world, "test")
        self.stage(f"[3/4] the baseline, then {len(arms(d))} arms x {len(d['seeds'])} seeds "
                   "(nothing is compared before the last)")
        baseline = stages.baseline(world)
        runs = {(BASELINE, None): baseline}
        for seed in d["seeds"]:
            for name, _, row in arms(d):
                runs[(row.label, seed)] = stages.finetune(baseline, data[name], row, seed,
                                                          batch_size=d["finetune"]["batch_size"],
                                                          steps=d["finetune"]["steps"])
                self.lap()
        items, curves = {}, {}
        for key, checkpoint in runs.items():
            items[key] = stages.evaluate(checkpoint, test, name="gate2_outcomes.json", per_item=True, blind=True)
            curves[key] = [r for r in read_jsonl(checkpoint.parent.parent / "metrics.jsonl") if "loss" in r]
        self.stage("[4/4] publishing the answers and gate 2's result")
        world_info = json.loads((world / "world.json").read_text()) | {
            "controls": {name: json.loads((data[name] / "summary.json").read_text()) for name in data},
            "projection": projection}
        return publish_result(self, world_info, items, curves, summarise, study_report, Gate2DesignError)


def step_seconds(checkpoint: Path) -> float:
    """The median seconds of a training step, from the run's metrics.jsonl (its batch size over its samples/s)."""
    run = checkpoint.parent.parent
    batch = json.loads((run / "config.json").read_text())["batch_size"]
    rates = [r["samples_per_s"] for r in read_jsonl(run / "metrics.jsonl") if r.get("samples_per_s")]
    return statistics.median(batch / r for r in rates)


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


# ------------------------------------------------------------------------------------------------------- analysis


def check_answers(folder: str | Path, design: dict, items: dict) -> None:
    """The answers hold the baseline and every arm for every seed, and nothing else: gate 2 is published whole."""
    wanted = {(BASELINE, None)} | {(row.label, s) for _, _, row in arms(design) for s in design["seeds"]}
    lacking, stray = sorted(wanted - set(items), key=str), sorted(set(items) - wanted, key=str)
    if lacking or stray:
        what = (f"holds no answers of {', '.join(f'{r!r} seed {s}' for r, s in lacking[:3])}" if lacking else
                f"holds rows the design has not: {', '.join(f'{r!r} seed {s}' for r, s in stray[:3])}")
        raise PublishedError(f"{Path(folder) / 'answers.jsonl.gz'} {what}; {RESTORE}")


def control_result(name: str, design: dict, items: dict) -> dict:
    """One control's contrast: each subset's blind score per arm and whether it is matched, the per-seed difference
    on the matched outcome, its seed-level t interval, the pass, each subset's difference, and the scene-and-seed
    bootstrap interval of the outcome."""
    import numpy as np

    from ..outcomes import bootstrap_contrast, metric_values

    spec, seeds, margin, rule = design["controls"][name], design["seeds"], design["margin"], design["matched_outcome"]
    names = labels(name)
    values = {arm: [metric_values(items[(names[arm], s)]["outcomes"]) for s in seeds] for arm in names}
    subsets = spec["outcome"]["subsets"]
    blind = {arm: {s: statistics.fmean(100 * v[f"{BLIND}{s}"] for v in values[arm]) for s in subsets}
             for arm in names}
    ceiling = rule["chance"] + rule["blind_above_chance_at_most"]
    matched = [s for s in subsets if all(blind[arm][s] <= ceiling for arm in names)]

    def differences(columns: list[str]) -> list[float]:
        return [100 * (statistics.fmean(p[c] for c in columns) - statistics.fmean(c_[c] for c in columns))
                for p, c_ in zip(values["positive"], values["control"])]

    per_subset = {}
    for s in subsets:
        m, sd, lo, hi = seed_interval(differences([s]), margin["confidence"])
        per_subset[s] = {"mean": m, "sd": sd, "t_interval": [lo, hi], "matched": s in matched,
                         "blind": {arm: blind[arm][s] for arm in names},
                         "positive": statistics.fmean(100 * v[s] for v in values["positive"]),
                         "control": statistics.fmean(100 * v[s] for v in values["control"])}
    result = {"control": name, "outcome": spec["outcome"]["metric"], "matched": matched, "subsets": per_subset,
              "t_quantile": t_quantile(0.5 + margin["confidence"] / 2, len(seeds) - 1)}
    if not matched:  # a contrast with no matched subset does not pass
        return result | {"per_seed": None, "mean": None, "sd": None, "t_interval": None, "bootstrap": None,
                         "passes": False}
    diffs = differences(matched)
    mean, sd, low, high = seed_interval(diffs, margin["confidence"])
    outcome = f"matched outcome of {name}"  # the matched subsets' mean, as a recipe the bootstrap resamples
    groups = {names[arm]: [matched_outcomes(items[(names[arm], s)]["outcomes"], outcome, matched) for s in seeds]
              for arm in names}
    boot = bootstrap_contrast(groups, {names["positive"]: 1, names["control"]: -1}, [outcome], design["bootstrap"],
                              rng=np.random.default_rng(0), paired_runs=True)[outcome]
    return result | {"per_seed": diffs, "mean": mean, "sd": sd, "t_interval": [low, high],
                     "bootstrap": {"ci95": boot["ci95"], "se": boot["se"], "p": boot["p"]},
                     "passes": mean >= margin["mean_at_least"] and low > margin["seed_t_lower_above"],
                     "positive": statistics.fmean(100 * statistics.fmean(v[s] for s in matched)
                                                  for v in values["positive"]),
                     "control_arm": statistics.fmean(100 * statistics.fmean(v[s] for s in matched)
                                                     for v in values["control"])}


def matched_outcomes(outcomes: dict, name: str, subsets: list[str]) -> dict:
    """``outcomes`` with one more recipe, ``name``: the macro mean of ``subsets``."""
    return {"series": outcomes["series"], "metrics": outcomes["metrics"] | {name: {"macro": list(subsets)}}}


def summarise(design: dict, items: dict, seconds: float) -> dict:
    """Gate 2's result from its design and the answers alone: each control's contrast and verdict, whether the
    setup is gated (either control passes), and the table of every row."""
    from ..outcomes import check_same_items, metric_values

    check_same_items([v["outcomes"] for v in items.values()], [str(k) for k in items])
    controls = [control_result(name, design, items) for name in design["controls"]]
    table = results_table({k: {m: v for m, v in metric_values(r["outcomes"]).items() if not m.startswith(BLIND)}
                           for k, r in items.items()})
    baseline_blind = {m[len(BLIND):]: 100 * v for m, v in metric_values(items[(BASELINE, None)]["outcomes"]).items()
                      if m.startswith(BLIND)}
    return {"design": design, "controls": controls, "gated": any(c["passes"] for c in controls),
            "passed": [c["control"] for c in controls if c["passes"]], "baseline_blind": baseline_blind,
            "table": table, "seconds": seconds}


def study_report(result: dict, world_info: dict, run: dict) -> str:
    """Gate 2's report; ``run``: its published ``run.json``."""
    d = result["design"]
    margin, rule = d["margin"], d["matched_outcome"]
    verdict = (f"**Gate 2 passes**: control{'s' if len(result['passed']) > 1 else ''} {' and '.join(result['passed'])}"
               " registered the effect of true negatives on the subsets they make: the setup is gated at "
               f"`{d['model']['model']}`'s size." if result["gated"] else
               "**Gate 2 does not pass**: neither control registered its effect by the pre-registered margin.")
    counts = world_info.get("controls", {})
    lines = [
        "# Gate 2: can the toy world register a method that works, with true negatives?", "",
        f"Design: docs/studies/gate2.md (pre-registered). World seed {d['world']['seed']}: {world_info['train']} "
        f"training and {world_info['test']} test scenes (test items per subset: "
        + ", ".join(f"{k} {v}" for k, v in world_info["test_items"].items())
        + f"); `{d['model']['model']}`, baseline {d['model']['pretrain_steps']} pretraining steps; every arm "
        f"{d['finetune']['loss']}, N = {d['finetune']['batch_size']}, {d['finetune']['steps']} steps, seeds "
        f"{', '.join(map(str, d['seeds']))}; {wall_time_words(result['seconds'], counts_all_starts(run))}.", "",
        starts_words(run), "", verdict, "",
        "## The contrasts (positive control − its control, points of the matched outcome, per seed)", "",
        f"A control passes when the mean is at least {margin['mean_at_least']} points and the lower end of the "
        f"seed-level two-sided {100 * margin['confidence']:.1f} % t interval is above {margin['seed_t_lower_above']}; "
        f"a subset is matched when its blind score, the mean over an arm's seeds, is at most {rule['chance']:g} + "
        f"{rule['blind_above_chance_at_most']:g} in both arms.", "",
        "| control | edits | matched subsets | control arm | positive control | difference (per seed) | "
        f"seed-level {100 * margin['confidence']:.1f} % t interval | scene-and-seed bootstrap 95 % | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in result["controls"]:
        edits = ", ".join(d["controls"][c["control"]]["edit_kinds"])
        if c["mean"] is None:
            lines.append(f"| {c['control']} | {edits} | none | - | - | - | - | - | **does not pass** (no matched "
                         "subset) |")
            continue
        lines.append(
            f"| {c['control']} | {edits} | {', '.join(c['matched'])} | {c['control_arm']:.2f} | {c['positive']:.2f} "
            f"| {signed(c['mean'], 2)} ({', '.join(signed(x, 2) for x in c['per_seed'])}) | "
            f"[{signed(c['t_interval'][0], 2)}, {signed(c['t_interval'][1], 2)}] | "
            f"[{signed(c['bootstrap']['ci95'][0], 2)}, {signed(c['bootstrap']['ci95'][1], 2)}] | "
            f"**{'passes' if c['passes'] else 'does not pass'}** |")
    lines += ["", "## Each subset (reported, not gated)", "",
              "Test accuracy (%, mean over seeds), the difference with its seed-level interval, and the blind score "
              "(%, the test's mean picture in place of every picture; mean over seeds) of each arm.", "",
              "| control | subset | control arm | positive control | difference [interval] | blind: control arm | "
              "blind: positive control | matched |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in result["controls"]:
        for s, v in c["subsets"].items():
            lines.append(f"| {c['control']} | {s} | {v['control']:.2f} | {v['positive']:.2f} | {signed(v['mean'], 2)} "
                         f"[{signed(v['t_interval'][0], 2)}, {signed(v['t_interval'][1], 2)}] | "
                         f"{v['blind']['control']:.1f} | {v['blind']['positive']:.1f} | "
                         f"{'yes' if v['matched'] else 'no'} |")
    lines += ["", "The baseline's blind scores: " + ", ".join(f"{k} {v:.1f}" for k, v in
                                                              result["baseline_blind"].items()) + ".", "",
              "## Each control's data (training scenes only)", ""]
    for name, summary in counts.items():
        dropped = "; ".join(f"{reason}: " + ", ".join(f"{k} {v}" for k, v in kinds.items())
                            for reason, kinds in summary.get("dropped", {}).items()) or "none"
        entailed = ", ".join(f"{k} {summary['anchor_true_of_negative'][k]} of {n}"
                             for k, n in summary["per_edit"].items())
        lines.append(f"- **{name}**: {summary['ok']} records (" + ", ".join(
            f"{k} {v}" for k, v in summary["per_edit"].items()) + f"); dropped: {dropped}; kept negatives whose anchor "
            f"caption the viewer reads true of them: {entailed}.")
    projection = world_info.get("projection")
    if projection:
        lines += ["", f"Projected before the world was built: {projection['seconds'] / 60:.1f} min (budget "
                  f"{projection['budget_seconds'] / 60:.0f} min) from {projection['timing_steps']} timed steps of "
                  "each kind (s/step: " + ", ".join(f"{k} {v:.3f}" for k, v in
                                                    sorted(projection["step_seconds"].items()))
                  + f"), {projection['torch_threads']} torch thread(s)."]
    lines += ["", "## All rows (test, %, mean ± sd over seeds)", "", table_markdown(result["table"]), ""]
    return "\n".join(lines) + "\n"
