"""Is a difference between models real? Per-item outcomes, the metrics they make, and paired tests on them.

Every benchmark's result carries its **outcomes**: named series of per-item values, each item with a stable key and
the *unit* it belongs to (the image it shows; Winoground's two-image items are their own unit), and the recipe of
each metric from the series::

    {"series": {"add_att": {"keys": [...], "units": [...], "values": [1, 0, ...]}, ...},
     "metrics": {"add_att": {"mean": "add_att"},                          # mean of a series
                 "image_retrieval_recall@5": {"mean": "t2i_rank", "below": 5},  # share of values below 5
                 "object/group": {"mean": "object/group", "percent_decimals": 2},  # as a percent rounded to 0.01
                 "M.Avg": {"macro": ["add_att", ...]},                     # mean of the metrics that have a value
                 "all items (micro)": {"micro": ["add_att", ...]},         # mean over all items of the series
                 "ADD": {"macro": ["add_att", "add_obj"], "complete": true},  # None unless all have one
                 "atom": {"micro": ["atom/c4", ...], "complete": true},    # None unless each has an item
                 "vg_relation/on": {"mean": "vg_relation/on", "part": true}}}   # computed, not reported

`metric_values` computes every metric from the outcomes, optionally with each unit counted a number of times: it
reports a run's metrics, and `resampled_metric_values` computes the same values for a block of bootstrap resamples
at once, to the last bit (tested resample by resample against `metric_values`).

`bootstrap_contrast` is the paired bootstrap both `eval --compare` and the toy-world study use: a resample draws
units with replacement (all items of an image together: items that share an image are not independent) and, for a
side with several runs (seeds), runs with replacement; the same unit draw serves every run, which is the pairing.
`mcnemar` is the exact McNemar test for two runs' 0/1 answers on the same items.
"""

from __future__ import annotations

import math

import numpy as np

# bootstrap resamples of every interval by default (eval --compare, leaderboards, grid, tradeoff, model cards):
# one model gets one interval whichever command gives it
RESAMPLES = 2000


class OutcomesError(ValueError):
    """Results that cannot be compared (other items, no outcomes), with the reason."""


def series(keys: list, units: list, values: list) -> dict:
    """One series of per-item values, as results store it."""
    return {"keys": [str(k) for k in keys], "units": [str(u) for u in units], "values": [float(v) for v in values]}


def metric_values(outcomes: dict, unit_counts: dict[str, np.ndarray] | None = None,
                  names: list[str] | None = None) -> dict[str, float | None]:
    """Every metric of ``outcomes``, or only ``names`` (computing the parts they need, no other series: a bootstrap
    resample needs one or two metrics); ``unit_counts[series]`` weighs each item (how often its unit was drawn). A
    metric with no item (every item skipped, or no unit drawn) has no value, None."""
    recipes = outcomes["metrics"]
    values: dict[str, float | None] = {}

    def value(name: str) -> float | None:  # a macro's parts first, whatever order the recipes are stored in
        if name in values:
            return values[name]
        recipe = recipes[name]
        if "macro" in recipe:
            parts = [v for v in map(value, recipe["macro"]) if v is not None]
            whole = not recipe.get("complete") or len(parts) == len(recipe["macro"])
            values[name] = sum(parts) / len(parts) if parts and whole else None
            return values[name]
        if "micro" in recipe:  # every item of the series weighs alike, whatever its series' size
            if recipe.get("complete") and not all(len(outcomes["series"][s]["values"]) for s in recipe["micro"]):
                values[name] = None  # a part without items: not the whole the metric names
                return values[name]
            total = count = 0.0
            for s in recipe["micro"]:
                data = np.asarray(outcomes["series"][s]["values"], dtype=np.float64)
                weights = np.ones(len(data)) if unit_counts is None else unit_counts[s]
                total, count = total + float((data * weights).sum()), count + float(weights.sum())
            values[name] = total / count if count else None
            return values[name]
        data = np.asarray(outcomes["series"][recipe["mean"]]["values"], dtype=np.float64)
        if "below" in recipe:
            data = (data < recipe["below"]).astype(np.float64)
        weights = None if unit_counts is None else unit_counts[recipe["mean"]]
        total = len(data) if weights is None else weights.sum()
        hits = float((data if weights is None else data * weights).sum())
        if total and "percent_decimals" in recipe:  # a benchmark that rounds before averaging, as its code computes it
            values[name] = round(hits * 100 / float(total), recipe["percent_decimals"]) / 100
        else:
            values[name] = hits / float(total) if total else None
        return values[name]

    return {name: value(name) for name in (recipes if names is None else names)}


def resampled_metric_values(outcomes: dict, counts: np.ndarray, where: dict[str, np.ndarray],
                            names: list[str]) -> dict[str, np.ndarray]:
    """`metric_values` of ``names`` for many resamples at once: row r of ``counts`` (resamples x units) is how often
    resample r drew each unit, ``where[series]`` each item's unit. Each value is the one `metric_values` gives with
    that row as its unit counts, to the last bit (NaN where it gives None): the same operations in the same order,
    and where a series' values are whole numbers its weighted sums are exact integers, computed per unit."""
    recipes = outcomes["metrics"]
    resamples, n_units = counts.shape
    values: dict[str, np.ndarray] = {}
    missing = np.full(resamples, np.nan)

    def sums(name: str, below: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per resample: (the weighted sum of the series' values, the sum of its weights)."""
        data = np.asarray(outcomes["series"][name]["values"], dtype=np.float64)
        if below is not None:
            data = (data < below).astype(np.float64)
        units = where[name]
        if np.array_equal(data, np.round(data)) and np.abs(data).sum() * max(1, n_units) < 2 ** 52:  # exact sums
            return (counts @ np.bincount(units, weights=data, minlength=n_units),
                    counts @ np.bincount(units, minlength=n_units).astype(np.float64))
        # fractions: summed item by item, one resample at a time, as `metric_values` sums them (a sum along a
        # block's rows may add in another order and differ in the last bit)
        hits, total = np.empty(resamples), np.empty(resamples)
        for r, row in enumerate(counts):
            weights = row[units]
            hits[r], total[r] = (data * weights).sum(), weights.sum()
        return hits, total

    def value(name: str) -> np.ndarray:
        if name in values:
            return values[name]
        recipe = recipes[name]
        if "macro" in recipe:
            parts = np.stack([value(part) for part in recipe["macro"]])
            present = ~np.isnan(parts)
            summed: np.ndarray | float = 0.0
            for part, here in zip(parts, present):  # adding 0.0 for a part without a value leaves the sum as it is
                summed = summed + np.where(here, part, 0.0)
            n = present.sum(axis=0)
            whole = (n > 0) & (n == len(recipe["macro"]) if recipe.get("complete") else True)
            values[name] = np.where(whole, summed / np.maximum(n, 1), np.nan)
        elif "micro" in recipe:
            if recipe.get("complete") and not all(len(outcomes["series"][s]["values"]) for s in recipe["micro"]):
                values[name] = missing
                return values[name]
            total: np.ndarray | float = 0.0
            count: np.ndarray | float = 0.0
            for s in recipe["micro"]:
                hits, weights = sums(s)
                total, count = total + hits, count + weights
            values[name] = np.where(count != 0, total / np.where(count != 0, count, 1), np.nan)
        else:
            hits, total = sums(recipe["mean"], recipe.get("below"))
            safe = np.where(total != 0, total, 1)
            if "percent_decimals" in recipe:  # Python's round, as `metric_values` rounds
                share = np.array([round(float(x), recipe["percent_decimals"]) for x in hits * 100 / safe]) / 100
            else:
                share = hits / safe
            values[name] = np.where(total != 0, share, np.nan)
        return values[name]

    return {name: value(name) for name in names}


def reported(outcomes: dict) -> dict[str, float | None]:
    """The metrics a result reports: every metric but the parts (``"part": true``: a per-relation accuracy that a
    macro average needs, too many to list)."""
    return {k: v for k, v in metric_values(outcomes).items() if not outcomes["metrics"][k].get("part")}


def binary(outcomes: dict, metric: str) -> np.ndarray | None:
    """The 0/1 answers behind an accuracy metric (a mean of one series of 0/1, a micro average of several, or a
    recall's hits), else None."""
    recipe = outcomes["metrics"][metric]
    parts = recipe.get("micro") or ([recipe["mean"]] if "mean" in recipe else [])
    if not parts:
        return None
    data = np.concatenate([np.asarray(outcomes["series"][s]["values"], dtype=np.float64) for s in parts])
    if "below" in recipe:
        return data < recipe["below"]
    return data.astype(bool) if np.isin(data, (0.0, 1.0)).all() else None


def check_same_items(runs: list[dict], names: list[str]) -> None:
    """Every run's outcomes hold the same series with the same item keys and units; else the reason."""
    first = runs[0]
    for run, name in zip(runs[1:], names[1:]):
        if set(run["series"]) != set(first["series"]):
            raise OutcomesError(f"{name} and {names[0]} were evaluated on different subsets "
                                f"({sorted(run['series'])} against {sorted(first['series'])}); compare results of "
                                "the same benchmark files")
        for s, data in first["series"].items():
            other = run["series"][s]
            if other["keys"] != data["keys"]:
                extra = sorted(set(other["keys"]) - set(data["keys"]))[:3]
                missing = sorted(set(data["keys"]) - set(other["keys"]))[:3]
                what = (f"items only in {name}: {extra}; only in {names[0]}: {missing}" if extra or missing
                        else "the same items in another order")
                raise OutcomesError(f"{name} and {names[0]} hold different items in {s!r} ({what}); a difference "
                                    "on other items is not a paired comparison: evaluate both on the same files "
                                    "(and the same --skip-missing result)")
            if other["units"] != data["units"]:
                raise OutcomesError(f"{name} and {names[0]} assign the items of {s!r} to other images")


def bootstrap_contrast(groups: dict[str, list[dict]], weights: dict[str, float], metrics: list[str],
                       resamples: int = RESAMPLES, seed: int = 0, rng: np.random.Generator | None = None,
                       paired_runs: bool = False) -> dict[str, dict]:
    """Per metric, sum_g weights[g] * (mean over g's runs of the metric), in points, with its 95 % percentile
    interval and standard error from a paired bootstrap over units (and over runs within each group). Every run
    must hold the same items (`check_same_items`). ``paired_runs``: run k of every group belongs together (the
    same seed, the same batches): one draw of run indices serves every group."""
    rng = rng or np.random.default_rng(seed)
    groups = {g: [prepared(run) for run in runs] for g, runs in groups.items()}
    first_runs = next(iter(groups.values()))
    if paired_runs and len({len(runs) for runs in groups.values()}) > 1:
        raise OutcomesError("paired runs need the same number of runs in every group")
    units = sorted({u for data in first_runs[0]["series"].values() for u in data["units"]})
    index = {u: i for i, u in enumerate(units)}
    where = {s: np.array([index[u] for u in data["units"]], dtype=np.int64)
             for s, data in first_runs[0]["series"].items()}

    def estimate(picks: dict[str, list[dict]], counts: np.ndarray | None) -> dict[str, float | None]:
        unit_counts = None if counts is None else {s: counts[w] for s, w in where.items()}
        values = {g: [metric_values(run, unit_counts, metrics) for run in runs] for g, runs in picks.items()}
        out = {}
        for m in metrics:
            per_group = [[v[m] for v in values[g]] for g in weights]
            out[m] = None if any(x is None for vs in per_group for x in vs) else \
                100 * sum(w * sum(vs) / len(vs) for w, vs in zip(weights.values(), per_group))
        return out

    point = estimate(groups, None)
    # the draws in the order the generator has always given them (units, then each group's runs), so that a seed
    # gives the intervals it gave; each block of resamples then has its metrics computed at once
    # (`resampled_metric_values`), a block small enough that its unit counts stay a few tens of MB
    block = max(1, min(resamples, 4_000_000 // max(1, len(units))))
    draws: dict[str, list[np.ndarray]] = {m: [] for m in metrics}
    for start in range(0, resamples, block):
        size = min(block, resamples - start)
        counts = np.empty((size, len(units)))
        picked = {g: np.empty((size, len(runs)), dtype=np.int64) for g, runs in groups.items()}
        for r in range(size):
            counts[r] = np.bincount(rng.integers(0, len(units), len(units)), minlength=len(units))
            if paired_runs:
                draw = rng.integers(0, len(first_runs), len(first_runs))
                for g in groups:
                    picked[g][r] = draw
            else:
                for g, runs in groups.items():
                    picked[g][r] = rng.integers(0, len(runs), len(runs))
        drawn = {g: [resampled_metric_values(run, counts, where, metrics) for run in runs]
                 for g, runs in groups.items()}
        for m in metrics:
            total: np.ndarray | float = 0.0  # sum over groups of weight x mean of the drawn runs, as `estimate` adds
            for g, w in weights.items():
                values = np.stack([run[m] for run in drawn[g]], axis=1)[np.arange(size)[:, None], picked[g]]
                summed: np.ndarray | float = 0.0
                for k in range(values.shape[1]):
                    summed = summed + values[:, k]
                total = total + w * summed / values.shape[1]
            total = 100 * total
            draws[m].append(total[~np.isnan(total)])  # a resample that drew no item of a metric has no value of it
    draws = {m: np.concatenate(parts) if parts else np.empty(0) for m, parts in draws.items()}
    out = {}
    for m in metrics:
        if point[m] is None or len(draws[m]) < 2:
            out[m] = {"estimate": point[m], "ci95": None, "se": None, "p": None, "units": len(units)}
            continue
        low, high = np.percentile(draws[m], [2.5, 97.5])
        # two-sided bootstrap p of "no difference": twice the smaller share of draws on either side of 0
        # (+1 in both counts, so a p is never 0 from finitely many draws)
        values = draws[m]
        p = min(1.0, 2 * (min(int((values <= 0).sum()), int((values >= 0).sum())) + 1) / (len(values) + 1))
        out[m] = {"estimate": point[m], "ci95": [float(low), float(high)], "se": float(np.std(draws[m], ddof=1)),
                  "p": p, "units": len(units)}
    return out


def holm(p: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values of a family of tests (reject where adjusted p < alpha): the k-th smallest
    p times (m - k + 1), never below an earlier adjusted p, at most 1."""
    adjusted, running = {}, 0.0
    for k, (name, value) in enumerate(sorted(p.items(), key=lambda kv: kv[1])):
        running = max(running, min(1.0, (len(p) - k) * value))
        adjusted[name] = running
    return adjusted


def prepared(outcomes: dict) -> dict:
    """The outcomes with each series' values as an array, converted once for the many resamples."""
    return {"metrics": outcomes["metrics"],
            "series": {s: data | {"values": np.asarray(data["values"], dtype=np.float64)}
                       for s, data in outcomes["series"].items()}}


def verdict(ci95: list[float] | None) -> str:
    """In words: whether the interval of a difference excludes zero."""
    if ci95 is None:
        return "no interval"
    return "higher" if ci95[0] > 0 else "lower" if ci95[1] < 0 else "not resolved"


def mcnemar(a: np.ndarray, b: np.ndarray) -> dict:
    """Exact McNemar test of two runs' 0/1 answers on the same items: the items only one of them gets right are a
    fair coin under the null; two-sided p = min(1, 2 P(X <= min(b, c))), X ~ Binomial(b + c, 1/2)."""
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    n, k = only_a + only_b, min(only_a, only_b)
    i = np.arange(k + 1)
    # log C(n, i) - n log 2, summed in log space: exact to rounding for any n
    terms = np.array([math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) for j in i]) - n * math.log(2)
    top = terms.max()
    tail = float(np.exp(top) * np.exp(terms - top).sum())
    return {"only_first": only_a, "only_second": only_b, "p": min(1.0, 2 * tail)}
