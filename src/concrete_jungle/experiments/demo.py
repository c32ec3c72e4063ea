"""`concrete-jungle demo`: the whole method, offline, on a CPU, in minutes, on the rendered toy world.

The shared stages (`stages.Stages`), in order:

1. world: render training scenes and a held-out compositional test (`toyworld.build`);
2. baseline: pretrain a tiny open_clip model (`cj-demo`, random init) with plain CLIP loss on the
   anchor pairs -- the "CLIP baseline";
3. plant: ConcreteBatch in modes hc, lc and wo, through ConcretePlant with the toy captioner and editor;
4. fine-tune the baseline with InfoNCE, static margin and Cement on D_hc, and Cement on D_lc and D_wo,
   for every seed, with the same steps, and the control without negatives; and the positive control, which
   shows the instrument registering an effect: the test's own swap edits made on training scenes (D_swap, every
   negative picture one the anchor's caption is false of) against the same records with every negative masked;
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
from .gate import build_positive_control
from .report import TEST_COLUMNS, plot_training_curves, results_table, signed, table_markdown
from .stages import BASELINE, CONTROL, STAGE_SECONDS, Finetune, StageConfig, Stages, baseline_label, log

DemoConfig = StageConfig  # the demo runs the stages at their defaults
QUICK = dict(world=WorldConfig(train=800, test=300), pretrain_steps=120, finetune_steps=25, seeds=(0,),
             analysis_pairs=256, gradient_batch_sizes=(8, 16, 32, 64, 128), gallery_sample=60)
# the paper's Table 2 rows that the toy world can make, after the control
FINETUNES = (CONTROL, Finetune("D_hc + InfoNCE", "infonce", "hc"), Finetune("D_hc + static margin", "static", "hc"),
             Finetune("D_hc + Cement", "cement", "hc"), Finetune("D_lc + Cement", "cement", "lc"),
             Finetune("D_wo + Cement", "cement", "wo"))
# the positive control (docs/studies/gate2.md, control A): does the testbed register a method that works? The test's
# own swap edits made on training scenes, a pair dropped where its negative reads true of the anchor's picture or
# the anchor's caption reads true of the negative picture, so every negative is a true one; against the same
# records, seeds and batches with every negative masked, on the subsets those edits make
SWAP_CONTROL = {"edit_kinds": ["swap_att", "swap_obj"], "from": "training scenes only",
                "refusal": "named part of a held-out scene", "drop_entailed": True, "seed": 0}
SWAP_DATA = "D_swap"
POSITIVE = (Finetune("positive control: swap negatives", "infonce", "swap"),
            Finetune("positive control: the same records, negatives masked", "infonce", "swap", negatives=False))
POSITIVE_OUTCOME = "SWAP"  # the mean of swap_att and swap_obj


# seconds of one unit of each stage's work on 2 idle cores, from the stage times of docs/benchmarks.md ("The demo's
# wall time", the default run): the demo's estimate of its time at the start; the time left then follows the pace
# the run keeps
PACE = {"world": 0.0015,  # per scene rendered
        "baseline": 0.128,  # per pretraining step of 64 pairs
        "plant": 0.0025,  # per training scene planted
        "finetune": 0.164,  # per fine-tuning step of 64 anchors and 64 negatives
        "evaluate": 0.0018,  # per test scene, per model
        "analysis": 4.0, "gallery": 0.5, "report": 0.5}  # per run


def estimate(c: DemoConfig) -> dict[str, float]:
    """The seconds one call of each stage takes, at `PACE`, under these settings (nothing reused)."""
    w = c.world
    return {"world": PACE["world"] * (w.train + w.test + w.val),
            "baseline": PACE["baseline"] * c.pretrain_steps * c.batch_size / 64,
            "plant": PACE["plant"] * w.train, "finetune": PACE["finetune"] * c.finetune_steps * c.batch_size / 64,
            "evaluate": PACE["evaluate"] * w.test, "analysis": PACE["analysis"], "gallery": PACE["gallery"],
            "report": PACE["report"]}


def calls(c: DemoConfig) -> dict[str, int]:
    """How many times the demo runs each stage."""
    runs = (len(FINETUNES) + len(POSITIVE)) * len(c.seeds)
    return {"world": 1, "baseline": 1, "plant": 4, "finetune": runs, "evaluate": 1 + runs, "analysis": 1,
            "gallery": 1, "report": 1}


class TimeLeft:
    """The demo's estimate of its time, said at the start, and the time left as it goes: the estimate of the work
    not done yet at the pace kept so far. On a terminal one line updated in place (a bar over the estimated
    seconds, so its time left is exactly that); piped, or without progress bars, a plain line after each stage."""

    QUIET = ("evaluate", "gallery", "report")  # seconds each, at the end: no line of their own when piped

    def __init__(self, seconds: float, console=None, in_place: bool = False):
        self.total, self.done, self.console = seconds, 0.0, console
        self.started = time.perf_counter()
        log(f"estimated time: {_minutes(seconds)} on 2 idle cores (docs/benchmarks.md, \"The demo's wall time\"); "
            "longer on a busy machine, less where finished stages are reused", console)
        self.bar = None
        if in_place:
            from tqdm import tqdm

            self.bar = tqdm(total=seconds, smoothing=0, position=0, leave=False,
                            bar_format="demo {percentage:3.0f}% | {elapsed} elapsed, about {remaining} left")

    def advance(self, stage: str, seconds: float) -> None:
        """A call of ``stage`` finished, ``seconds`` of the estimate."""
        self.done = min(self.total, self.done + seconds)
        if self.bar is not None:
            self.bar.update(seconds)
        elif stage not in self.QUIET:
            elapsed = time.perf_counter() - self.started
            left = (self.total - self.done) * elapsed / self.done if self.done else self.total
            log(f"    {stage} done: {_minutes(elapsed)} so far, about {_minutes(left)} left", self.console)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 60 else f"{int(seconds // 60)} min {seconds % 60:02.0f} s"


class Demo(Stages):
    def timed(self, name: str, fn, *args):
        result = super().timed(name, fn, *args)
        self.time_left.advance(name, self.per_call[name])
        return result

    def run(self) -> dict:
        import sys

        c = self.c
        self.per_call = estimate(c)
        self.time_left = TimeLeft(sum(self.per_call[k] * n for k, n in calls(c).items()), self.console,
                                  in_place=self.progress and sys.stderr.isatty())
        try:
            return self.stages()
        finally:
            self.time_left.close()

    def stages(self) -> dict:
        c = self.c
        started = time.perf_counter()
        self.out.mkdir(parents=True, exist_ok=True)
        log("[1/5] rendering the toy world", self.console)
        world = self.timed("world", self.world)
        log("[2/5] pretraining the CLIP baseline (plain CLIP loss on anchor pairs)", self.console)
        baseline = self.timed("baseline", self.baseline, world)
        log("[3/5] ConcretePlant: D_hc, D_lc, D_wo", self.console)
        datasets = {m: self.timed("plant", self.plant, world, m) for m in ("hc", "lc", "wo")}
        swaps = self.timed("plant", self.swap_data, world)
        log(f"[4/5] fine-tuning {len(FINETUNES)} settings and the positive control's {len(POSITIVE)} arms x "
            f"{len(c.seeds)} seed(s)", self.console)
        runs = {(row.label, seed): self.timed("finetune", self.finetune, baseline, datasets[row.mode], row, seed)
                for row in FINETUNES for seed in c.seeds}
        arms = {(row.label, seed): self.timed("finetune", self.finetune, baseline, swaps, row, seed)
                for row in POSITIVE for seed in c.seeds}
        log("[5/5] evaluating, analysing, writing the report", self.console)
        test = self.test_data(world)
        from tqdm import tqdm

        models = [((BASELINE, None), baseline)] + list(runs.items())
        scores = {key: self.timed("evaluate", self.evaluate, ckpt, test)
                  for key, ckpt in tqdm(models, desc="evaluate", unit="model", disable=not self.progress)}
        answers = {key: self.timed("evaluate", self.evaluate, ckpt, test, "test_outcomes.json", True)
                   for key, ckpt in arms.items()}
        analysed = self.timed("analysis", self.analyse, baseline, datasets)
        gallery = self.timed("gallery", self.gallery, datasets, Path(analysed["dir"]))
        curves = self.timed("report", plot_training_curves, runs, self.out / "training_curves.png")
        positive = positive_control(answers, c.seeds, json.loads((swaps / "summary.json").read_text()))
        self.seconds["total"] = time.perf_counter() - started
        world_info = json.loads((world / "world.json").read_text())
        table = results_table(scores)
        result = {"table": table, "scores": {f"{k[0]}|{k[1]}": v for k, v in scores.items()},
                  "findings": findings(table, world_info["test_items"]), "positive_control": positive,
                  "analysis": analysed,
                  "seconds": self.seconds, "stage_seconds": self.stage_times, "config": asdict(c)}
        atomic_write_json(self.out / "results.json", result)
        atomic_write_text(self.out / "report.md", report(c, result, world_info, datasets, analysed, gallery, curves,
                                                         self.out))
        return result

    def swap_data(self, world: Path) -> Path:
        """The positive control's records (`SWAP_CONTROL`), built once and reused like any stage."""
        start = time.perf_counter()
        data = build_positive_control(world, self.out, {"positive_control": SWAP_CONTROL,
                                                        "world": asdict(self.c.world)}, name=SWAP_DATA)
        record = data.parent / STAGE_SECONDS  # written once the records are: present before, they were reused
        reused = record.is_file()
        if reused:
            self.reused(SWAP_DATA)
        self.account("plant", record, start, reused)
        return data


def positive_control(answers: dict, seeds: tuple[int, ...], summary: dict) -> dict:
    """The positive control's result: each arm's `POSITIVE_OUTCOME` (mean over seeds, %), their difference in points
    with its 95 % interval from the paired bootstrap over test images and seeds (`outcomes.bootstrap_contrast`, as the
    studies' contrasts: the same images and the same seed's batches in both arms), its verdict (the interval
    above 0: the testbed registered the effect), and the records' counts (``summary``: the dataset's)."""
    import numpy as np

    from ..outcomes import bootstrap_contrast, check_same_items, metric_values

    trained, masked = (row.label for row in POSITIVE)
    groups = {label: [answers[(label, s)]["outcomes"] for s in seeds] for label in (trained, masked)}
    check_same_items([run for runs in groups.values() for run in runs], [f"{k[0]}, seed {k[1]}" for k in answers])
    contrast = bootstrap_contrast(groups, {trained: 1, masked: -1}, [POSITIVE_OUTCOME], rng=np.random.default_rng(0),
                                  paired_runs=True)[POSITIVE_OUTCOME]
    low, high = contrast["ci95"]
    return {"outcome": POSITIVE_OUTCOME, "difference": contrast["estimate"], "ci95": contrast["ci95"],
            "se": contrast["se"], "units": contrast["units"],
            "verdict": "registered" if low > 0 else "reversed" if high < 0 else "not resolved",
            "arms": {label: 100 * float(np.mean([metric_values(run, names=[POSITIVE_OUTCOME])[POSITIVE_OUTCOME]
                                                 for run in runs])) for label, runs in groups.items()},
            "records": summary["per_edit"], "dropped": summary["dropped"]}


def positive_control_finding(p: dict) -> str:
    """The positive control in one sentence, whichever way it fell."""
    trained, masked = (row.label for row in POSITIVE)
    low, high = p["ci95"]
    numbers = (f"{p['outcome']} {p['arms'][trained]:.1f} with swap negatives vs {p['arms'][masked]:.1f} masked, "
               f"{signed(p['difference'])} points (95 % interval {signed(low)} to {signed(high)})")
    if p["verdict"] == "registered":
        return f"The positive control registers: {numbers}: the testbed detects negatives that teach."
    if p["verdict"] == "reversed":
        return f"The positive control is reversed: {numbers}: the swap negatives lowered the outcome they make."
    return (f"The positive control is not resolved at this size: {numbers}; the interval includes 0, so this run "
            "cannot tell an effect of this size from noise.")


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


def positive_control_markdown(p: dict) -> str:
    """The positive control's row: the outcome of each arm, the difference with its interval, the verdict, the
    records trained on and those dropped."""
    trained, masked = (row.label for row in POSITIVE)
    low, high = p["ci95"]
    dropped = "; ".join(f"{reason}: {sum(kinds.values())}" for reason, kinds in p["dropped"].items()) or "none"
    return "\n".join([
        "| outcome | swap negatives | negatives masked | difference (points) | 95 % interval | verdict | records "
        "(dropped) |", "| --- | --- | --- | --- | --- | --- | --- |",
        f"| {p['outcome']} | {p['arms'][trained]:.1f} | {p['arms'][masked]:.1f} | {signed(p['difference'])} | "
        f"[{signed(low)}, {signed(high)}] | **{p['verdict']}** | "
        + ", ".join(f"{k} {v}" for k, v in p["records"].items()) + f" ({dropped}) |"])


def report(c: DemoConfig, result: dict, world_info: dict, datasets: dict, analysed: dict, gallery: Path,
           curves: Path, out: Path) -> str:
    from ..analysis.dataset_statistics import SCHEDULES, table1_markdown
    from ..analysis.figures import LABELS

    rel = lambda p: Path(p).resolve().relative_to(out.resolve()).as_posix()  # noqa: E731
    lines = [
        "# concrete-jungle demo: the method on a rendered toy world", "",
        f"{world_info['train']} training scenes, {held_out_sentence(c, world_info)}; model `{c.model}` from random "
        f"init, pretrained {c.pretrain_steps} steps with CLIP loss, then fine-tuned {c.finetune_steps} steps at "
        f"batch size {c.batch_size} per setting, seeds {', '.join(map(str, c.seeds))}. "
        f"{timing_sentence(result['stage_seconds'], result['seconds'])}", "",
        "## The instrument: a positive control", "",
        positive_control_markdown(result["positive_control"]), "",
        f"{positive_control_finding(result['positive_control'])}", "",
        "Does this testbed register a method that works? Fine-tuning on negatives made by the test's own swap edits "
        "(swap_att and swap_obj) of training scenes, every negative a true one (a pair is dropped where its "
        "negative caption reads true of the anchor's picture, or the anchor's caption reads true of the negative "
        "picture, as `toyworld.viewer` reads them), against the same records, seeds and batches with every "
        f"negative masked; the outcome is {result['positive_control']['outcome']}, the mean of the two subsets "
        "those edits make (docs/studies/gate2.md, control A). The interval is the paired bootstrap over test "
        "images and seeds (2,000 resamples), as the studies' contrasts. The negatives match the test on purpose: "
        "a registered effect shows the fine-tune and the test can see negatives teach, not that a method "
        "learned composition. Read the rows below with it.", "",
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
