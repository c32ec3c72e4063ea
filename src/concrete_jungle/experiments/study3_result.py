"""Study 3's result from its design and its published files alone (design: docs/studies/study3.md): the rows a run
holds, each contrast on its matched outcome, Holm over the primary four, the secondary contrasts and the report.

A dataset's matched subsets are the test subsets of the edit kinds at least the design's share of its kept records
make (`toyworld.edit_kinds.EDIT_KIND_SUBSET`); a contrast between two datasets takes the union of theirs, and leaves
out any whose blind score (every test picture replaced by the test's mean picture), the mean over a row's seeds,
exceeds chance + the design's points in a row of the contrast (`gate2.matched_subsets`). Each contrast's estimate is
the mean over seeds of the difference of the matched subsets' mean, with the two-sided p and the 95 % interval of
the scene-and-seed paired bootstrap (`stats.bootstrap_contrast`, its own generator of seed 0) and the seed-level t
interval beside them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from pathlib import Path

from .gate import seed_interval
from .gate2 import blind_scores, matched_outcomes, matched_subsets
from .published import RESTORE, PublishedError, counts_all_starts, starts_words, wall_time_words
from .report import RETRIEVAL_COLUMNS, results_table, signed, table_markdown
from .stages import BASELINE, BLIND, Finetune

CONTROL = "control"
UNMASKED = ", entailed negatives unmasked"  # a row of the entailment factor: mask_entailed false
LOSSES = ("infonce", "cement", "negclip")  # the rows' losses, in the design's order of words
FACTOR_LOSSES = ("infonce", "cement")  # the losses the entailment factor varies
RECALL = "R@1"  # the mean of both directions' Recall@1, a secondary outcome
MATCHED = "matched outcome"  # the recipe the bootstrap resamples: the mean of a contrast's matched subsets
POWER_Z = statistics.NormalDist().inv_cdf(0.8)
LOSS_PAIRS = (("cement", "infonce"), ("negclip", "infonce"), ("cement", "negclip"))  # (plus, minus) in a dataset


def row_label(mode: str, loss: str) -> str:
    return f"D_{mode} + {loss}"


def at_batch_size(label: str, n: int) -> str:
    """A row at N*, as the answers name it."""
    return f"{label} at N = {n}"


def batch_sizes(design: dict, world_info: dict) -> list[int]:
    """The batch sizes a run's profile fine-tunes at: the design's, N* (`n_star`) as the run measured it."""
    sizes = design["batch_size"][world_info["profile"]]
    return [world_info["n_star"]["n"] if n == "n_star" else n for n in sizes if n != "n_star"
            or world_info["n_star"]["n"] is not None]


def rows(design: dict, world_info: dict) -> list[tuple[str, Finetune, int]]:
    """(label, fine-tune, batch size) of every row the run trains: the control, each dataset with each loss (entailed
    negatives masked), the entailment factor's rows where they ran, each at every batch size of the profile."""
    modes, losses = design["data"]["modes"], [loss for loss in LOSSES if loss in design["finetune"]["losses"]]
    base = [Finetune(CONTROL, "infonce", "hc", negatives=False)]
    base += [Finetune(row_label(m, loss), loss, m, mask_entailed=True) for m in modes for loss in losses]
    factor = world_info["entailment_factor"]
    if factor["runs"]:
        base += [Finetune(row_label(m, loss) + UNMASKED, loss, m) for m in factor["sets"] for loss in FACTOR_LOSSES]
    sizes = batch_sizes(design, world_info)
    out = []
    for n in sizes:
        for row in base:
            label = row.label if n == sizes[0] else at_batch_size(row.label, n)
            out.append((label, replace(row, label=label), n))
    return out


def check_answers(folder: str | Path, design: dict, items: dict, world_info: dict) -> None:
    """The answers hold the baseline and every row for every seed, and nothing else: Study 3 is published whole."""
    wanted = {(BASELINE, None)} | {(label, s) for label, _, _ in rows(design, world_info) for s in design["seeds"]}
    lacking, stray = sorted(wanted - set(items), key=str), sorted(set(items) - wanted, key=str)
    if lacking or stray:
        what = (f"holds no answers of {', '.join(f'{r!r} seed {s}' for r, s in lacking[:3])}" if lacking else
                f"holds rows the design has not: {', '.join(f'{r!r} seed {s}' for r, s in stray[:3])}")
        raise PublishedError(f"{Path(folder) / 'answers.jsonl.gz'} {what}; {RESTORE}")


def dataset_subsets(design: dict, counts: dict[str, int], records: int) -> list[str]:
    """A dataset's matched subsets before the blind rule: those of the edit kinds at least the design's share of its
    ``records`` (kept records) make (``counts``: records per edit kind), in the design's order of test subsets."""
    from ..toyworld.edit_kinds import EDIT_KIND_SUBSET

    share = design["matched_outcome"]["edit_kind_share_at_least"]
    made = {EDIT_KIND_SUBSET[kind] for kind, n in counts.items() if records and n / records >= share}
    return [s for s in design["world"]["test_subsets"] if s in made]


def outcome_modes(design: dict, name: str) -> list[str]:
    """The datasets a hypothesis's outcome names ("D_hc", "D_hc and D_lc")."""
    return [part.strip()[2:] for part in design["hypotheses"][name]["outcome"].split(" and ")]


def with_outcomes(outcomes: dict, matched: list[str]) -> dict:
    """``outcomes`` with the matched outcome and the mean Recall@1 as recipes the bootstrap resamples."""
    made = matched_outcomes(outcomes, MATCHED, matched) if matched else outcomes
    return {"series": made["series"], "metrics": made["metrics"] | {RECALL: {"macro": list(RETRIEVAL_COLUMNS)}}}


def contrast(name: str, claim: str, plus: str, minus: str, modes: list[str], design: dict, items: dict,
             world_info: dict) -> dict:
    """One contrast, ``plus`` − ``minus`` over the seeds: its matched subsets (the union of ``modes``' less those
    the blind picture solves in either row), the estimate on them with its bootstrap p and interval and its
    seed-level t interval, each subset's difference and blind scores, and the same on M.Avg and Recall@1."""
    import numpy as np

    from ..outcomes import bootstrap_contrast, metric_values

    seeds, rule = design["seeds"], design["matched_outcome"]
    data = world_info["datasets"]
    candidates = [s for s in design["world"]["test_subsets"]
                  if any(s in dataset_subsets(design, data[m]["edit_kinds"], data[m]["records"]) for m in modes)]
    values = {row: [metric_values(items[(row, s)]["outcomes"]) for s in seeds] for row in (plus, minus)}
    blind = blind_scores(values, design["world"]["test_subsets"])
    matched = matched_subsets({row: {s: blind[row][s] for s in candidates} for row in blind}, candidates, rule)

    def differences(columns: list[str]) -> list[float]:
        return [100 * (statistics.fmean(p[c] for c in columns) - statistics.fmean(m[c] for c in columns))
                for p, m in zip(values[plus], values[minus])]

    groups = {row: [with_outcomes(items[(row, s)]["outcomes"], matched) for s in seeds] for row in (plus, minus)}
    metrics = ([MATCHED] if matched else []) + ["M.Avg", RECALL]
    boot = bootstrap_contrast(groups, {plus: 1, minus: -1}, metrics, design["bootstrap"],
                              rng=np.random.default_rng(0), paired_runs=True)

    def estimate(metric: str, columns: list[str]) -> dict:
        mean, sd, low, high = seed_interval(differences(columns), 0.95)
        b = boot[metric]
        return {"estimate": b["estimate"], "per_seed": differences(columns), "sd": sd, "t_interval": [low, high],
                "ci95": b["ci95"], "se": b["se"], "p": b["p"]}

    result = {"name": name, "claim": claim, "plus": plus, "minus": minus, "datasets": modes,
              "subsets": candidates, "matched": matched,
              "blind": {row: {s: blind[row][s] for s in candidates} for row in blind},
              "per_subset": {s: statistics.fmean(differences([s])) for s in candidates},
              "M.Avg": estimate("M.Avg", ["M.Avg"]),
              RECALL: estimate(RECALL, list(RETRIEVAL_COLUMNS))}
    if not matched:  # no subset the text alone cannot solve: nothing to estimate
        return result | {"estimate": None, "per_seed": None, "sd": None, "t_interval": None, "ci95": None,
                         "se": None, "p": None}
    return result | estimate(MATCHED, matched)


def verdicts(primary: list[dict], alpha: float) -> None:
    """Holm over the primary family (a hypothesis without a matched outcome counts with p = 1) and each verdict:
    supported when the adjusted p is below ``alpha`` and the estimate above 0, contradicted when below 0, else not
    resolved; in place."""
    from ..outcomes import holm

    adjusted = holm({h["name"]: 1.0 if h["p"] is None else h["p"] for h in primary})
    for h in primary:
        h["p_holm"] = adjusted[h["name"]]
        h["verdict"] = ("not resolved" if h["estimate"] is None or h["p_holm"] >= alpha else
                        "supported" if h["estimate"] > 0 else "contradicted" if h["estimate"] < 0 else "not resolved")


def resolvable(h: dict, alpha: float, family: int) -> dict:
    """The smallest difference the run resolves at 80 % power at Holm's strictest step (two-sided alpha / family),
    from the standard errors it observed: the seed-level one (the design's planning) and the bootstrap's."""
    z = statistics.NormalDist().inv_cdf(1 - alpha / (2 * family)) + POWER_Z
    n = len(h["per_seed"] or [])
    seed_se = h["sd"] / math.sqrt(n) if h["sd"] is not None and n > 1 else None
    return {"z": z, "seed_se": seed_se, "seed_level": None if seed_se is None else z * seed_se,
            "bootstrap": None if h["se"] is None else z * h["se"]}


def secondary_specs(design: dict, world_info: dict) -> list[tuple[str, str, str, str, list[str]]]:
    """(name, claim, plus, minus, datasets) of each secondary contrast on a matched outcome (design["secondary"]):
    every other contrast within a dataset, D_wo + Cement against D_hc + Cement, the N factor (the primary four and
    each row at N* against N = 64, where the profile ran N*) and the entailment factor (each of its rows against the
    same row with entailed negatives masked)."""
    primary = {(h["plus"], h["minus"]) for h in design["hypotheses"].values()}
    specs = []
    for mode in design["data"]["modes"]:
        pairs = [(row_label(mode, a), row_label(mode, b)) for a, b in LOSS_PAIRS]
        if mode == "hc":
            pairs = [(row_label(mode, loss), CONTROL) for loss in LOSSES] + pairs
        for plus, minus in pairs:
            if (plus, minus) not in primary and (minus, plus) not in primary:
                specs.append((f"S-{plus} vs {minus}", f"{plus} beats {minus}", plus, minus, [mode]))
    specs.append(("S-D_wo vs D_hc", "abstract-object negatives teach more: D_wo + cement beats D_hc + cement",
                  row_label("wo", "cement"), row_label("hc", "cement"), ["wo", "hc"]))
    sizes = batch_sizes(design, world_info)
    for n in sizes[1:]:
        for name in design["primary"]:
            h = design["hypotheses"][name]
            specs.append((f"{name} at N = {n}", f"{h['claim']}, at N = {n}", at_batch_size(h["plus"], n),
                          at_batch_size(h["minus"], n), outcome_modes(design, name)))
        for label, row, size in rows(design, world_info):
            if size == sizes[0]:
                specs.append((f"N-{label}", f"{label}: N = {n} beats N = {sizes[0]}", at_batch_size(label, n), label,
                              [row.mode]))
    factor = world_info["entailment_factor"]
    if factor["runs"]:
        for mode in factor["sets"]:
            for loss in FACTOR_LOSSES:
                label = row_label(mode, loss)
                specs.append((f"E-{label}", f"{label}: masking entailed negatives beats leaving them", label,
                              label + UNMASKED, [mode]))
    return specs


def same_answers(items: dict, labels: list[str], seeds: list[int]) -> list[list[str]]:
    """The pairs of rows that gave the same answer to every test item at every seed (NegCLIP's loss with its
    pictures is InfoNCE over every pair, docs/peers.md: its rows differ from InfoNCE's by float rounding alone)."""
    def answers(label: str) -> list:
        return [[data["values"] for _, data in sorted(items[(label, s)]["outcomes"]["series"].items())] for s in seeds]

    made = {label: answers(label) for label in labels}
    return [[a, b] for i, a in enumerate(labels) for b in labels[i + 1:] if made[a] == made[b]]


def summarise(design: dict, items: dict, seconds: float, world_info: dict) -> dict:
    """Study 3's result from its design, its answers and its world.json alone (`concrete-jungle study report`)."""
    from ..outcomes import check_same_items, metric_values

    check_same_items([v["outcomes"] for v in items.values()], [str(k) for k in items])
    alpha = design["decision"]["alpha"]
    primary = [contrast(name, design["hypotheses"][name]["claim"], design["hypotheses"][name]["plus"],
                        design["hypotheses"][name]["minus"], outcome_modes(design, name), design, items, world_info)
               for name in design["primary"]]
    verdicts(primary, alpha)
    secondary = [contrast(*spec, design, items, world_info) for spec in secondary_specs(design, world_info)]
    for h in primary + secondary:
        h["resolvable"] = resolvable(h, alpha, len(primary))
    scores = {k: metric_values(r["outcomes"]) for k, r in items.items()}
    subsets = design["world"]["test_subsets"]
    per_row = {}
    for label in dict.fromkeys(row for row, _ in items):
        runs = [v for (row, _), v in scores.items() if row == label]
        per_row[label] = {s: {"accuracy": statistics.fmean(100 * v[s] for v in runs),
                              "blind": statistics.fmean(100 * v[f"{BLIND}{s}"] for v in runs)} for s in subsets}
    table = results_table({k: {m: v for m, v in s.items() if not m.startswith(BLIND)} for k, s in scores.items()})
    return {"design": design, "primary": primary, "secondary": secondary, "subsets": per_row, "table": table,
            "same_answers": same_answers(items, [label for label, _, _ in rows(design, world_info)], design["seeds"]),
            "dataset_subsets": {m: dataset_subsets(design, d["edit_kinds"], d["records"])
                                for m, d in world_info["datasets"].items()}, "seconds": seconds}


def test_items(world_info: dict) -> dict[str, int]:
    """Test items per subset: the seven SugarCrepe-form subsets' and the attribute subsets'."""
    return world_info["test_items"] | world_info.get("attribute_items", {}).get("test", {})


def interval(pair: list[float] | None, digits: int = 2) -> str:
    return "-" if pair is None else f"[{signed(pair[0], digits)}, {signed(pair[1], digits)}]"


def estimate_words(h: dict) -> str:
    if h["estimate"] is None:
        return "- (no matched subset)"
    return f"{signed(h['estimate'], 2)} ({', '.join(signed(x, 2) for x in h['per_seed'])})"


def n_star_words(design: dict, world_info: dict) -> str:
    """How N* was measured and chosen, and what the profile runs."""
    choice, threshold = world_info["n_star"], design["batch_size"]["share_threshold"]
    curve = ", ".join(f"{v:.3f} at N = {n}" for n, v in sorted(choice["curves"].get("infonce", {}).items(),
                                                               key=lambda kv: int(kv[0])))
    if choice["n"] is None:
        chosen = f"**N\\* not measured**: D_hc holds {choice['pairs']} pairs, fewer than the smallest candidate"
    else:
        chosen = (f"**N\\* = {choice['n']}**: InfoNCE's hard-negative gradient share on the baseline's features of "
                  f"D_hc ({choice['pairs']} pairs, {choice['batches']} batches) was {curve} (rule: the smallest "
                  f"candidate below {threshold}" + ("" if choice["rule_met"] else
                                                    "; none was below it, so the largest was taken") + ")")
    runs = batch_sizes(design, world_info)
    profile = world_info["profile"]
    return chosen + (f". The {profile} profile runs every row at N = " + " and at N = ".join(map(str, runs)) + "."
                     if len(runs) > 1 else f". The {profile} profile runs N = {runs[0]} only: the N factor is not "
                     "run (`--profile gpu` runs every row at N\\* too).")


def entailment_words(design: dict, world_info: dict) -> str:
    factor = world_info["entailment_factor"]
    above = f"{100 * design['entailment_factor']['share_above']:g} %"
    if not factor["sets"]:
        return (f"**Entailed negatives**: no planted set's share exceeds {above}, so every row runs with entailed "
                "negatives masked: the factor had nothing to vary.")
    sets = ", ".join(f"D_{m}" for m in factor["sets"])
    if factor["runs"]:
        return (f"**Entailed negatives**: {sets} exceed {above}; their infonce and cement rows also run with "
                "entailed negatives unmasked (secondary).")
    return (f"**Entailed negatives**: {sets} exceed {above}, but their unmasked rows are not run: {factor['why']}.")


def same_answers_words(result: dict, world_info: dict) -> str:
    """The rows that answered alike, and what NegCLIP's loss is on these data."""
    pictures = sum(d["negatives_without_picture"] for d in world_info["datasets"].values())
    negclip = ("NegCLIP's loss with its defaults (`negative_images: true`) on negatives that have pictures is InfoNCE "
               "over every pair (docs/peers.md, \"NegCLIP\"), computed by other code: " + (
                   "every planted negative here has a picture, so its rows differ from InfoNCE's only by float "
                   "rounding (the secondary contrasts negclip vs infonce) and H3 tests what H2 tests."
                   if not pictures else f"{pictures} planted negatives here have no picture."))
    alike = "; ".join(f"{b} answered every test item as {a} did, at every seed" for a, b in result["same_answers"])
    return negclip + " **Rows with the same answers**: " + (alike or "none") + "."


def study_report(result: dict, world_info: dict, run: dict) -> str:
    """Study 3's report; ``run``: its published ``run.json``."""
    d = result["design"]
    rule = d["matched_outcome"]
    labels = [label for label, _, _ in rows(d, world_info)]
    lines = [
        "# Study 3: the paper's question on the gated testbed", "",
        f"Design: docs/studies/study3.md (pre-registered). World seed {d['world']['seed']}: {world_info['train']} "
        f"training and {world_info['test']} test scenes (test items per subset: "
        + ", ".join(f"{k} {v}" for k, v in test_items(world_info).items())
        + f"); `{d['model']['model']}`, baseline {d['model']['pretrain_steps']} pretraining steps; {len(labels)} rows, "
        f"each for seeds {', '.join(map(str, d['seeds']))} ({d['finetune']['steps']} steps), profile "
        f"{world_info['profile']}; {wall_time_words(result['seconds'], counts_all_starts(run))}.", "",
        starts_words(run), "",
        f"Gate 2 ({world_info['gate2']['folder']}), rebuilt from its published files before the first start: passes "
        f"(control {' and '.join(world_info['gate2']['passed'])}).", "",
        n_star_words(d, world_info), "", entailment_words(d, world_info), "",
        same_answers_words(result, world_info), "",
        "## The planted datasets", "",
        "| dataset | records | records per edit kind | matched subsets (edit kinds of at least "
        f"{100 * rule['edit_kind_share_at_least']:g} %) | negatives whose anchor caption the viewer reads true |",
        "| --- | --- | --- | --- | --- |"]
    from ..toyworld.edit_kinds import EDIT_KIND_SUBSET

    for mode in d["data"]["modes"]:
        data = world_info["datasets"][mode]
        e = data["entailed"]
        lines.append(f"| D_{mode} | {data['records']} | " + ", ".join(
            f"{k} {data['edit_kinds'][k]} ({100 * data['edit_kinds'][k] / data['records']:.1f} %)"
            for k in EDIT_KIND_SUBSET if k in data["edit_kinds"])
            + f" | {', '.join(result['dataset_subsets'][mode]) or 'none'} | {e['true']} of {e['negatives']} "
            f"({100 * (e['share_true'] or 0):.2f} %) |")
    lines += [
        "", "## The primary family (Holm over H1–H4)", "",
        f"Points of each contrast's matched outcome (the mean of its matched subsets; a subset whose blind score, "
        f"the mean over a row's seeds, exceeds {rule['chance']:g} + {rule['blind_above_chance_at_most']:g} in either "
        "row leaves it). The estimate is the mean over seeds; p and the 95 % interval come from the scene-and-seed "
        f"paired bootstrap ({d['bootstrap']} resamples, seed 0). Supported: Holm-adjusted p below "
        f"{d['decision']['alpha']} and the estimate above 0; contradicted: below 0; otherwise not resolved.", "",
        "| | claim | matched subsets | difference (per seed) | bootstrap 95 % | p | Holm p | seed-level 95 % t "
        "interval | resolvable (seed-level / bootstrap se) | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for h in result["primary"]:
        r = h["resolvable"]
        lines.append(
            f"| {h['name']} | {h['claim']} | {', '.join(h['matched']) or 'none'} | {estimate_words(h)} | "
            f"{interval(h['ci95'])} | {'-' if h['p'] is None else format(h['p'], '.4f')} | {h['p_holm']:.4f} | "
            f"{interval(h['t_interval'])} | "
            + " / ".join("-" if r[k] is None else f"{r[k]:.2f}" for k in ("seed_level", "bootstrap"))
            + f" | **{h['verdict']}** |")
    z = result["primary"][0]["resolvable"]["z"]
    lines += ["", f"The resolvable difference is ({z - POWER_Z:.2f} + {POWER_Z:.2f}) standard errors: a true "
              "difference that large is detected with 80 % power at Holm's strictest step (two-sided "
              f"{d['decision']['alpha']} / {len(result['primary'])}), from the run's seed-level and bootstrap "
              "standard errors.", "",
              "## Secondary contrasts (intervals, not corrected; none in the family)", "",
              "| | claim | matched subsets | difference (per seed) | bootstrap 95 % | seed-level 95 % t interval |",
              "| --- | --- | --- | --- | --- | --- |"]
    for h in result["secondary"]:
        lines.append(f"| {h['name']} | {h['claim']} | {', '.join(h['matched']) or 'none'} | {estimate_words(h)} | "
                     f"{interval(h['ci95'])} | {interval(h['t_interval'])} |")
    lines += ["", "## Every contrast on M.Avg of the seven SugarCrepe-form subsets and on Recall@1 (secondary)", "",
              "Recall@1: the mean of both directions. Points; bootstrap 95 % and seed-level 95 % t intervals.", "",
              "| | M.Avg | bootstrap 95 % | seed-level t | Recall@1 | bootstrap 95 % | seed-level t |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for h in result["primary"] + result["secondary"]:
        m, r = h["M.Avg"], h[RECALL]
        lines.append(f"| {h['name']} | {signed(m['estimate'], 2)} | {interval(m['ci95'])} | "
                     f"{interval(m['t_interval'])} | {signed(r['estimate'], 2)} | {interval(r['ci95'])} | "
                     f"{interval(r['t_interval'])} |")
    subsets = d["world"]["test_subsets"]
    lines += ["", "## Each subset's difference in each primary contrast (points, mean over seeds)", "",
              "| | " + " | ".join(subsets) + " |", "| --- |" + " --- |" * len(subsets)]
    for h in result["primary"]:
        lines.append(f"| {h['name']} | " + " | ".join(
            signed(h["per_subset"][s], 1) if s in h["per_subset"] else "-" for s in subsets) + " |")
    lines += ["", "## Each row's subsets (test %, mean over seeds; blind score in brackets)", "",
              "| row | " + " | ".join(subsets) + " |", "| --- |" + " --- |" * len(subsets)]
    for label, per in result["subsets"].items():
        lines.append(f"| {label} | " + " | ".join(f"{per[s]['accuracy']:.1f} ({per[s]['blind']:.1f})"
                                                 for s in subsets) + " |")
    projection, profile = world_info["projection"], world_info["profile"]
    lines += ["", f"Projected before the world was built: {projection['seconds'] / 60:.1f} min for the rows every "
              f"profile runs, {world_info['projected_seconds'] / 60:.1f} min with the rows the run decided (budget of "
              f"the {profile} profile: {d['budget'][profile]['minutes']} min), from {projection['timing_steps']} "
              f"timed steps of each kind at N = {projection['timed_batch_size']} (s/step: " + ", ".join(
                  f"{k} {v:.3f}" for k, v in sorted(projection["step_seconds"].items()))
              + ")" + "".join(f" and at N = {n} on the study's own D_hc from its baseline (s/step: " + ", ".join(
                  f"{k} {v:.3f}" for k, v in sorted(at.items())) + ")"
                  for n, at in projection.get("step_seconds_at", {}).items())
              + f", {projection['torch_threads']} torch thread(s)."]
    lines += ["", "## All rows (test, %, mean ± sd over seeds)", "", table_markdown(result["table"]), ""]
    return "\n".join(lines) + "\n"
