"""`concrete-jungle study run gate`: can the toy world register a method that works? (design: docs/studies/gate.md)

A positive control, the same fine-tune as Study 2's with hard negatives made by the test's own generator
(`toyworld.build.negatives`, every edit kind, applied to training scenes only), must beat the control (the same
records, every negative masked) on the matched subsets by a pre-registered margin. The rungs of a ladder (model,
pretraining length) run smallest first; the first that passes is the gated model and no later rung runs.

The design is read from a JSON file (``docs/studies/gate/design.json``, committed before the run) and published
unchanged; the positive control's dataset counts go into the published ``world.json``. `summarise` computes every
rung's result from the answers alone, so `concrete-jungle study report` rebuilds them from the published files.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from ..concretebatch import ShardWriter, encode_jpeg, sample_key, shard_name, write_shard_manifest
from ..records import atomic_write_json, atomic_write_jsonl, atomic_write_text, read_jsonl
from ..toyworld.build import SUBSETS, WorldConfig, named_part, negatives
from ..toyworld.entailment import anchor_true_of
from ..toyworld.viewer import described, reads_true
from ..toyworld.world import parse_caption, render, scene_clause
from .published import RESTORE, PublishedError, counts_all_starts, publish, starts_words, wall_time_words
from .report import results_table, signed, table_markdown
from .stages import Finetune, StageConfig, Stages, log, stage_dir
from .study import Study

DESIGN = "docs/studies/gate/design.json"
DESIGN_SECTION = ("docs/studies/gate.md", "## Pre-registration")  # committed with the design file (`preregistration`)
POSITIVE = "positive control"
CONTROL = "control"
BASELINE = "CLIP baseline"
DATASET = "D_gate"
KEYS = ("world", "positive_control", "pretrain", "finetune", "ladder", "seeds", "outcome", "margin", "bootstrap")
# the warm-ups `Stages` trains with: a design must state them as they are
STAGE_WARMUP = {"pretrain": 20, "finetune": 5}
PROFILES = {"cpu": {}}  # the ladder is the design's; a GPU ladder is not designed yet


class GateDesignError(ValueError):
    """A gate design file that cannot be run as written."""


@dataclass(frozen=True)
class GateConfig:
    out: str = "runs/gate"
    design: str = DESIGN  # the pre-registered design, read by the runner and published unchanged


def read_study_design(path: str | Path, study: str, keys: tuple[str, ...], default: str, error: type) -> dict:
    """A gate's design file (``study``: its name, ``keys``: what it must hold, ``default``: the pre-registered
    file), with the warm-ups the stages train with; ``error`` naming the file and the fix otherwise."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{study} design {path} not found; run from the repository root or pass --design FILE "
                    f"(the pre-registered one is {default})")
    design = json.loads(path.read_text())
    missing = [k for k in keys if k not in design]
    if design.get("study") != study or missing:
        raise error(f"{path} is not a {study} design (study {study!r} with {', '.join(keys)}; missing: "
                    f"{', '.join(missing) or 'study'}); restore {default}")
    for part, warmup in STAGE_WARMUP.items():
        if design[part]["warmup"] != warmup:
            raise error(f"{path}: {part} warmup {design[part]['warmup']} is not the {warmup} steps the stages "
                        "train with; write the design as it will run")
    return design


def read_design(path: str | Path) -> dict:
    """The gate's design, checked for what the runner needs; an error naming the file and the fix."""
    design = read_study_design(path, "gate", KEYS, DESIGN, GateDesignError)
    if len({r["rung"] for r in design["ladder"]}) != len(design["ladder"]):
        raise GateDesignError(f"{path}: two rungs of the ladder share a name; give each its own")
    return design


def labels(rung: str) -> dict[str, str]:
    """A rung's rows as the answers name them."""
    return {"baseline": f"{rung}: {BASELINE}", "positive": f"{rung}: {POSITIVE}", "control": f"{rung}: {CONTROL}"}


# ------------------------------------------------------------------------------------------- the positive control


def changed_scene(scene, subset: str, negative: str):
    """The scene a negative caption describes, with the anchor's layout, light and mood: the picture the toy editor
    would draw. add_att's captions name shapes only, so its scene is the anchor's with that one thing recoloured."""
    if subset == "add_att":
        k = next(i for i, thing in enumerate(described(negative)[0]) if "colour" in thing)
        things = list(scene.things)
        things[k] = replace(things[k], colour=described(negative)[0][k]["colour"])
        return replace(scene, things=tuple(things))
    return parse_caption(negative + scene_clause(scene), scene.layout)


def positive_control_pairs(rows: list[dict], seed: int, mirror_relations: bool):
    """Every (record, reason) the test's generator gives on a world's training scenes (``rows``: its scenes.jsonl,
    or `build.sample_world`'s rows): reason None for a kept pair, else why it is dropped (its negative reads true of
    the anchor's picture; its scene has a held-out scene's named part). Held-out scenes are read only for the
    refusal, never as anchors."""
    held_out = {named_part(r["key"]) for r in rows if r["split"] != "train"}
    for row in rows:
        if row["split"] != "train":
            continue
        scene = parse_caption(row["captions"][0], row["layout"])
        made = negatives(scene, random.Random(f"{seed}\x00gate\x00{row['id']}"), mirror_relations=mirror_relations)
        for subset, (positive, negative) in made.items():
            changed = changed_scene(scene, subset, negative)
            reason = "reads true of the anchor's picture" if reads_true(negative, scene) else \
                "a held-out scene's named part" if named_part(changed.key()) in held_out else None
            yield {"id": f"{row['id']}:{subset}", "scene": row["id"], "split": row["split"], "edit": subset,
                   "image": row["image"], "caption": positive, "negative": negative, "changed": changed}, reason


ENTAILED = "the anchor's caption reads true of the negative picture"  # a reason gate 2's control A drops a pair


def build_positive_control(world: Path, out: Path, design: dict, per_shard: int = 1000, name: str = DATASET) -> Path:
    """The positive control's ConcreteBatch in the stage ``name`` (one record per training scene and edit kind of
    the design's ``positive_control.edit_kinds``; with its ``drop_entailed``, a pair whose anchor caption reads true
    of its negative picture is dropped: every kept negative picture is then a true negative), reused once finished
    (`build_pairs`)."""
    control = design["positive_control"]
    settings = {"world": str(world), "positive_control": control}
    return build_pairs(world, stage_dir(out, name, settings) / name, control["seed"],
                       design["world"].get("test_negatives") == "viewer",
                       [s for s in SUBSETS if s in control.get("edit_kinds", SUBSETS)],
                       drop_entailed=bool(control.get("drop_entailed")), per_shard=per_shard)


def build_pairs(world: Path, d: Path, seed: int, mirror: bool, kinds, drop_entailed: bool,
                per_shard: int = 1000) -> Path:
    """A ConcreteBatch in ``d`` of the test generator's pairs of the edit ``kinds`` on a world's training scenes
    (`positive_control_pairs`), reused once finished; its summary.json holds the counts per edit kind, the pairs
    dropped, with their reasons, and per edit kind the kept pairs whose anchor caption the viewer reads true of the
    negative picture (each record's negative carries that decision as ``anchor_true_of_negative``). With
    ``drop_entailed`` such a pair is dropped instead, counted under `ENTAILED`."""
    if (d / "summary.json").is_file():
        return d
    d.mkdir(parents=True, exist_ok=True)
    kept: dict[str, int] = {s: 0 for s in kinds}
    entailed_per_edit: dict[str, int] = {s: 0 for s in kinds}  # kept pairs whose anchor caption is true of v'
    dropped: dict[str, dict[str, int]] = {}
    manifest, rows, writer, index = [], [], None, 0
    for record, reason in positive_control_pairs(read_jsonl(world / "scenes.jsonl"), seed, mirror):
        if record["edit"] not in kinds:
            continue
        # the viewer reads whether the anchor's caption is still true of the negative picture (an entailed negative)
        entailed = anchor_true_of(record["caption"], record["changed"])
        reason = reason or (ENTAILED if drop_entailed and entailed else None)
        if reason:
            dropped.setdefault(reason, {}).setdefault(record["edit"], 0)
            dropped[reason][record["edit"]] += 1
            continue
        writer = writer or ShardWriter(d / shard_name(index))
        # no keyword is rated: InfoNCE reads no concreteness, and a record must hold a finite one ("rated": False)
        writer.write(sample_key(record["id"]), (world / "images" / record["image"]).read_bytes(), record["caption"],
                     encode_jpeg(render(record["changed"]), quality=95), record["negative"],
                     {"id": record["id"], "scene": record["scene"], "edit": record["edit"], "concreteness": 0.0,
                      "rated": False, "negatives": [{"concreteness": 0.0, "anchor_true_of_negative": entailed,
                                                     "entailment": {"by": "toyworld.viewer"}}]})
        rows.append({"id": record["id"], "status": "ok", "shard": shard_name(index), "edit": record["edit"]})
        kept[record["edit"]] += 1
        entailed_per_edit[record["edit"]] += entailed
        if writer.count == per_shard:
            write_shard_manifest(d, index, rows, writer.commit())
            manifest, rows, writer, index = manifest + rows, [], None, index + 1
    if writer is not None:
        write_shard_manifest(d, index, rows, writer.commit())
        manifest += rows
    atomic_write_jsonl(d / "manifest.jsonl", manifest)
    atomic_write_json(d / "summary.json", {"ok": len(manifest), "per_edit": kept, "dropped": dropped,
                                           "anchors_from": "train", "anchor_true_of_negative": entailed_per_edit})
    return d


# ----------------------------------------------------------------------------------------------------- the runner


class Gate(Study):
    def __init__(self, config: GateConfig, progress: bool = True, console=None, preregistration: dict | None = None):
        self.c = config
        self.out = Path(config.out)
        self.console = console
        self.preregistration = preregistration
        self.progress = progress
        self.design = read_design(config.design)

    def rung_stages(self, rung: dict) -> Stages:
        d = self.design
        return Stages(StageConfig(out=str(self.out), world=WorldConfig(**d["world"]), model=rung["model"],
                                  batch_size=d["pretrain"]["batch_size"], pretrain_steps=rung["pretrain_steps"],
                                  pretrain_lr=d["pretrain"]["lr"], finetune_lr=d["finetune"]["lr"],
                                  seeds=tuple(d["seeds"])), progress=self.progress, console=self.console)

    def run(self) -> dict:
        d = self.design
        self.start_clock()
        self.stage("[1/3] rendering the toy world and the positive control's data (the test's edits, training scenes)")
        first = self.rung_stages(d["ladder"][0])
        world = first.world()
        data = build_positive_control(world, self.out, d)
        test = first.test_data(world, "test")
        items: dict = {}
        curves: dict = {}
        rows = (("positive", Finetune(POSITIVE, d["finetune"]["loss"], "gate")),
                ("control", Finetune(CONTROL, d["finetune"]["loss"], "gate", negatives=False)))
        for k, rung in enumerate(d["ladder"], 1):
            self.stage(f"[2/3] rung {rung['rung']} ({k} of {len(d['ladder'])}): {rung['model']}, "
                       f"{rung['pretrain_steps']} pretraining steps; both arms x {len(d['seeds'])} seeds")
            stages, names = self.rung_stages(rung), labels(rung["rung"])
            baseline = stages.baseline(world)
            runs = {(names["baseline"], None): baseline}
            for seed in d["seeds"]:
                for arm, row in rows:
                    runs[(names[arm], seed)] = stages.finetune(baseline, data, row, seed,
                                                               batch_size=d["finetune"]["batch_size"],
                                                               steps=d["finetune"]["steps"])
                    self.lap()
            for key, checkpoint in runs.items():
                items[key] = stages.evaluate(checkpoint, test, name="test_outcomes.json", per_item=True)
                curves[key] = [r for r in read_jsonl(checkpoint.parent.parent / "metrics.jsonl") if "loss" in r]
            result = rung_result(rung, items, d)
            log(f"    {rung['rung']}: positive control - control {signed(result['mean'], 2)} points of "
                f"{d['outcome']['metric']} (seed-level 95 % [{signed(result['t95'][0], 2)}, "
                f"{signed(result['t95'][1], 2)}]) -> {'passes' if result['passes'] else 'does not pass'}",
                self.console)
            if result["passes"]:
                break
        self.stage("[3/3] publishing the answers and the gate's result")
        world_info = json.loads((world / "world.json").read_text()) | {
            "positive_control": json.loads((data / "summary.json").read_text())}
        return publish_result(self, world_info, items, curves, summarise, study_report, GateDesignError)


def publish_result(runner, world_info: dict, items: dict, curves: dict, summarise, report, error: type) -> dict:
    """A gate's last stage: publish its files with the design unchanged (``error`` if publishing would change the
    pre-registered file), then ``summarise``'s results.json and ``report``'s study.md beside them."""
    seconds = round(runner.lap(), 1)
    design_text = Path(runner.c.design).read_text()
    publish(runner.out / "published", runner.design, world_info, items, seconds, runner.starts.starts, curves)
    if (runner.out / "published" / "design.json").read_text() != design_text:
        raise error(f"{runner.c.design} is not written as a study publishes JSON (sorted keys, indent 2): the "
                    "published design would differ from the pre-registered file")
    result = summarise(runner.design, items, seconds)
    atomic_write_json(runner.out / "results.json", result)
    atomic_write_text(runner.out / "study.md", report(result, world_info, {"seconds": seconds,
                                                                           "starts": runner.starts.starts}))
    return result


# ------------------------------------------------------------------------------------------------------ analysis


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile (p > 0.5) by bisection on its CDF, integrated with Simpson's rule."""
    const = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(x: float, n: int = 4000) -> float:
        h = x / n
        f = [const * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(n + 1)]
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))

    low, high = 0.0, 1000.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < p else (low, mid)
    return (low + high) / 2


def seed_interval(diffs: list[float], confidence: float) -> tuple[float, float, float, float]:
    """(mean, sd, low, high) of per-seed differences: the two-sided t interval with seeds - 1 degrees of freedom."""
    mean = statistics.fmean(diffs)
    sd = statistics.stdev(diffs) if len(diffs) > 1 else float("nan")
    half = t_quantile(0.5 + confidence / 2, len(diffs) - 1) * sd / math.sqrt(len(diffs)) if len(diffs) > 1 \
        else float("nan")
    return mean, sd, mean - half, mean + half


def rung_result(rung: dict, items: dict, design: dict) -> dict:
    """One rung's gate: per seed, positive control - control on the outcome metric (points), the seed-level t
    interval, the pass by the margin, each subset's difference, and the scene-and-seed bootstrap interval."""
    import numpy as np

    from ..outcomes import bootstrap_contrast, metric_values

    names, seeds, margin = labels(rung["rung"]), design["seeds"], design["margin"]
    metric = design["outcome"]["metric"]
    values = {arm: [metric_values(items[(names[arm], s)]["outcomes"]) for s in seeds]
              for arm in ("positive", "control")}

    def differences(column: str) -> list[float]:
        return [100 * (p[column] - c[column]) for p, c in zip(values["positive"], values["control"])]

    mean, sd, low, high = seed_interval(differences(metric), margin["confidence"])
    subsets = {}
    for subset in design["outcome"]["subsets"]:
        m, s, lo, hi = seed_interval(differences(subset), margin["confidence"])
        subsets[subset] = {"mean": m, "sd": s, "t95": [lo, hi]}
    groups = {names[arm]: [items[(names[arm], s)]["outcomes"] for s in seeds] for arm in ("positive", "control")}
    boot = bootstrap_contrast(groups, {names["positive"]: 1, names["control"]: -1}, [metric], design["bootstrap"],
                              rng=np.random.default_rng(0), paired_runs=True)[metric]
    passes = mean >= margin["mean_at_least"] and low > margin["seed_t_lower_above"]
    return {"rung": rung["rung"], "model": rung["model"], "pretrain_steps": rung["pretrain_steps"],
            "per_seed": differences(metric), "mean": mean, "sd": sd, "t95": [low, high],
            "t_quantile": t_quantile(0.5 + margin["confidence"] / 2, len(seeds) - 1), "passes": passes,
            "subsets": subsets, "bootstrap": {"ci95": boot["ci95"], "se": boot["se"], "p": boot["p"]},
            "baseline": 100 * metric_values(items[(names["baseline"], None)]["outcomes"])[metric],
            "control": statistics.fmean(100 * v[metric] for v in values["control"]),
            "positive": statistics.fmean(100 * v[metric] for v in values["positive"])}


def rungs_run(design: dict, items: dict) -> list[dict]:
    """The rungs the answers hold, in ladder order."""
    present = {row for row, _ in items}
    return [r for r in design["ladder"] if labels(r["rung"])["baseline"] in present]


def check_answers(folder: str | Path, design: dict, items: dict) -> None:
    """The answers hold whole rungs (the baseline and both arms for every seed), a prefix of the ladder, and no
    rung after a passing one: what the stopping rule lets a run publish."""
    ran = rungs_run(design, items)
    if [r["rung"] for r in ran] != [r["rung"] for r in design["ladder"][:len(ran)]] or not ran:
        raise PublishedError(f"{Path(folder) / 'answers.jsonl.gz'} holds rungs {[r['rung'] for r in ran]}, not the "
                             f"first rungs of the design's ladder; {RESTORE}")
    for rung in ran:
        names = labels(rung["rung"])
        lacking = [f"{names[arm]!r} seed {s}" for arm in ("positive", "control") for s in design["seeds"]
                   if (names[arm], s) not in items]
        if lacking:
            raise PublishedError(f"{Path(folder) / 'answers.jsonl.gz'} holds no answers of {', '.join(lacking[:3])}, "
                                 f"which rung {rung['rung']} needs; {RESTORE}")
    known = {labels(r["rung"])[k] for r in ran for k in ("baseline", "positive", "control")}
    stray = sorted({row for row, _ in items} - known)
    if stray:
        raise PublishedError(f"{Path(folder) / 'answers.jsonl.gz'} holds rows no rung has: {', '.join(stray[:3])}; "
                             f"{RESTORE}")


def summarise(design: dict, items: dict, seconds: float) -> dict:
    """The gate's result from its design and the answers alone: each rung's contrast and verdict, the gated rung
    (the first that passes) and the table of every row."""
    from ..outcomes import check_same_items, metric_values

    check_same_items([v["outcomes"] for v in items.values()], [str(k) for k in items])
    rungs = [rung_result(r, items, design) for r in rungs_run(design, items)]
    passed = [r for r in rungs if r["passes"]]
    if passed and passed[0] is not rungs[-1]:
        raise PublishedError(f"rung {passed[0]['rung']} passes but later rungs were run: the stopping rule stops at "
                             f"the first pass; {RESTORE}")
    table = results_table({k: metric_values(v["outcomes"]) for k, v in items.items()})
    return {"design": design, "rungs": rungs, "gated": passed[0]["rung"] if passed else None,
            "ladder_finished": bool(passed) or len(rungs) == len(design["ladder"]), "table": table,
            "seconds": seconds}


def study_report(result: dict, world_info: dict, run: dict) -> str:
    """The gate's report; ``run``: its published ``run.json``."""
    d = result["design"]
    margin, metric = d["margin"], d["outcome"]["metric"]
    pc = world_info.get("positive_control", {})
    ladder = {r["rung"]: r for r in d["ladder"]}
    if result["gated"]:
        rung = ladder[result["gated"]]
        verdict = (f"**The gate passes at {rung['rung']}**: `{rung['model']}` (width {rung['width']}, {rung['layers']} "
                   f"layers, patch {rung['patch']}, {rung['image_size']} px), {rung['pretrain_steps']} pretraining "
                   "steps: the gated model.")
    elif result["ladder_finished"]:
        verdict = "**The gate fails at every rung tried**: no rung of the ladder passed."
    else:
        left = [r["rung"] for r in d["ladder"][len(result["rungs"]):]]
        verdict = (f"**No rung has passed yet**: the run stopped before rung(s) {', '.join(left)} "
                   "(the command resumes it).")
    lines = [
        "# The gate: can the toy world register a method that works?", "",
        f"Design: docs/studies/gate.md (pre-registered). {world_info['train']} training and {world_info['test']} "
        "test scenes (test items per subset: " + ", ".join(f"{k} {v}" for k, v in world_info["test_items"].items())
        + f"); fine-tune N = {d['finetune']['batch_size']}, {d['finetune']['steps']} steps, seeds "
        f"{', '.join(map(str, d['seeds']))}; {wall_time_words(result['seconds'], counts_all_starts(run))}.", "",
        starts_words(run), "",
        f"The positive control's data: {pc.get('ok', '?')} records from training scenes only ("
        + ", ".join(f"{k} {v}" for k, v in pc.get("per_edit", {}).items()) + "); dropped: "
        + ("; ".join(f"{reason}: " + ", ".join(f"{k} {v}" for k, v in kinds.items())
                     for reason, kinds in pc.get("dropped", {}).items()) or "none") + ".", "",
        verdict, "",
        f"## The curve (test {metric}, points; positive control − control per seed)", "",
        f"Passes: mean at least {margin['mean_at_least']} points and the seed-level two-sided "
        f"{100 * margin['confidence']:.0f} % t interval's lower end above {margin['seed_t_lower_above']}.", "",
        "| rung | model | width | layers | patch | image | pretraining steps | baseline | control | positive control "
        "| difference (per seed) | seed-level 95 % t interval | scene-and-seed bootstrap 95 % | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["rungs"]:
        rung = ladder[r["rung"]]
        lines.append(
            f"| {r['rung']} | `{rung['model']}` | {rung['width']} | {rung['layers']} | {rung['patch']} | "
            f"{rung['image_size']} | {rung['pretrain_steps']} | {r['baseline']:.2f} | {r['control']:.2f} | "
            f"{r['positive']:.2f} | {signed(r['mean'], 2)} ({', '.join(signed(x, 2) for x in r['per_seed'])}) | "
            f"[{signed(r['t95'][0], 2)}, {signed(r['t95'][1], 2)}] | [{signed(r['bootstrap']['ci95'][0], 2)}, "
            f"{signed(r['bootstrap']['ci95'][1], 2)}] | **{'passes' if r['passes'] else 'does not pass'}** |")
    lines += ["", "## Each matched subset (positive control − control, points; seed-level 95 % t interval; "
              "reported, not gated)", "",
              "| rung | " + " | ".join(d["outcome"]["subsets"]) + " |",
              "| --- |" + " --- |" * len(d["outcome"]["subsets"])]
    for r in result["rungs"]:
        lines.append(f"| {r['rung']} | " + " | ".join(
            f"{signed(s['mean'], 1)} [{signed(s['t95'][0], 1)}, {signed(s['t95'][1], 1)}]"
            for s in r["subsets"].values()) + " |")
    lines += ["", "## All rows (test, %, mean ± sd over seeds)", "", table_markdown(result["table"]), ""]
    return "\n".join(lines) + "\n"
