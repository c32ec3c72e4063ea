"""`concrete-jungle demo`: the whole method, offline, on a CPU, in minutes, on the rendered toy world.

The shared stages (`stages.Stages`), in order:

1. world: render training scenes and a held-out compositional test (`toyworld.build`);
2. baseline: pretrain a tiny open_clip model (`cj-demo`, random init) with plain CLIP loss on the
   anchor pairs -- the "CLIP baseline";
3. plant: ConcreteBatch in modes hc, lc and wo, through ConcretePlant with the toy captioner and editor;
4. fine-tune the baseline with InfoNCE, static margin and Cement on D_hc, and Cement on D_lc and D_wo,
   for every seed, with the same steps, and the control without negatives;
5. evaluate every model on the toy SugarCrepe and retrieval with the evaluation suite; analyse the
   datasets (Table 1, Fig. 5) and the gradient share (Fig. 6) with `analysis`; a gallery of D_hc and D_lc;
   `report.md` with the tables and plots.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from pathlib import Path

from ..records import atomic_write_json, atomic_write_text
from ..toyworld.build import WorldConfig
from .report import TEST_COLUMNS, plot_training_curves, results_table, signed, table_markdown
from .stages import BASELINE, CONTROL, Finetune, StageConfig, Stages, baseline_label, log

DemoConfig = StageConfig  # the demo runs the stages at their defaults
QUICK = dict(world=WorldConfig(train=800, test=300), pretrain_steps=120, finetune_steps=25, seeds=(0,),
             analysis_pairs=256, gradient_batch_sizes=(8, 16, 32, 64, 128), gallery_sample=60)
# the paper's Table 2 rows that the toy world can make, after the control
FINETUNES = (CONTROL, Finetune("D_hc + InfoNCE", "infonce", "hc"), Finetune("D_hc + static margin", "static", "hc"),
             Finetune("D_hc + Cement", "cement", "hc"), Finetune("D_lc + Cement", "cement", "lc"),
             Finetune("D_wo + Cement", "cement", "wo"))


class Demo(Stages):
    def run(self) -> dict:
        c = self.c
        started = time.perf_counter()
        self.out.mkdir(parents=True, exist_ok=True)
        log("[1/5] rendering the toy world", self.console)
        world = self.timed("world", self.world)
        log("[2/5] pretraining the CLIP baseline (plain CLIP loss on anchor pairs)", self.console)
        baseline = self.timed("baseline", self.baseline, world)
        log("[3/5] ConcretePlant: D_hc, D_lc, D_wo", self.console)
        datasets = {m: self.timed("plant", self.plant, world, m) for m in ("hc", "lc", "wo")}
        log(f"[4/5] fine-tuning {len(FINETUNES)} settings x {len(c.seeds)} seed(s)", self.console)
        runs = {(row.label, seed): self.timed("finetune", self.finetune, baseline, datasets[row.mode], row, seed)
                for row in FINETUNES for seed in c.seeds}
        log("[5/5] evaluating, analysing, writing the report", self.console)
        test = self.test_data(world)
        from tqdm import tqdm

        models = [((BASELINE, None), baseline)] + list(runs.items())
        scores = {key: self.timed("evaluate", self.evaluate, ckpt, test)
                  for key, ckpt in tqdm(models, desc="evaluate", unit="model", disable=not self.progress)}
        analysed = self.timed("analysis", self.analyse, baseline, datasets)
        gallery = self.timed("gallery", self.gallery, datasets, Path(analysed["dir"]))
        curves = self.timed("report", plot_training_curves, runs, self.out / "training_curves.png")
        self.seconds["total"] = time.perf_counter() - started
        world_info = json.loads((world / "world.json").read_text())
        table = results_table(scores)
        result = {"table": table, "scores": {f"{k[0]}|{k[1]}": v for k, v in scores.items()},
                  "findings": findings(table, world_info["test_items"]), "analysis": analysed,
                  "seconds": self.seconds, "stage_seconds": self.stage_times, "config": asdict(c)}
        atomic_write_json(self.out / "results.json", result)
        atomic_write_text(self.out / "report.md", report(c, result, world_info, datasets, analysed, gallery, curves,
                                                         self.out))
        return result


def held_out_sentence(c: DemoConfig, world_info: dict) -> str:
    """What the held-out test scenes share with training under these settings (docs/studies/study2.md, "A world
    that cannot leak"): no test scene is a training scene, but the demo's defaults let the two meet."""
    shared = []
    if c.world.held_out == "content":
        shared.append("a test scene can share its things and relations with a training scene and differ only in "
                      "the light or the mood, which the test's captions do not name")
    if not c.no_leak:
        shared.append("a hard negative planted from a training scene can describe a test scene")
    sentence = f"{world_info['test']} held-out test scenes, none of them a training scene"
    if shared:
        sentence += (" (but " + ", and ".join(shared) + "; docs/studies/study2.md, \"A world that cannot leak\", "
                     "has the settings that rule this out)")
    return sentence


def timing_sentence(stage_times: dict[str, list[tuple[float | None, bool]]], seconds: dict[str, float]) -> str:
    """The time each stage took when it was made, kept in its folder (`Stages.account`), so a run that reuses it
    still reports what it cost; which stages were reused; and this invocation's own time. ``seconds``: this
    invocation's per stage (the gallery and the report are made every time)."""
    parts, made_in_all = [], 0.0
    for stage, now in seconds.items():
        if stage == "total":
            continue
        entries = stage_times.get(stage) or [(now, False)]
        kept = [s for s, _ in entries if s is not None]
        reused = sum(r for _, r in entries)
        made_in_all += sum(kept)
        n = len(entries)
        runs = f"{n} runs, " if n > 1 and len(kept) == n else ""
        notes = [runs + ("reused" if n == 1 else "all reused" if reused == n else f"{reused} reused")] if reused \
            else [runs.rstrip(", ")] if runs else []
        if len(kept) < n:
            untimed = n - len(kept)
            notes.append(("it was" if n == 1 else f"{untimed} of them {'was' if untimed == 1 else 'were'}") +
                         " made before stages kept their time")
        spent = (_duration(sum(kept)) + (f" for {len(kept)} of {n} runs" if len(kept) < n else "")) if kept else \
            "time not kept"
        parts.append(f"{stage} {spent}" + (f" ({'; '.join(notes)})" if notes else ""))
    return (f"Time each stage took when it was made (a reused stage: by the run that made it): {', '.join(parts)}; "
            f"{_duration(made_in_all)} in all. This invocation took {_duration(seconds.get('total', 0.0))}.")


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


def findings(table: dict, n_items: dict[str, int]) -> list[str]:
    """What the table says about the paper's claims, stated from the numbers, whichever way they fall.

    A difference counts when it exceeds twice its noise: the larger of the seed-to-seed standard error and
    the binomial standard error of an M.Avg over this many test items (per model; conservative, as both
    models answer the same items).
    """
    subsets = TEST_COLUMNS[:-1]

    def noise(label: str) -> tuple[float, float]:
        row = table[label]
        binomial = math.sqrt(sum((p := row[s][0] / 100) * (1 - p) / n_items[s] for s in subsets)) / len(subsets)
        _, std, n = row["M.Avg"]
        return 100 * binomial, std / math.sqrt(n) if n > 1 else 0.0

    def compare(a: str, b: str) -> str:
        ma, mb = table[a]["M.Avg"][0], table[b]["M.Avg"][0]
        (ba, sa), (bb, sb) = noise(a), noise(b)
        items, seeds = math.hypot(ba, bb), math.hypot(sa, sb)
        se = max(items, seeds)
        source = "test items" if items >= seeds else "seeds"
        delta = ma - mb
        verdict = "beats" if delta > 2 * se else "trails" if delta < -2 * se else "is within noise of"
        # the difference of the values as printed, so that it reads right (62.1 vs 61.4: +0.7, not the unrounded
        # +0.8); the verdict weighs the unrounded one
        shown = round(ma, 1) - round(mb, 1)
        return (f"{a} {verdict} {b}: M.Avg {ma:.1f} vs {mb:.1f}, {signed(shown)} points (standard error {se:.1f}, "
                f"from the {source}).")

    return [compare("D_hc + InfoNCE", CONTROL.label), compare("D_hc + Cement", "D_hc + InfoNCE"),
            compare("D_hc + Cement", "D_hc + static margin"), compare("D_hc + Cement", "D_lc + Cement"),
            compare("D_hc + Cement", "D_wo + Cement"), compare(CONTROL.label, BASELINE),
            compare("D_hc + Cement", BASELINE)]


def dataset_finding(summaries: dict) -> str:
    """How the edits of D_hc and D_lc differ, in the two numbers the paper's argument rests on."""
    hc, lc = summaries["D_hc"], summaries["D_lc"]
    closer = "closer to" if lc["clip_v"] > hc["clip_v"] else "no closer to"
    return (f"Image side: the negative images of D_lc are {closer} "
            f"their anchors than those of D_hc (CLIP-V {lc['clip_v']:.3f} vs {hc['clip_v']:.3f}); the baseline tells "
            f"the true caption from the negative (I2T) in {100 * hc['i2t']:.1f}% of D_hc pairs and "
            f"{100 * lc['i2t']:.1f}% of D_lc pairs.")


def report(c: DemoConfig, result: dict, world_info: dict, datasets: dict, analysed: dict, gallery: Path,
           curves: Path, out: Path) -> str:
    from ..analysis.statistics import SCHEDULES, table1_markdown
    from ..analysis.figures import LABELS

    rel = lambda p: Path(p).resolve().relative_to(out.resolve()).as_posix()  # noqa: E731
    lines = [
        "# concrete-jungle demo: the method on a rendered toy world", "",
        f"{world_info['train']} training scenes, {held_out_sentence(c, world_info)}; model `{c.model}` from random "
        f"init, pretrained {c.pretrain_steps} steps with CLIP loss, then fine-tuned {c.finetune_steps} steps at "
        f"batch size {c.batch_size} per setting, seeds {', '.join(map(str, c.seeds))}. "
        f"{timing_sentence(result['stage_seconds'], result['seconds'])}", "",
        "## Compositional test and retrieval (like the paper's Table 2)", "",
        "Accuracy (%) on the toy SugarCrepe subsets (items per subset: " +
        ", ".join(f"{k} {v}" for k, v in world_info["test_items"].items()) + ") and Recall@1 (%) on the test "
        "images; mean ± standard deviation over seeds.", "",
        table_markdown(result["table"]), "", "### What it shows", "",
        *[f"- {f}" for f in result["findings"]],
        "", "How the standard error of a difference is computed: the larger of (a) the binomial standard error of "
        "each model's M.Avg over this many test items, combined for the two models as if they were independent "
        "(conservative: both answer the same items), and (b) the standard error of each row's mean over its seeds "
        "(0 for the baseline, one run), combined the same way. With one seed, or when the test set is small, (a) "
        "decides, and then every comparison has nearly the same standard error. A difference counts when it "
        "exceeds twice it. `concrete-jungle demo --study` replaces this with a paired bootstrap.", "",
        "The control row is the D_hc + InfoNCE fine-tune with every hard negative masked out: "
        "the same anchors, steps and data order, so D_hc + InfoNCE minus the control is what the hard negatives "
        "add. The world is not tuned to favour any setting; these are the numbers this run produced. A run of "
        "this size cannot separate the losses; `concrete-jungle demo --study` is the experiment powered to "
        "(docs/studies/study1.md).", "",
        "## The hard negatives (like the paper's Table 1)", "",
        f"Statistics of each ConcreteBatch under the CLIP baseline (first {c.analysis_pairs} pairs; "
        "`concrete-jungle analyze`; BERTScore and DINOScore need real models and are left out here). The paper's "
        "columns are COCO with SDXL-Turbo edits under PE-Core-L, shown for orientation only: the toy world has "
        "a few dozen words and 64-pixel renders, so its values (unique keywords above all) are not comparable; "
        "compare the toy datasets with each other.", "",
        table1_markdown(analysed["summaries"], analysed["modes"], baseline_label(c.model)), "",
        dataset_finding(analysed["summaries"]), "",
        f"Full analysis: [{rel(Path(analysed['dir']) / 'report.md')}]({rel(Path(analysed['dir']) / 'report.md')}); "
        f"gallery of D_hc and D_lc side by side: [{rel(gallery)}]({rel(gallery)}).", "",
        "## Training curves", "", f"![training curves]({rel(curves)})", "",
        f"Per fine-tuning step, {'the mean over ' + str(len(c.seeds)) + ' seeds' if len(c.seeds) > 1 else 'one seed'}"
        " of each row. Left: each row's loss divided by its own value at the first step; the losses themselves are "
        "not one quantity (the control's over its N anchors' rows, the others' over 2N rows, static margin and "
        "Cement with margins), so their levels do not compare: each curve says how its own loss moved from its "
        "start. Right: the share of the gradient that reaches the hard negative (the control has none).", "",
        "## Hard-negative gradient share against batch size (like the paper's Fig. 6)", "",
        f"![gradient share]({rel(Path(analysed['dir']) / 'gradient_share.png')})", "",
    ]
    curves = analysed["gradient_share"]
    schedules = [s for s in SCHEDULES if s in curves]
    lines += ["| N | " + " | ".join(LABELS[s] for s in schedules) + " |", "| --- |" + " --- |" * len(schedules)]
    lines += [f"| {n} | " + " | ".join(f"{curves[s][n]:.3f}" for s in schedules) + " |"
              for n in sorted(curves[schedules[0]], key=int)]
    return "\n".join(lines) + "\n"
