"""One table for many models (`concrete-jungle eval --models A B C ...`): every model evaluated once per benchmark,
each in its own folder under the leaderboard's, and a leaderboard of models × benchmarks.

A cell is the benchmark's headline number (the mean of its registry ``headlines`` that have a value, as the summary
line of `eval` takes it, `report.summary`). Every model after the first carries, in each cell, the difference from
the first in points with its 95 % interval: the paired bootstrap of `eval --compare` (`outcomes.bootstrap_contrast`
over the images, the same draws for the same seed), on the headline metric itself, or, for a benchmark whose
headline is a mean of several metrics, on that mean (a macro recipe over them, so every resample averages the
metrics of one draw of images). Beside the benchmarks: each kind's raw and chance-normalised means (`report.summary`).

Resumable model by model: a model's folder is an `eval --out` folder; a benchmark whose result there is of the same
model (model hash), on the same benchmark files (their digest), of the same items and scored under the registry's
rule is not evaluated again (`complete`), so a rerun evaluates nothing and a model added later is evaluated alone.
A model is loaded to learn its hash (its weights and config), and encodes nothing when its results are complete.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..outcomes import RESAMPLES
from .names import BENCHMARKS
from .report import column_names, counts, percent, summary

# the metric name under which a headline of several metrics is bootstrapped (a macro over them)
HEADLINE = "headline (mean of the headline metrics)"
FORMS = ("a checkpoint folder (or <run>/checkpoints/latest, a run's folder), an open_clip model as NAME,TAG "
         "(clip_benchmark's form: ViT-B-32,openai; cj-tiny,none with --seed; NAME,/path/weights.pt) or NAME (with "
         "--pretrained), peer:NAME, or hf-hub:ORG/NAME; LABEL=MODEL to label it")


class LeaderboardError(ValueError):
    """Models or results that make no leaderboard; the message names them and what to give instead."""


@dataclass(frozen=True)
class Entry:
    """One model of the leaderboard: its label (a row), what was given, how to load it, its folder's name."""

    label: str
    given: str
    name: str | None
    pretrained: str | None
    checkpoint: str | None
    folder: str


def entries(items: list[str], pretrained: str = "openai") -> list[Entry]:
    """The models ``items`` name (`FORMS`), checked as far as the disk tells, before anything loads; labelled by
    ``LABEL=`` or by the shortest trailing part of what was given that tells them apart; each with its folder."""
    from ..configs import open_clip_model_names
    from ..models.checkpoints import resolve_checkpoint

    if len(items) < 2:
        raise LeaderboardError(f"--models needs two or more models, the first the reference, it got {items}; "
                               "evaluate one model with --model or --checkpoint")
    pairs = [item.split("=", 1) if "=" in item and not Path(item).exists() else [None, item] for item in items]
    names = column_names([given for _, given in pairs])
    known = None
    out = []
    for (label, given), name in zip(pairs, names):
        label = label or name
        if Path(given).exists() or Path(given).name == "latest":
            load = (None, None, str(resolve_checkpoint(given)))
        elif given.startswith(("peer:", "hf-hub:")):
            load = (given, None, None)
        else:
            model, _, tag = given.partition(",")
            known = known or open_clip_model_names()
            if model not in known:
                raise LeaderboardError(f"--models {given}: {model!r} is no checkpoint folder and no open_clip model; "
                                       f"give {FORMS}")
            load = (model, tag or pretrained, None)
        out.append(Entry(label, given, *load, folder=re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._") or "model"))
    for kind in ("label", "folder"):
        seen: dict[str, str] = {}
        for entry in out:
            key = getattr(entry, kind)
            if key in seen:
                raise LeaderboardError(f"--models {seen[key]} and {entry.given} have the same {kind} {key!r}: label "
                                       "them apart, LABEL=MODEL")
            seen[key] = entry.given
    return out


def complete(folder: Path, model_hash: str, loaded: dict) -> dict[str, dict]:
    """The results ``folder`` holds that need no new evaluation, by benchmark (of those in ``loaded``): of the model
    ``model_hash``, on the benchmark files and items ``loaded`` holds, scored under the registry's rule (a result
    written before results recorded their rule was scored under the first, 1)."""
    done = {}
    for name, data in loaded.items():
        path = folder / f"{name}.json"
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # absent or unreadable: evaluated (and written) again
            continue
        if isinstance(result, dict) and result.get("model_hash") == model_hash and \
                result.get("benchmark_files_sha256") == data["benchmark_files_sha256"] and \
                result.get("items") == counts(data)[0] and result.get("rule", 1) == BENCHMARKS[name].rule:
            done[name] = result
    return done


def evaluate_models(models: list[Entry], loaded: dict, out: str | Path, encoder_of: Callable, overwrite: bool = False,
                    log: Callable[[str], None] = print) -> dict[str, dict[str, dict]]:
    """Each model's results on every benchmark of ``loaded``, by label then benchmark: a model is loaded (the
    Encoder ``encoder_of(entry)`` builds), its complete results kept (`complete`), the rest evaluated into its
    folder, ``out / entry.folder`` (`evaluation.run`, which refuses another model's results there unless
    ``overwrite``); then it is released before the next loads."""
    from . import run

    results = {}
    for entry in models:
        folder = Path(out) / entry.folder
        encoder = encoder_of(entry)
        done = complete(folder, encoder.clip.hash, loaded)
        todo = [n for n in loaded if n not in done]
        if todo:
            log(f"{entry.label}: evaluating {', '.join(todo)}"
                + (f" (kept: {', '.join(done)}, complete)" if done else "") + f" into {folder}")
            done |= run(encoder, todo, {n: loaded[n] for n in todo}, out=folder, overwrite=overwrite)
        else:
            log(f"{entry.label}: results complete for the suite in {folder} (model {encoder.clip.hash}, the same "
                "benchmark files and rules): not evaluated again")
        results[entry.label] = {n: done[n] for n in loaded}
        del encoder  # one model in memory at a time
    return results


def headline_keys(name: str, result: dict) -> list[str]:
    """The benchmark's headline metrics that have a value in ``result`` (those the summary averages)."""
    return [k for k in BENCHMARKS[name].headlines if result["metrics"].get(k) is not None]


def headline_difference(first: dict, second: dict, keys: list[str], labels: tuple[str, str], resamples: int,
                        seed: int) -> dict | None:
    """``second`` minus ``first`` on the mean of the metrics ``keys``, in points, with its 95 % interval and
    bootstrap p: `eval --compare`'s paired bootstrap (one metric: exactly its interval; several: a macro recipe
    over them, bootstrapped as one). Without per-item outcomes for them (a result written before outcomes were
    kept, or a metric that is not a mean over items, mAP): the estimate alone. None where either has no value."""
    from ..outcomes import bootstrap_contrast, check_same_items, verdict

    values = [sum(r["metrics"][k] for k in keys) / len(keys) if keys and all(
        r["metrics"].get(k) is not None for k in keys) else None for r in (first, second)]
    if None in values:
        return None
    outcomes = [r.get("outcomes") for r in (first, second)]
    if any(o is None or any(k not in o["metrics"] for k in keys) for o in outcomes):
        return {"estimate": 100 * (values[1] - values[0]), "ci95": None, "se": None, "p": None,
                "verdict": "no interval"}
    check_same_items(outcomes, list(labels))
    metric = keys[0]
    if len(keys) > 1:
        metric = HEADLINE
        outcomes = [o | {"metrics": o["metrics"] | {HEADLINE: {"macro": keys, "complete": True}}} for o in outcomes]
    diff = bootstrap_contrast({"first": [outcomes[0]], "second": [outcomes[1]]}, {"first": -1.0, "second": 1.0},
                              [metric], resamples, seed)[metric]
    return diff | {"verdict": verdict(diff["ci95"])}


def blind_headline(result: dict, keys: list[str]) -> float | str | None:
    """The blind baseline of the headline ``keys`` (their mean, as the headline is), "not applicable" where a
    headline is a text -> image choice (a blind model can only guess: its level is chance), None where the result
    has no blind baseline for them."""
    blind = result.get("blind") or {}
    if any(k in blind.get("not_applicable", ()) for k in keys):
        return "not applicable"
    values = [(blind.get("metrics") or {}).get(k) for k in keys]
    return sum(values) / len(values) if values and None not in values else None


def table(models: list[Entry], results: dict[str, dict[str, dict]], resamples: int = RESAMPLES, seed: int = 0) -> dict:
    """The leaderboard as data: per model its cells (value, chance level, chance-normalised score, blind baseline,
    difference from the first model; every metric of the result, its subsets, with their blind values) and its
    summary means; per benchmark its kind, headline metrics, rule, files' digest and, where the result holds it,
    its bag-of-words split (items per subset whose caption and negative are of one bag of words, and not)."""
    first = models[0].label
    names = list(results[first])
    cells, means = {}, {}
    for entry in models:
        mine = results[entry.label]
        parts = summary(mine)
        cells[entry.label] = {}
        for name in names:
            part = parts.get(BENCHMARKS[name].kind, {})
            keys = headline_keys(name, mine[name])
            cell = {"value": part.get("parts", {}).get(name), "chance": part.get("chance", {}).get(name),
                    "normalised": part.get("normalised", {}).get(name), "metrics": keys,
                    "blind": blind_headline(mine[name], keys), "subsets": mine[name]["metrics"],
                    "blind_subsets": (mine[name].get("blind") or {}).get("metrics")}
            if entry.label != first:
                cell["difference"] = headline_difference(results[first][name], mine[name], keys,
                                                         (entry.label, first), resamples, seed)
            cells[entry.label][name] = cell
        means[entry.label] = {kind: {"mean": p["mean"], "normalised_mean": p["normalised_mean"],
                                     "without_chance": p["without_chance"]} for kind, p in parts.items()}
    reference = results[first]
    return {"reference": first, "resamples": resamples, "seed": seed,
            "models": [{"label": e.label, "given": e.given, "folder": e.folder,
                        "model": next(iter(results[e.label].values())).get("model_label"),
                        "model_hash": next(iter(results[e.label].values())).get("model_hash")} for e in models],
            # the headlines the data held (aro_order without COCO: flickr30k_order alone), and where it was read
            "benchmarks": [{"name": n, "kind": BENCHMARKS[n].kind, "headlines": headline_keys(n, reference[n]),
                            "rule": BENCHMARKS[n].rule, "items": reference[n].get("items"),
                            "benchmark_files_sha256": reference[n].get("benchmark_files_sha256"),
                            "data_root": reference[n].get("data_root"),
                            "bag_of_words": reference[n].get("bag_of_words")} for n in names],
            "cells": cells, "means": means}


MARKS = {"higher": " ▲", "lower": " ▼", "not resolved": "", "no interval": ""}


def interval(d: dict | None) -> str:
    if d is None:
        return "-"
    ci = "no interval" if d["ci95"] is None else f"[{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}]"
    return f"{d['estimate']:+.2f} {ci}{MARKS[d['verdict']]}"


def markdown(board: dict) -> str:
    """The leaderboard as Markdown: one row per model, one column per benchmark (its headline number; for a model
    after the first, its difference from the first with the 95 % interval), then each kind's raw and chance-
    normalised means; what the numbers are, the benchmarks and the models below."""
    names = [b["name"] for b in board["benchmarks"]]
    kinds = list(dict.fromkeys(b["kind"] for b in board["benchmarks"]))
    head = ["model", *names] + [f"{k} {what}" for k in kinds for what in ("mean", "normalised")]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for model in board["models"]:
        row = [model["label"]]
        for name in names:
            cell = board["cells"][model["label"]][name]
            value = percent(cell["value"])
            row.append(value if "difference" not in cell else f"{value} ({interval(cell['difference'])})")
        for kind in kinds:
            part = board["means"][model["label"]].get(kind, {})
            row += [percent(part.get("mean")), percent(part.get("normalised_mean"))]
        lines.append("| " + " | ".join(row) + " |")
    reference = board["reference"]
    lines += ["", f"Each cell: the benchmark's headline number (%); for every model after {reference}, in brackets its "
              f"difference from {reference} in points with the 95 % interval (paired bootstrap, {board['resamples']} "
              f"resamples of the images, all items of an image together, seed {board['seed']}: the intervals of "
              f"`concrete-jungle eval --compare`), ▲ / ▼ where the interval lies above / below 0. Means: the mean "
              "over each kind's benchmarks of their headline numbers, raw and chance-normalised ((score - chance) / "
              "(100 - chance) × 100: 0 at chance, 100 perfect; docs/method.md §7).", "", "Benchmarks:"]
    for b in board["benchmarks"]:
        lines.append(f"- {b['name']} ({b['kind']}, rule {b['rule']}): {' and '.join(b['headlines'])}"
                     f"{' (their mean)' if len(b['headlines']) > 1 else ''}; {b['items']} items"
                     + (f" read from `{b['data_root']}`" if b.get("data_root") else "")
                     + f"; benchmark files sha256 `{b['benchmark_files_sha256']}`")
    for kind in kinds:  # what each mean holds: the benchmarks run, each by the headlines its data held
        parts = [f"{b['name']} ({' and '.join(b['headlines'])})" for b in board["benchmarks"]
                 if b["kind"] == kind and b["headlines"]]
        lines.append(f"- {kind} mean: over {', '.join(parts)}")
    without = sorted({n for m in board["models"] for n, c in board["cells"][m["label"]].items()
                      if (c.get("difference") or {}).get("verdict") == "no interval"})
    if without:
        lines += ["", f"No interval for {', '.join(without)}: no per-item outcomes for the headline (a metric that "
                  "is not a mean over items, or a result written before outcomes were kept)."]
    lines += ["", "Models (each one's results in its folder):"]
    lines += [f"- {m['label']}: {m['model']}, model hash `{m['model_hash']}`, folder `{m['folder']}/`"
              for m in board["models"]]
    return "\n".join(lines) + "\n"


def plot(board: dict, path: Path) -> None:
    """The leaderboard as a heat-map: models as rows, benchmarks then means as columns, each cell coloured by its
    chance-normalised score (0 at chance, 100 perfect; grey where unknown) and labelled with its headline number and,
    under it, the difference from the first model with its interval, ▲ / ▼ in bold where the interval excludes 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = [b["name"] for b in board["benchmarks"]]
    kinds = list(dict.fromkeys(b["kind"] for b in board["benchmarks"]))
    columns = names + [f"{k}\nmean" for k in kinds]
    labels = [m["label"] for m in board["models"]]
    colour = np.full((len(labels), len(columns)), np.nan)
    texts: list[list[tuple[str, str, bool]]] = []
    for i, label in enumerate(labels):
        row = []
        for j, name in enumerate(names):
            cell = board["cells"][label][name]
            colour[i, j] = np.nan if cell["normalised"] is None else 100 * cell["normalised"]
            d = cell.get("difference")
            below = "" if d is None else "Δ " + interval(d).replace(" [", "\n[")
            row.append((percent(cell["value"]), below, d is not None and d["verdict"] in ("higher", "lower")))
        for j, kind in enumerate(kinds, start=len(names)):
            part = board["means"][label].get(kind, {})
            if part.get("normalised_mean") is not None:
                colour[i, j] = 100 * part["normalised_mean"]
            row.append((percent(part.get("mean")), f"normalised {percent(part.get('normalised_mean'))}", False))
        texts.append(row)
    width = 1.5 + 1.45 * len(columns) + 0.07 * max(map(len, labels))
    fig, ax = plt.subplots(figsize=(width, 1.2 + 0.75 * len(labels)), dpi=130)
    cmap = matplotlib.colormaps["YlGnBu"].with_extremes(bad="#e6e6e6")  # grey: no chance level, no score
    image = ax.imshow(np.ma.masked_invalid(colour), cmap=cmap, vmin=min(0.0, float(np.nanmin(colour, initial=0))),
                      vmax=100, aspect="auto")
    for i, row in enumerate(texts):
        for j, (value, below, resolved) in enumerate(row):
            shade = colour[i, j]
            ink = "white" if shade == shade and shade > 60 else "black"
            ax.text(j, i - 0.16, value, ha="center", va="center", fontsize=10, fontweight="bold", color=ink)
            if below:
                ax.text(j, i + 0.2, below, ha="center", va="center", fontsize=7.5, color=ink,
                        fontweight="bold" if resolved else "normal", linespacing=1.1)
    ax.set_xticks(range(len(columns)), columns, fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks(range(len(labels)), [f"{label}\n(reference)" if i == 0 else label for i, label in enumerate(labels)],
                  fontsize=8)
    ax.axvline(len(names) - 0.5, color="white", linewidth=4)
    ax.axhline(0.5, color="white", linewidth=2)
    bar = fig.colorbar(image, ax=ax, fraction=0.035, pad=0.02)
    bar.set_label("chance-normalised score (0 chance, 100 perfect)", fontsize=7)
    bar.ax.tick_params(labelsize=7)
    ax.set_title(f"Headline numbers (%); under each, the difference from {board['reference']} in points with its 95 % "
                 "interval\n(paired bootstrap over images; ▲ / ▼ in bold: the interval excludes 0)", fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)


OUTPUTS = ["leaderboard.json", "leaderboard.md", "leaderboard.png", "leaderboard.html"]


def write(board: dict, out: str | Path) -> str:
    """``leaderboard.json``, ``leaderboard.md``, ``leaderboard.png`` and the page ``leaderboard.html``
    (`leaderboard_page`) in ``out``; the Markdown."""
    from ..records import atomic_write_json, atomic_write_text
    from .leaderboard_page import write_page

    out = Path(out)
    text = markdown(board)
    atomic_write_json(out / "leaderboard.json", board)
    atomic_write_text(out / "leaderboard.md", text)
    plot(board, out / "leaderboard.png")
    write_page(board, out / "leaderboard.html")
    return text
