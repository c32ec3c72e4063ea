"""`concrete-jungle demo --study`: the pre-registered experiment on the toy world (design: docs/studies/study1.md).

Question: on a world where the answer is knowable, do hard negatives teach composition beyond what more training
on the same captions teaches, and does Cement's adaptive margin add to that? Rows: the CLIP baseline; the
control (the D_hc anchors with every negative masked, InfoNCE); D_hc with InfoNCE, static margin, Cement and the
inverse margin; D_wo with InfoNCE and Cement; D_lc with Cement; every fine-tune for every seed, from the same
baseline, with the same batches in the same order (paired by seed and data order).

Two settings are chosen by fixed rules before any fine-tune of a compared row runs, and recorded in
``design.json``: the batch size N (the smallest candidate at which InfoNCE's hard-negative gradient share, on the
baseline's features of D_hc, is below ``share_threshold``: the regime the margin is meant for) and the number of
steps T (from the control's learning curve on the validation scenes: the first evaluated step at which its
validation Recall@1, the mean of both directions, is within ``plateau`` points of its best). Each hypothesis is a
contrast of M.Avg on the held-out test; its 95 % interval comes from a paired bootstrap over test scenes (all
items of a scene's image together) and seeds (`outcomes.bootstrap_contrast`), and its verdict is read off the
interval: supported (above 0), contradicted (below 0), not resolved (straddles 0). The smallest difference the
design resolves is (1.96 + 0.84) bootstrap standard errors (two-sided 5 %, 80 % power).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..loss.options import by_loss_name
from ..records import atomic_write_json, atomic_write_text, read_jsonl
from ..toyworld.build import WorldConfig
from .published import counts_all_starts, publish, starts_words, wall_time_words
from .report import RESOLVABLE, all_rows, contrast_row, results_table
from .stages import BASELINE, CONTROL, Finetune, StageConfig, Stages, StartRecord, WallClock, log, stage_dir

ROWS = (CONTROL, Finetune("D_hc + InfoNCE", "infonce", "hc"), Finetune("D_hc + static margin", "static", "hc"),
        Finetune("D_hc + Cement", "cement", "hc"), Finetune("D_hc + inverse margin", "inverse", "hc"),
        Finetune("D_wo + InfoNCE", "infonce", "wo"), Finetune("D_wo + Cement", "cement", "wo"),
        Finetune("D_lc + Cement", "cement", "lc"))

# (name, claim, contrast: row label -> weight); the claim holds when the contrast of M.Avg is above 0
HYPOTHESES = (
    ("H1", "hard negatives teach beyond more training: D_hc + InfoNCE beats the control",
     {"D_hc + InfoNCE": 1, CONTROL.label: -1}),
    ("H2", "Cement beats InfoNCE on D_hc", {"D_hc + Cement": 1, "D_hc + InfoNCE": -1}),
    ("H3", "a static margin beats InfoNCE on D_hc", {"D_hc + static margin": 1, "D_hc + InfoNCE": -1}),
    ("H4", "the inverse margin trails InfoNCE on D_hc", {"D_hc + InfoNCE": 1, "D_hc + inverse margin": -1}),
    ("H5", "Cement beats InfoNCE on D_wo", {"D_wo + Cement": 1, "D_wo + InfoNCE": -1}),
    ("H6", "Cement gains more over InfoNCE on D_wo than on D_hc",
     {"D_wo + Cement": 1, "D_wo + InfoNCE": -1, "D_hc + Cement": -1, "D_hc + InfoNCE": 1}),
    ("H7", "concrete negatives teach more: D_hc + Cement beats D_lc + Cement",
     {"D_hc + Cement": 1, "D_lc + Cement": -1}),
)
PRIMARY = ("H1", "H2")
# the rows the contrasts compare: the answers of each, for every seed, must be there
CONTRASTED = frozenset(label for _, _, weights in HYPOTHESES for label in weights)


@dataclass(frozen=True)
class StudyConfig:
    out: str = "runs/study"
    world: WorldConfig = field(default_factory=lambda: WorldConfig(train=4000, test=1500, val=600, seed=1))
    model: str = "cj-demo"
    pretrain_steps: int = 400
    pretrain_batch_size: int = 64
    pretrain_lr: float = 2e-3
    finetune_lr: float = 2e-3
    batch_sizes: tuple[int, ...] = (32, 64, 128, 256)  # candidates for N, smallest first (256: the CPU budget)
    share_threshold: float = 0.2
    share_pairs: int = 2048  # D_hc pairs whose baseline features give the gradient-share curve
    max_steps: int = 300  # the control's learning curve runs this long
    curve_every: int = 25
    plateau: float = 1.0  # points of validation Recall@1
    seeds: tuple[int, ...] = (0, 1, 2)
    bootstrap: int = 2000
    # Study 1 ran with every caption encoded at the full context; text at the captions' length came later and
    # differs from it by float rounding, which compounds over training (docs/studies/study1.md, "Re-checking a study")
    trim_text: bool = False


PROFILES = {
    "cpu": {},  # 2 cores: the run time measured is in docs/studies/study1.md, "Study results"
    # one H200: a 2.5x larger world, a 4x wider model, N up to 1024 (benchmarks/study_gpu.sh)
    "gpu": dict(world=WorldConfig(train=10000, test=2000, val=1000, seed=1), model="cj-study", pretrain_steps=1000,
                pretrain_batch_size=256, batch_sizes=(128, 256, 512, 1024), share_pairs=8192, max_steps=400),
}


# the design a start checks is committed (`preregistration`): this module's settings and the docs page's section
DESIGN_SECTION = ("docs/studies/study1.md",
                  "## The study: a pre-registered experiment (`concrete-jungle demo --study`)")


class Study:
    def __init__(self, config: StudyConfig, progress: bool = True, console=None, preregistration: dict | None = None):
        self.c = config
        self.out = Path(config.out)
        self.console = console
        self.preregistration = preregistration  # this start's check of the design (`preregistration.check`)
        # the shared stages (world, baseline, plant, fine-tune, evaluate), with the study's settings
        self.stages = Stages(StageConfig(out=config.out, world=config.world, model=config.model,
                                    batch_size=config.pretrain_batch_size, pretrain_steps=config.pretrain_steps,
                                    pretrain_lr=config.pretrain_lr, finetune_lr=config.finetune_lr,
                                    seeds=config.seeds, trim_text=config.trim_text), progress=progress,
                             console=console)

    def choose_batch_size(self, baseline: Path, hc: Path) -> dict:
        """The gradient-share curve of the baseline on D_hc and the N it picks (the design's first rule)."""
        return choose_batch_size(self.stages, baseline, hc, self.c.share_pairs, self.c.batch_sizes,
                                 self.c.share_threshold)

    def choose_steps(self, baseline: Path, hc: Path, world: Path, n: int) -> dict:
        """The control's learning curve on the validation scenes and the T it picks (the design's second rule)."""
        run = self.stages.finetune(baseline, hc, CONTROL, self.c.seeds[0], batch_size=n, steps=self.c.max_steps,
                                 save_every=self.c.curve_every)
        choice_path = run.parent.parent / "steps_choice.json"
        if choice_path.is_file():
            return json.loads(choice_path.read_text())
        choice = self.plateau_choice(run.parent, self.c.curve_every, self.c.max_steps, world)
        atomic_write_json(choice_path, choice)
        return choice

    def plateau_choice(self, checkpoints: Path, every: int, last: int, world: Path) -> dict:
        """The validation curve of the checkpoints saved every ``every`` steps up to ``last`` (M.Avg and Recall@1, the
        mean of both directions) and its first step within ``plateau`` points of the curve's best Recall@1."""
        val = self.stages.test_data(world, "val")
        curve = {}
        for step in range(every, last + 1, every):
            metrics = self.stages.evaluate(checkpoints / f"step-{step:07d}", val, name="val_eval.json")
            curve[step] = {"M.Avg": metrics["M.Avg"],
                           "R@1": (metrics["text_retrieval_recall@1"] + metrics["image_retrieval_recall@1"]) / 2}
        best = max(v["R@1"] for v in curve.values())
        steps = next(s for s, v in curve.items() if v["R@1"] >= best - self.c.plateau / 100)
        return {"steps": steps, "best_val_recall": best, "curve": {str(s): v for s, v in curve.items()}}

    def run(self) -> dict:
        c = self.c
        self.start_clock()
        self.stage("[1/6] rendering the toy world (train, validation and test scenes)")
        world = self.stages.world()
        self.stage("[2/6] pretraining the CLIP baseline")
        baseline = self.stages.baseline(world)
        self.stage("[3/6] ConcretePlant: D_hc, D_lc, D_wo")
        datasets = {m: self.stages.plant(world, m) for m in ("hc", "lc", "wo")}
        self.stage("[4/6] choosing N (gradient share) and T (the control's validation curve) by the design's rules")
        batch = self.choose_batch_size(baseline, datasets["hc"])
        steps = self.choose_steps(baseline, datasets["hc"], world, batch["n"])
        design = {"config": asdict(c), "n": batch["n"], "steps": steps["steps"], "batch_size_choice": batch,
                  "steps_choice": steps, "hypotheses": [list(h) for h in HYPOTHESES], "primary": list(PRIMARY)}
        atomic_write_json(self.out / "design.json", design)
        log(f"    N = {batch['n']} anchors, T = {steps['steps']} steps", self.console)
        self.stage(f"[5/6] fine-tuning {len(ROWS)} settings x {len(c.seeds)} seeds")
        runs = {}
        for seed in c.seeds:
            for row in ROWS:
                runs[(row.label, seed)] = self.stages.finetune(baseline, datasets[row.mode], row, seed,
                                                               batch_size=batch["n"], steps=steps["steps"])
                self.lap()
        return self.conclude(world, baseline, runs, design, summarise, study_report)

    def keep(self, config, progress: bool, console, preregistration: dict | None) -> None:
        """A runner's settings (``config`` with its ``out``), progress bars, console and check of its design."""
        self.c = config
        self.out = Path(config.out)
        self.console = console
        self.preregistration = preregistration
        self.progress = progress

    def start_clock(self) -> None:
        """The study's wall time, over this start and the earlier ones (`WallClock`, ``<out>/wall_time.json``), and
        the record of every start with the code it ran and its check of the design (`StartRecord`,
        ``<out>/starts.json``); a start whose design differs from the first start's is refused."""
        from .preregistration import same_design

        self.out.mkdir(parents=True, exist_ok=True)
        if self.preregistration:
            same_design(self.out / "starts.json", self.preregistration)
        self.clock = WallClock(self.out / "wall_time.json")
        self.starts = StartRecord(self.out / "starts.json", earlier_seconds=self.clock.before,
                                  preregistration=self.preregistration)

    def lap(self) -> float:
        """Record the wall time so far and the code this start runs now; the seconds over every start."""
        self.starts.lap()
        return self.clock.lap()

    def stage(self, message: str) -> None:
        """Announce a stage of the run, with the wall time so far recorded first."""
        self.lap()
        log(message, self.console)

    def conclude(self, world: Path, baseline: Path, runs: dict, design: dict, summarise, report) -> dict:
        """Evaluate the baseline and every fine-tune on the test scenes, publish the answers (`published`), and
        write ``results.json`` (``summarise``'s) and ``study.md`` (``report``'s)."""
        self.stage("[6/6] evaluating on the test scenes and bootstrapping the contrasts")
        test = self.stages.test_data(world, "test")
        items = {key: self.stages.evaluate(ckpt, test, name="test_outcomes.json", per_item=True)
                 for key, ckpt in [((BASELINE, None), baseline), *runs.items()]}
        world_info = json.loads((world / "world.json").read_text())
        seconds = round(self.lap(), 1)  # every start's
        # every model's training log: the baseline's pretraining and each fine-tune's (a checkpoint's run folder)
        curves = {key: [r for r in read_jsonl(ckpt.parent.parent / "metrics.jsonl") if "loss" in r]
                  for key, ckpt in [((BASELINE, None), baseline), *runs.items()]}
        publish(self.out / "published", design, world_info, items, seconds, self.starts.starts, curves)
        result = summarise(design, items, seconds)
        atomic_write_json(self.out / "results.json", result)
        atomic_write_text(self.out / "study.md", report(result, world_info, {"seconds": seconds,
                                                                            "starts": self.starts.starts}))
        return result


def choose_batch_size(stages: Stages, baseline: Path, hc: Path, pairs: int, candidates: tuple[int, ...],
                      threshold: float, batches: int = 16) -> dict:
    """InfoNCE's hard-negative gradient share on the baseline's features of ``pairs`` D_hc pairs at each candidate N
    that D_hc holds (``batches`` random batches each), and the N it picks: the smallest candidate below
    ``threshold`` (``rule_met``), else the largest; None when D_hc holds fewer pairs than the smallest candidate.
    Kept in ``<out>/batch-size-<hash>``."""
    from ..analysis.dataset_statistics import concretebatch_features, gradient_share_by_batch_size
    from ..models import load_model

    d = stage_dir(stages.out, "batch-size", {"baseline": str(baseline), "data": str(hc), "pairs": pairs,
                                             "sizes": list(candidates)} | stages.text_setting())
    if (d / "choice.json").is_file():
        return json.loads((d / "choice.json").read_text())
    clip = load_model(checkpoint=baseline)
    image, text, c, _, _ = concretebatch_features(clip, hc, limit=pairs, cache_dir=d / "embeddings", progress=False,
                                                  trim_text=stages.c.trim_text)
    sizes = [n for n in candidates if n <= c.shape[0]]
    curves = gradient_share_by_batch_size(image, text, c, clip.model.logit_scale.exp().item(), sizes,
                                          batches=batches) if sizes else {}
    choice = smallest_below(curves.get("infonce", {}), threshold) | {
        "curves": {s: {str(n): v for n, v in pts.items()} for s, pts in curves.items()}}
    atomic_write_json(d / "choice.json", choice)
    return choice


def smallest_below(share: dict[int, float], threshold: float) -> dict:
    """The batch-size rule on a gradient-share curve (N -> InfoNCE's hard-negative share): ``n``, the smallest N
    whose share is below ``threshold`` (``rule_met``), else the largest N; None for an empty curve."""
    below = [n for n in sorted(share) if share[n] < threshold]
    return {"n": below[0] if below else max(share) if share else None, "rule_met": bool(below)}


def summarise(design: dict, items: dict, seconds: float) -> dict:
    """The results of a study from its design and its models' test outcomes alone: the table and every contrast
    (`concrete-jungle study report` computes the same from the published files)."""
    from ..outcomes import metric_values

    table = results_table({k: metric_values(v["outcomes"]) for k, v in items.items()})
    c = design["config"]
    return {"design": design, "table": table, "hypotheses": contrasts(items, tuple(c["seeds"]), c["bootstrap"]),
            "seconds": seconds}


def contrasts(items: dict, seeds: tuple[int, ...], resamples: int, seed: int = 0) -> list[dict]:
    """Each hypothesis's contrast of test M.Avg (in points) with its paired bootstrap interval and verdict.

    ``items[(label, seed)]["outcomes"]`` are the test answers of a fine-tune (`stats`): every model must hold the
    same items. A resample draws test scenes (images) with replacement, all items of a scene together, and seeds
    with replacement, the same draws for every row (the pairing: one seed means the same batches in every row);
    M.Avg is the mean of the subsets' accuracies (`outcomes.bootstrap_contrast`).
    """
    import numpy as np

    from ..outcomes import bootstrap_contrast, check_same_items

    check_same_items([v["outcomes"] for v in items.values()], [str(k) for k in items])
    rng = np.random.default_rng(seed)
    out = []
    for name, claim, weights in HYPOTHESES:
        groups = {label: [items[(label, s)]["outcomes"] for s in seeds] for label in weights}
        result = bootstrap_contrast(groups, weights, ["M.Avg"], resamples, rng=rng, paired_runs=True)["M.Avg"]
        low, high = result["ci95"]
        result["verdict"] = "supported" if low > 0 else "contradicted" if high < 0 else "not resolved"
        out.append({"name": name, "claim": claim, "primary": name in PRIMARY, "contrast": weights,
                    "resolvable": (1.96 + 0.84) * result["se"]} | result)
    return out


def batch_size_sentence(design: dict) -> str:
    """How the design's rule chose N, in a sentence of a study's report."""
    share = by_loss_name(design["batch_size_choice"]["curves"])["infonce"]
    return (f"**N = {design['n']}** anchors per step: InfoNCE's hard-negative gradient share on the baseline's D_hc "
            "features was " + ", ".join(f"{v:.3f} at N = {n}" for n, v in sorted(share.items(),
                                                                                  key=lambda kv: int(kv[0])))
            + f" (rule: the smallest N below {design['config']['share_threshold']}"
            + ("" if design["batch_size_choice"]["rule_met"] else "; no candidate met it, so the largest was taken")
            + ").")


def recall_curve(curve: dict) -> str:
    """A validation curve's Recall@1 (mean of both directions, %) at each step."""
    return ", ".join(f"{100 * v['R@1']:.1f} at {s}" for s, v in sorted(curve.items(), key=lambda kv: int(kv[0])))


def study_report(result: dict, world_info: dict, run: dict) -> str:
    """The study's report; ``run``: its published ``run.json`` (the wall time, each start's code)."""
    design = result["design"]
    c = design["config"]
    curve = design["steps_choice"]["curve"]
    lines = [
        "# The study: do hard negatives and Cement teach composition on the toy world?", "",
        f"Design: docs/studies/study1.md, \"The study\" (pre-registered). {world_info['train']} training, "
        f"{world_info['val']} validation and {world_info['test']} test scenes (test items per subset: "
        + ", ".join(f"{k} {v}" for k, v in world_info["test_items"].items()) + f"); model `{c['model']}` pretrained "
        f"{c['pretrain_steps']} steps; seeds {', '.join(map(str, c['seeds']))}; "
        f"{wall_time_words(result['seconds'], counts_all_starts(run))}.",
        "", starts_words(run), "",
        batch_size_sentence(design), "",
        f"**T = {design['steps']}** steps: the control's validation Recall@1 (mean of both directions) was "
        + recall_curve(curve) + f" (rule: the first step within {c['plateau']} points of the best).", "",
        "## Hypotheses (test M.Avg, points; 95 % paired bootstrap interval over test scenes and seeds)", "",
        "| | claim | difference | 95 % interval | resolvable difference | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [contrast_row(f"{h['name']}{' (primary)' if h['primary'] else ''}", h["claim"], h)
              for h in result["hypotheses"]]
    lines += ["", f"{RESOLVABLE} Seven contrasts are reported without correction for multiplicity; H1 and H2 are "
              "the primary ones.", "", *all_rows(result["table"])]
    return "\n".join(lines) + "\n"
