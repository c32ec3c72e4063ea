"""Results as people read them: the layout check's counts, a run's Markdown, a side-by-side comparison of files."""

from __future__ import annotations

import json
from pathlib import Path

from ..outcomes import RESAMPLES
from .names import BENCHMARKS


def counts(data) -> tuple[int, int]:
    """(usable items, skipped items) of what `load_data` returned, whatever the benchmark's structure; for VTAB,
    tasks."""
    if "tasks" in data:
        return len(data["tasks"]), data["skipped"]
    skipped = data.get("skipped", 0)
    skipped = sum(skipped.values()) if isinstance(skipped, dict) else skipped
    if "splits" in data:
        return sum(len(paths) for paths, _ in data["splits"].values()), skipped
    items = data["items"]
    return (sum(map(len, items.values())) if isinstance(items, dict) else len(items)), skipped


def layout_report(loaded: dict) -> str:
    """What `concrete-jungle eval --check` prints: each benchmark's usable and skipped items, what its run will
    note, and the digest of its files that its result will carry."""
    lines = ["| benchmark | items | skipped (missing or unreadable images) |", "| --- | --- | --- |"]
    for name, data in loaded.items():
        items, skipped = counts(data)
        lines.append(f"| {name} | {items} | {skipped} |")
    lines += ["", "The layout and every item were checked and every image opened; no model was loaded."]
    # paragraphs, not a list: printed through a pipe, rich keeps a paragraph whole but cuts a list item at the width
    lines += [f"\n{name}: note: {note}" for name, data in loaded.items() for note in data.get("notes", [])]
    lines += [f"\n{name}: benchmark files sha256 `{data['benchmark_files_sha256']}`" for name, data in loaded.items()]
    return "\n".join(lines)


def summary(results: dict[str, dict]) -> dict[str, dict]:
    """Per kind (compositional, recognition): the mean over the run's benchmarks of their headline numbers
    (the registry's ``headlines``), and those numbers; and the same for their chance-normalised scores
    (`chance.normalised`: 0 at chance, 1 perfect), from the chance level each result carries (``chance``, by
    headline metric). A result without one (written before results carried it) is named in ``without_chance``
    and leaves the normalised mean unset: a mean over fewer benchmarks would not be comparable."""
    from .chance import normalised

    out: dict[str, dict] = {}
    for name, result in results.items():
        kind, keys = BENCHMARKS[name].kind, BENCHMARKS[name].headlines
        keys = [k for k in keys if result["metrics"].get(k) is not None]
        if not keys:
            continue
        part = out.setdefault(kind, {"parts": {}, "chance": {}, "normalised": {}, "without_chance": []})
        part["parts"][name] = sum(result["metrics"][k] for k in keys) / len(keys)
        levels = [(result.get("chance") or {}).get(k) for k in keys]
        chance = None if None in levels else sum(levels) / len(keys)
        part["chance"][name] = chance
        part["normalised"][name] = normalised(part["parts"][name], chance)
        if chance is None:
            part["without_chance"].append(name)
    for kind in out.values():
        kind["mean"] = sum(kind["parts"].values()) / len(kind["parts"])
        scores = list(kind["normalised"].values())
        kind["normalised_mean"] = None if None in scores else sum(scores) / len(scores)
    return out


NORMALISED = ("chance-normalised: (score - chance) / (100 - chance) × 100, so a model that scores every option at "
              "random gets 0 and a perfect one 100; chance from each benchmark's items, docs/method.md §7")


def summary_line(kind: str, part: dict) -> str:
    """A kind's summary: its raw mean and its chance-normalised mean, each labelled, and each benchmark's headline
    number with its chance level."""
    parts = ", ".join(f"{n} {percent(v)} (chance {percent(part['chance'][n])})" for n, v in part["parts"].items())
    line = (f"**{kind.capitalize()}: raw mean {percent(part['mean'])}, chance-normalised mean "
            f"{percent(part['normalised_mean'])}** (the means over {parts}; each benchmark's headline number; "
            f"{NORMALISED})")
    if part["without_chance"]:
        line += (f". No chance level for {', '.join(part['without_chance'])} (a result written before results "
                 "carried it, or a metric whose chance is unknown): evaluate it again for the normalised mean")
    return line


def markdown(results: dict[str, dict]) -> str:
    """A run's results: which model, the summary line, then per benchmark its items and metrics."""
    labels = list(dict.fromkeys(r.get("model_label", "") for r in results.values()))
    lines = [f"Model: {', '.join(labels)}", ""] if any(labels) else []
    for kind, part in summary(results).items():
        lines += [summary_line(kind, part), ""]
    for name, result in results.items():
        lines += [f"## {name}", ""]
        if isinstance(result.get("n"), dict):  # items per subset
            lines += ["Items: " + ", ".join(f"{k} {v}" for k, v in result["n"].items()), ""]
        elif "n" in result or "items" in result:
            lines += [f"Items: {result.get('n', result.get('items'))}", ""]
        lines += metric_table(result) + [""] + validity_lines(result)
        if any(v is not None for v in (result.get("chance") or {}).values()):
            lines += ["Chance level (a model that scores every option at random): " + ", ".join(
                f"{k} {percent(v)}" for k, v in result["chance"].items() if v is not None), ""]
        skipped = result.get("skipped")
        if skipped and (sum(skipped.values()) if isinstance(skipped, dict) else skipped):
            lines += [f"Skipped items (missing or unreadable images): {skipped}", ""]
        for note in result.get("notes", []):
            lines += [f"Note: {note}", ""]
        if result.get("benchmark_files_sha256"):
            lines += [f"Benchmark files (sha256): `{result['benchmark_files_sha256']}`", ""]
    return "\n".join(lines)


def metric_table(result: dict) -> list[str]:
    """A result's metrics, a row each; beside them, where the result has them, the blind baseline's value
    (``blind``) and the kind of each average (``averages``: macro, the mean of subsets; micro, of items)."""
    blind = (result.get("blind") or {}).get("metrics")
    unseen = set((result.get("blind") or {}).get("not_applicable", ()))  # a text -> image choice: no blind
    kinds = result.get("averages") or {}
    head = ["metric", "%"] + (["blind %"] if blind is not None else []) + (["average"] if kinds else [])
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for k, v in result["metrics"].items():
        cells = [k, percent(v)] + ([percent(blind[k]) if k in blind else "n/a" if k in unseen else ""]
                                   if blind is not None else [])
        lines.append("| " + " | ".join(cells + ([kinds.get(k, "")] if kinds else [])) + " |")
    return lines


def validity_lines(result: dict) -> list[str]:
    """What the blind column and the bag-of-words parts of a result's table mean, in words (docs/method.md §7)."""
    lines = []
    if result.get("blind") is not None:
        lines += [f"Blind: the same options against the mean picture of the benchmark ({result['blind']['pictures']} "
                  "pictures), decided by the benchmark's own rule and tie rule: what the text tower prefers "
                  "whatever the picture."
                  + (" n/a: a caption choosing among pictures, which a model with no picture information can only "
                     "guess (its blind level is the chance level)." if result["blind"].get("not_applicable") else ""),
                  ""]
    if result.get("partial"):
        lines += [f"Partial: {result['partial']}.", ""]
    if result.get("bag_of_words"):
        parts = "; ".join(f"{s} {c['bow_identical']} of the same words ({s}/bow_identical), {c['bow_differs']} "
                          f"not ({s}/bow_differs)" for s, c in result["bag_of_words"].items())
        lines += [f"Bag of words (caption and negative of the same words, order aside): {parts}. A model that "
                  "ignores word order scores such a caption and its negative alike, a tie, which the rule counts "
                  "wrong.", ""]
    return lines


def percent(value) -> str:
    return "-" if value is None or value != value else f"{100 * value:.2f}"  # None or NaN: nothing to show


def column_names(paths: list[str | Path]) -> list[str]:
    """The shortest trailing part of each path that tells the files apart (``a/sugarcrepe.json`` and
    ``b/sugarcrepe.json``, not two ``sugarcrepe``)."""
    parts = [Path(p).parts for p in paths]
    for k in range(1, max(map(len, parts)) + 1):
        names = ["/".join(p[-k:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return [str(p) for p in paths]


def compare(first: list[str | Path], second: list[str | Path] | None = None, resamples: int = RESAMPLES,
            seed: int = 0) -> dict:
    """Compare result JSON files of one benchmark, each metric with the difference and its 95 % interval.

    Without ``second``: every file against the first (one run each; McNemar p for accuracy metrics). With
    ``second``: the runs of ``first`` (e.g. seeds) against the runs of ``second``, the difference of their means,
    runs resampled within each side as well as images (`outcomes.bootstrap_contrast`). Results computed on other
    benchmark files (their ``benchmark_files_sha256`` differ) are refused; results written before they carried
    one are compared with a note. Items are matched by key; results on other items are refused with the reason.
    The comparison as a dict; `compare_markdown` renders it."""
    from ..outcomes import OutcomesError, binary, bootstrap_contrast, check_same_items, mcnemar, verdict

    paths = [str(p) for p in first + (second or [])]
    results = [read_result(p) for p in paths]
    names = column_names(paths)
    benchmarks = sorted({r.get("benchmark", "?") for r in results})
    if len(benchmarks) > 1:
        raise OutcomesError(f"the files hold different benchmarks ({', '.join(benchmarks)}); compare one at a time")
    digests = {n: r["benchmark_files_sha256"] for n, r in zip(names, results) if r.get("benchmark_files_sha256")}
    base = next(iter(digests), None)
    other = next((n for n, d in digests.items() if d != digests[base]), None)
    if other:
        raise OutcomesError(f"{other} and {base} were computed on different {benchmarks[0]} files (benchmark files "
                            f"sha256 {digests[other]} against {digests[base]}): the same keys and images can hold "
                            "other captions, answers or class names, so a difference would not be the models'; "
                            "evaluate both on the same files")
    without = [n for n, r in zip(names, results) if "outcomes" not in r]
    if not without:
        check_same_items([r["outcomes"] for r in results], names)
    if second:
        sides = [("A", names[:len(first)], results[:len(first)]), ("B", names[len(first):], results[len(first):])]
    else:
        sides = [(n, [n], [r]) for n, r in zip(names, results)]
    keys = list(dict.fromkeys(k for r in results for k in r["metrics"]))
    # the headline metrics (M.Avg) first, then the rest (subsets, groups) in the results' order
    headlines = [k for k in BENCHMARKS[benchmarks[0]].headlines if k in keys] if benchmarks[0] in BENCHMARKS else []
    keys = headlines + [k for k in keys if k not in headlines]
    known = [k for k in keys if not without and k in results[0]["outcomes"]["metrics"]]
    base = sides[0][2]
    intervals = []  # per later column: the bootstrap of every metric with a recipe, one pass over the resamples
    for _, _, runs in sides[1:]:
        if not known:
            intervals.append({})
            continue
        groups = {"first": [r["outcomes"] for r in base], "second": [r["outcomes"] for r in runs]}
        intervals.append(bootstrap_contrast(groups, {"first": -1.0, "second": 1.0}, known, resamples, seed))
    rows = []
    for k in keys:
        row = {"metric": k, "values": [mean_or_none([r["metrics"].get(k) for r in runs]) for _, _, runs in sides],
               "differences": []}
        for (label, _, runs), interval, value in zip(sides[1:], intervals, row["values"][1:]):
            if k in interval:
                diff = {"vs": label} | interval[k]
                diff["verdict"] = verdict(diff["ci95"])
                flags = [binary(r["outcomes"], k) for r in (base[0], runs[0])]
                # an empty subset has no difference, hence no test of one (McNemar on no items gave p = 1)
                if len(base) == len(runs) == 1 and all(f is not None and len(f) for f in flags):
                    diff["mcnemar"] = mcnemar(*flags)
            else:  # no per-item outcomes, or a metric that is not a mean of them (mAP)
                first = row["values"][0]
                diff = {"vs": label, "estimate": None if first is None or value is None else 100 * (value - first),
                        "ci95": None, "verdict": "no interval"}
            row["differences"].append(diff)
        rows.append(row)
    return {"benchmark": benchmarks[0], "columns": [label for label, _, _ in sides],
            "files": {label: files for label, files, _ in sides}, "resamples": resamples, "seed": seed,
            "without_outcomes": without, "rows": rows,
            "without_digest": [n for n in names if n not in digests],
            # the version of the benchmark's scoring rule each was scored under (before results recorded it: 1)
            "rules": {n: r.get("rule", 1) for n, r in zip(names, results)},
            "models": {n: r.get("model_label") or r.get("model_hash", "?")[:8] for n, r in zip(names, results)},
            "items": {n: r.get("items", "?") for n, r in zip(names, results)}, "paths": dict(zip(names, paths))}


def read_result(path: str) -> dict:
    """A result file of `concrete-jungle eval`, or an error in one line naming the file and what to give instead."""
    what = "give result files that `concrete-jungle eval` wrote (<out>/<benchmark>.json)"
    try:
        result = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"--compare: {path} does not exist; {what}") from None
    except IsADirectoryError:
        raise ValueError(f"--compare: {path} is a folder; {what}") from None
    except (ValueError, OSError) as e:  # not JSON, not UTF-8 text, or unreadable
        raise ValueError(f"--compare: {path} cannot be read as JSON ({e}); {what}") from None
    if not isinstance(result, dict) or not isinstance(result.get("metrics"), dict):
        raise ValueError(f"--compare: {path} holds no metrics, so it is no result of `concrete-jungle eval`; {what}")
    return result


def mean_or_none(values: list) -> float | None:
    return None if not values or any(v is None for v in values) else sum(values) / len(values)


def compare_markdown(comparison: dict) -> str:
    """The comparison as a table: each column's value, then per later column the difference to the first (points)
    with its 95 % interval, McNemar's p where it applies, and whether the difference is resolved, in words."""
    columns = comparison["columns"]
    first = columns[0]
    head = ["metric", *columns]
    for label in columns[1:]:
        head += [f"Δ {label} - {first}", "95 % interval", "McNemar p", "resolved?"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in comparison["rows"]:
        cells = [row["metric"], *(percent(v) for v in row["values"])]
        for d in row["differences"]:
            interval = "-" if d.get("ci95") is None else f"[{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}]"
            p = d.get("mcnemar", {}).get("p")
            cells += ["-" if d["estimate"] is None else f"{d['estimate']:+.2f}", interval,
                      "-" if p is None else f"{p:.3g}", WORDS[d["verdict"]]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Differences in points. Intervals: paired bootstrap, {comparison['resamples']} resamples of the "
              "images (all items of an image together" + (", and of the runs within each side" if
                                                            "A" in comparison["files"] else "")
              + f"; seed {comparison['seed']}); McNemar: exact, on the items one run gets right and the other not."]
    if comparison["without_outcomes"]:
        lines += ["", "No intervals: " + ", ".join(comparison["without_outcomes"]) + " hold(s) no per-item outcomes "
                  "(written before they were kept); evaluate again to get them."]
    rules = comparison.get("rules", {})
    if len(set(rules.values())) > 1:
        lines += ["", f"Warning: scored under different versions of the {comparison['benchmark']} rule ("
                  + ", ".join(f"{n} rule {v}" for n, v in rules.items()) + "): the rule changed between them "
                  "(docs/method.md §7), so a difference may be the rule's, not the models'; evaluate the older again."]
    if comparison["without_digest"]:
        lines += ["", "Not confirmed on the same benchmark files: " + ", ".join(comparison["without_digest"])
                  + " (written before results carried the digest of their benchmark files): only item keys and "
                  "images were matched; evaluate again to confirm."]
    lines += ["", "Files:"]
    for label, files in comparison["files"].items():
        for name in files:
            prefix = f"{label}: " if label != name else ""
            lines.append(f"- {prefix}{name}: `{comparison['paths'][name]}`, {comparison['benchmark']}, model "
                         f"{comparison['models'][name]}, items {comparison['items'][name]}")
    return "\n".join(lines) + "\n"


WORDS = {"higher": "yes: higher", "lower": "yes: lower", "not resolved": "no", "no interval": "-"}
