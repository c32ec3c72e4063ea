"""`concrete-jungle study run study2`: the second pre-registered study on the toy world (design: docs/studies/study2.md,
"Study 2").

Study 1 could not carry its conclusions (its corrections in docs/studies/study1.md): held-out scenes leaked into
training through the negatives, two codecs, a hard-negative contrast that bundled more pairs and half the anchor
weight, a margin confound in its concreteness contrast, a below-chance relation subset. Study 2 removes each: a
world whose held-out scenes differ from training in what their captions name, every split in one codec, a captioner
that refuses a negative describing a held-out scene, test negatives that read false of their picture with relation
words balanced (`toyworld.viewer`); an augmentation control (the same pairs, no negative beside its anchor); a D_lc
+ InfoNCE row; a baseline pretrained until its validation retrieval flattens, by a fixed rule. Three primary
contrasts are tested as a Holm family; the secondary ones are reported with intervals, uncorrected.

Three settings are chosen by rules on training and validation data before any compared row runs, and recorded
in ``design.json``: the baseline's length (the first checkpoint of a long pretraining whose validation Recall@1 is
within ``plateau`` points of the curve's best), N (as Study 1: the smallest candidate whose InfoNCE hard-negative
gradient share on the baseline's D_hc features is below ``share_threshold``) and T (the control's validation
curve, as Study 1, but at least one epoch of D_hc's anchors).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..records import atomic_write_json
from ..toyworld.build import WorldConfig
from .published import counts_all_starts, starts_words, wall_time_words
from .report import RESOLVABLE, all_rows, contrast_row, results_table
from .stages import CONTROL, Finetune, StageConfig, Stages, log
from .study import Study, batch_size_sentence, recall_curve

AUGMENTATION = Finetune("augmentation control (negative pairs apart)", "infonce", "hc", apart=True)
ROWS = (CONTROL, AUGMENTATION,
        Finetune("D_hc + InfoNCE", "infonce", "hc"), Finetune("D_hc + Cement", "cement", "hc"),
        Finetune("D_hc + static margin", "static", "hc"),
        Finetune("D_lc + InfoNCE", "infonce", "lc"), Finetune("D_lc + Cement", "cement", "lc"),
        Finetune("D_wo + InfoNCE", "infonce", "wo"), Finetune("D_wo + Cement", "cement", "wo"))

# the subsets the negatives target (every edit replaces or swaps a word) and those they do not (they never add)
TARGETED = ("replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")
METRICS = {"M.Avg": "all seven subsets", "REPLACE+SWAP": "the five subsets the negatives target",
           "ADD": "add_att and add_obj, which no negative targets"}

# (name, claim, metric, contrast: row label -> weight); a claim holds when its contrast is above 0
PRIMARY = (
    ("P1", "the paper's method beats doing nothing: D_hc + Cement beats the control", "M.Avg",
     {"D_hc + Cement": 1, CONTROL.label: -1}),
    ("P2", "hard contrast beats more pairs: D_hc + InfoNCE beats the augmentation control", "M.Avg",
     {"D_hc + InfoNCE": 1, AUGMENTATION.label: -1}),
    ("P3", "Cement beats InfoNCE where margins differ between pairs: on D_wo", "M.Avg",
     {"D_wo + Cement": 1, "D_wo + InfoNCE": -1}),
)
SECONDARY = (
    ("S1", "concrete negatives teach more, the loss held fixed: D_hc + InfoNCE beats D_lc + InfoNCE", "M.Avg",
     {"D_hc + InfoNCE": 1, "D_lc + InfoNCE": -1}),
    ("S2", "more pairs teach: the augmentation control beats the control", "M.Avg",
     {AUGMENTATION.label: 1, CONTROL.label: -1}),
    ("S3", "Cement beats InfoNCE on D_hc (margins near +2)", "M.Avg", {"D_hc + Cement": 1, "D_hc + InfoNCE": -1}),
    ("S4", "Cement beats InfoNCE on D_lc (margins mostly negative)", "M.Avg",
     {"D_lc + Cement": 1, "D_lc + InfoNCE": -1}),
    ("S5", "a static margin beats InfoNCE on D_hc", "M.Avg", {"D_hc + static margin": 1, "D_hc + InfoNCE": -1}),
) + tuple((f"{name}{suffix}", f"{claim}, on {METRICS[metric]}", metric, weights)
          for name, claim, _, weights in PRIMARY
          for suffix, metric in (("-targeted", "REPLACE+SWAP"), ("-add", "ADD")))
CONTRASTED = frozenset(label for *_, weights in PRIMARY + SECONDARY for label in weights)


@dataclass(frozen=True)
class Study2Config:
    out: str = "runs/study2"
    world: WorldConfig = field(default_factory=lambda: WorldConfig(
        train=4000, test=1500, val=600, seed=2, held_out="named", image_format="jpeg", test_negatives="viewer"))
    model: str = "cj-demo"
    pretrain_batch_size: int = 64
    pretrain_lr: float = 2e-3
    pretrain_max_steps: int = 2000  # the baseline's curve: a cosine schedule over this many steps
    pretrain_every: int = 200  # a checkpoint scored on the validation scenes every this many steps
    finetune_lr: float = 1e-3
    batch_sizes: tuple[int, ...] = (32, 64, 128, 256)
    share_threshold: float = 0.2
    share_pairs: int = 2048
    max_steps: int = 300  # the control's validation curve
    curve_every: int = 25
    plateau: float = 1.0  # points of validation Recall@1, for both curves
    seeds: tuple[int, ...] = (0, 1, 2)
    bootstrap: int = 2000
    alpha: float = 0.05


PROFILES = {
    "cpu": {},  # 2 cores: about 2.8 hours (docs/studies/study2.md, "Study 2 results"; the design said 90 minutes)
    # one H200: the same design on a 2.5x larger world and the wider cj-study model (benchmarks/study_gpu.sh study2)
    "gpu": dict(world=WorldConfig(train=10000, test=2000, val=1000, seed=2, held_out="named", image_format="jpeg",
                                  test_negatives="viewer"), model="cj-study", pretrain_batch_size=256,
                pretrain_max_steps=3000, pretrain_every=300, batch_sizes=(128, 256, 512, 1024), share_pairs=8192,
                max_steps=400),
}


DESIGN_SECTION = ("docs/studies/study2.md",
                  "## Study 2: a pre-registered experiment (`concrete-jungle study run study2`)")


class Study2(Study):
    def __init__(self, config: Study2Config, progress: bool = True, console=None, preregistration: dict | None = None):
        self.c = config
        self.out = Path(config.out)
        self.console = console
        self.preregistration = preregistration
        stages = StageConfig(out=config.out, world=config.world, model=config.model,
                             batch_size=config.pretrain_batch_size, pretrain_steps=config.pretrain_max_steps,
                             pretrain_lr=config.pretrain_lr, finetune_lr=config.finetune_lr, seeds=config.seeds,
                             no_leak=True)
        self.stages = Stages(stages, progress=progress, console=console)

    def choose_baseline(self, world: Path) -> dict:
        """The baseline's validation curve and the checkpoint it picks (the design's first rule)."""
        final = self.stages.baseline(world, save_every=self.c.pretrain_every)
        choice_path = final.parent.parent / "baseline_choice.json"
        if choice_path.is_file():
            return json.loads(choice_path.read_text())
        curve = self.plateau_choice(final.parent, self.c.pretrain_every, self.c.pretrain_max_steps, world)
        choice = {"steps": curve["steps"], "checkpoint": str(final.parent / f"step-{curve['steps']:07d}")} | curve
        atomic_write_json(choice_path, choice)
        return choice

    def run(self) -> dict:
        c = self.c
        self.start_clock()
        self.stage("[1/6] rendering the toy world (train, validation and test scenes; one codec; named held-out)")
        world = self.stages.world()
        self.stage("[2/6] pretraining the CLIP baseline until its validation retrieval flattens")
        baseline_choice = self.choose_baseline(world)
        baseline = Path(baseline_choice["checkpoint"])
        log(f"    baseline: step {baseline_choice['steps']} of {c.pretrain_max_steps}", self.console)
        self.stage("[3/6] ConcretePlant: D_hc, D_lc, D_wo (no negative may describe a held-out scene)")
        datasets = {m: self.stages.plant(world, m) for m in ("hc", "lc", "wo")}
        self.stage("[4/6] choosing N (gradient share) and T (the control's validation curve) by the design's rules")
        batch = self.choose_batch_size(baseline, datasets["hc"])
        curve = self.choose_steps(baseline, datasets["hc"], world, batch["n"])
        anchors = json.loads((datasets["hc"] / "summary.json").read_text())["ok"]
        epoch = c.curve_every * math.ceil(math.ceil(anchors / batch["n"]) / c.curve_every)
        steps = max(curve["steps"], min(epoch, c.max_steps))
        design = {"study": "study2", "config": asdict(c), "baseline_choice": baseline_choice, "n": batch["n"],
                  "steps": steps, "one_epoch_steps": epoch, "batch_size_choice": batch, "steps_choice": curve,
                  "rows": [asdict(r) for r in ROWS], "primary": [list(h) for h in PRIMARY],
                  "secondary": [list(h) for h in SECONDARY], "metrics": METRICS, "targeted": list(TARGETED)}
        atomic_write_json(self.out / "design.json", design)
        log(f"    N = {batch['n']} anchors, T = {steps} steps", self.console)
        self.stage(f"[5/6] fine-tuning {len(ROWS)} settings x {len(c.seeds)} seeds, row by row (a stopped run resumes)")
        runs = {}
        for row in ROWS:
            for seed in c.seeds:
                runs[(row.label, seed)] = self.stages.finetune(baseline, datasets[row.mode], row, seed,
                                                               batch_size=batch["n"], steps=steps)
                self.lap()
        return self.conclude(world, baseline, runs, design, summarise, study_report)


def with_targeted(outcomes: dict) -> dict:
    """Outcomes with the REPLACE+SWAP recipe added: the macro mean of the subsets the negatives target (those the
    outcomes hold)."""
    targeted = [s for s in TARGETED if s in outcomes["series"]]
    return outcomes | {"metrics": outcomes["metrics"] | {"REPLACE+SWAP": {"macro": targeted}}}


def summarise(design: dict, items: dict, seconds: float) -> dict:
    """Study 2's results from its design and its models' test answers alone (`concrete-jungle study report`)."""
    from ..outcomes import metric_values

    table = results_table({k: metric_values(v["outcomes"]) for k, v in items.items()})
    c = design["config"]
    primary, secondary = contrasts(items, tuple(c["seeds"]), c["bootstrap"], c["alpha"])
    return {"design": design, "table": table, "primary": primary, "secondary": secondary, "seconds": seconds}


def contrasts(items: dict, seeds: tuple[int, ...], resamples: int, alpha: float = 0.05,
              seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Every contrast with its paired bootstrap (test scenes, all items of a scene together, and seeds; the same
    draws for every row of a contrast); the primary family's verdicts from Holm-adjusted p-values, the secondary
    ones from their 95 % intervals."""
    import numpy as np

    from ..outcomes import bootstrap_contrast, check_same_items, holm

    check_same_items([v["outcomes"] for v in items.values()], [str(k) for k in items])
    rng = np.random.default_rng(seed)

    def one(name, claim, metric, weights):
        groups = {label: [with_targeted(items[(label, s)]["outcomes"]) for s in seeds] for label in weights}
        result = bootstrap_contrast(groups, weights, [metric], resamples, rng=rng, paired_runs=True)[metric]
        return {"name": name, "claim": claim, "metric": metric, "contrast": weights,
                "resolvable": (1.96 + 0.84) * result["se"]} | result

    primary = [one(*h) for h in PRIMARY]
    adjusted = holm({h["name"]: h["p"] for h in primary})
    for h in primary:
        h["p_holm"] = adjusted[h["name"]]
        h["verdict"] = "not resolved" if h["p_holm"] >= alpha else "supported" if h["estimate"] > 0 else "contradicted"
    secondary = [one(*h) for h in SECONDARY]
    for h in secondary:
        low, high = h["ci95"]
        h["verdict"] = "supported" if low > 0 else "contradicted" if high < 0 else "not resolved"
    return primary, secondary


def study_report(result: dict, world_info: dict, run: dict) -> str:
    """The study's report; ``run``: its published ``run.json`` (the wall time, each start's code)."""
    design = result["design"]
    c = design["config"]
    curve = design["steps_choice"]["curve"]
    base = design["baseline_choice"]
    lines = [
        "# Study 2: what hard negatives and Cement do on the toy world, on a test that cannot leak", "",
        f"Design: docs/studies/study2.md, \"Study 2\" (pre-registered). {world_info['train']} training, "
        f"{world_info['val']} validation and {world_info['test']} test scenes (test items per subset: "
        + ", ".join(f"{k} {v}" for k, v in world_info["test_items"].items()) + f"); model `{c['model']}`; seeds "
        f"{', '.join(map(str, c['seeds']))}; {wall_time_words(result['seconds'], counts_all_starts(run))}.", "",
        starts_words(run), "",
        f"**Baseline: {base['steps']} pretraining steps**: validation Recall@1 (mean of both directions) "
        + recall_curve(base["curve"]) + f" (rule: the first checkpoint within {c['plateau']} points of the best).",
        "", batch_size_sentence(design), "",
        f"**T = {design['steps']}** steps: the control's validation Recall@1 was " + recall_curve(curve)
        + f" (rule: the first step within {c['plateau']} points of the best, {design['steps_choice']['steps']}, and "
        f"at least one epoch of D_hc's anchors, {design['one_epoch_steps']}).", "",
        "## Primary contrasts (test M.Avg, points; Holm-corrected as a family of three)", "",
        "| | claim | difference | 95 % interval | p | Holm p | resolvable difference | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [contrast_row(h["name"], h["claim"], h, after=(f"{h['p']:.4f}", f"{h['p_holm']:.4f}"))
              for h in result["primary"]]
    lines += ["", "## Secondary contrasts (points; 95 % intervals, not corrected for multiplicity)", "",
              "| | claim | metric | difference | 95 % interval | resolvable difference | reading |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [contrast_row(h["name"], h["claim"], h, before=(h["metric"],), verdict="{}") for h in result["secondary"]]
    lines += ["", "Intervals: 2,000 paired bootstrap resamples of test scenes (all items of a scene together) and "
              f"seeds. {RESOLVABLE}", "", *all_rows(result["table"])]
    return "\n".join(lines) + "\n"

