"""Intervals on every comparison: the paired bootstrap over images against a direct computation, McNemar against the
binomial, and comparisons of results on other items refused."""

import json
import math

import numpy as np
import pytest

from concrete_jungle.cli import main
from concrete_jungle.outcomes import (
    OutcomesError,
    bootstrap_contrast,
    mcnemar,
    metric_values,
    resampled_metric_values,
    series,
)


def outcomes(flags: dict[str, list[int]], images: list[str]) -> dict:
    return {"series": {s: series([f"{s}{i}" for i in range(len(v))], images, v) for s, v in flags.items()},
            "metrics": {**{s: {"mean": s} for s in flags}, "M.Avg": {"macro": list(flags)}}}


def direct(groups, weights, resamples, seed, units):
    """The same bootstrap written out: every drawn image's items listed as often as it was drawn."""
    rng = np.random.default_rng(seed)
    names = sorted(set(units))
    draws = []
    for _ in range(resamples):
        drawn = [names[i] for i in rng.integers(0, len(names), len(names))]
        picks = {g: [runs[i] for i in rng.integers(0, len(runs), len(runs))] for g, runs in groups.items()}
        total = 0.0
        for g, w in weights.items():
            per_run = []
            for run in picks[g]:
                accuracies = []
                for data in run["series"].values():
                    listed = [v for u in drawn for unit, v in zip(data["units"], data["values"]) if unit == u]
                    accuracies.append(sum(listed) / len(listed))
                per_run.append(sum(accuracies) / len(accuracies))
            total += w * sum(per_run) / len(per_run)
        draws.append(100 * total)
    below, above = sum(d <= 0 for d in draws), sum(d >= 0 for d in draws)
    return (np.percentile(draws, [2.5, 97.5]).tolist(), float(np.std(draws, ddof=1)),
            min(1.0, 2 * (min(below, above) + 1) / (resamples + 1)))


@pytest.mark.parametrize("runs_per_side", [1, 3])
def test_the_bootstrap_over_images_equals_a_direct_computation(runs_per_side):
    rng = np.random.default_rng(5)
    images = [f"img{i // 3}" for i in range(30)]  # three items per image
    side = {g: [outcomes({s: rng.integers(0, 2, 30).tolist() for s in ("add_att", "swap_obj")}, images)
                for _ in range(runs_per_side)] for g in ("first", "second")}
    weights = {"first": -1.0, "second": 1.0}
    result = bootstrap_contrast(side, weights, ["M.Avg"], resamples=60, seed=3)["M.Avg"]
    interval, se, p = direct(side, weights, 60, 3, images)
    assert result["ci95"] == pytest.approx(interval) and result["se"] == pytest.approx(se)
    assert result["p"] == pytest.approx(p)
    means = {g: np.mean([metric_values(r)["M.Avg"] for r in runs]) for g, runs in side.items()}
    assert result["estimate"] == pytest.approx(100 * (means["second"] - means["first"]))
    assert result["units"] == 10


def every_kind_of_recipe(rng, units: list[str]) -> dict:
    """Outcomes with a metric of each recipe a benchmark uses: a mean of 0/1, of whole ranks below a cut, of
    fractions (scores), rounded to a percent's decimals; micro and macro averages, complete or not, over series of
    which one holds no item."""
    n = len(units)
    flags = {"add_att": rng.integers(0, 2, n), "swap_obj": rng.integers(0, 2, n), "rank": rng.integers(0, 12, n),
             "score": rng.random(n) * 3 - 1, "thirds": rng.integers(0, 4, n) / 3}
    out = {"series": {s: series([f"{s}{i}" for i in range(n)], units, v) for s, v in flags.items()},
           "metrics": {"add_att": {"mean": "add_att"}, "swap_obj": {"mean": "swap_obj"},
                       "recall@5": {"mean": "rank", "below": 5}, "score": {"mean": "score"},
                       "thirds": {"mean": "thirds", "percent_decimals": 2},
                       "rounded": {"mean": "add_att", "percent_decimals": 1},
                       "none": {"mean": "empty"}, "micro": {"micro": ["add_att", "thirds", "score"]},
                       "micro complete": {"micro": ["add_att", "empty"], "complete": True},
                       "micro of empty": {"micro": ["empty"]},
                       "M.Avg": {"macro": ["add_att", "swap_obj", "none", "thirds"]},
                       "macro complete": {"macro": ["add_att", "none"], "complete": True},
                       "macro of macros": {"macro": ["M.Avg", "micro", "rounded"], "complete": True}}}
    out["series"]["empty"] = series([], [], [])
    return out


def test_every_resample_s_metrics_at_once_are_metric_values_to_the_last_bit():
    """`resampled_metric_values` (the bootstrap's block of resamples) gives for each row of unit counts exactly what
    `metric_values` gives with that row, None as NaN, for every kind of recipe."""
    rng = np.random.default_rng(0)
    units = [f"img{i % 23}" for i in range(97)]
    run = every_kind_of_recipe(rng, units)
    names = sorted(set(units))
    where = {s: np.array([names.index(u) for u in data["units"]], dtype=np.int64) for s, data in run["series"].items()}
    counts = np.stack([np.bincount(rng.integers(0, len(names), len(names)), minlength=len(names)) for _ in range(40)]
                      + [np.zeros(len(names))]).astype(np.float64)  # the last row draws no unit at all
    counts[0, :20] = 0  # a resample without most units
    at_once = resampled_metric_values(run, counts, where, list(run["metrics"]))
    for r, row in enumerate(counts):
        one = metric_values(run, {s: row[w] for s, w in where.items()})
        for name, value in one.items():
            assert (np.isnan(at_once[name][r]) if value is None else at_once[name][r] == value), (name, r)
    assert np.isnan(at_once["none"]).all() and not np.isnan(at_once["micro"][:-1]).any()


@pytest.mark.parametrize("paired", [False, True])
def test_the_bootstrap_in_blocks_draws_and_decides_as_one_resample_at_a_time(paired):
    """Each resample's contrast computed one at a time with `metric_values` (as the bootstrap did before it took
    blocks of resamples): the same draws from the same generator, the same interval, standard error and p to the
    last bit, across blocks and for a generator shared by two calls."""
    rng = np.random.default_rng(1)
    units = [f"img{i % 31}" for i in range(90)]
    groups = {g: [every_kind_of_recipe(rng, units) for _ in range(3)] for g in ("a", "b", "c")}
    weights = {"a": -1.0, "b": 1 / 3, "c": 2 / 3}  # weights whose products round
    metrics = ["M.Avg", "score", "thirds", "macro of macros", "none"]

    def one_at_a_time(generator, resamples):
        names = sorted(set(units))
        where = {s: np.array([names.index(u) for u in d["units"]], dtype=np.int64)
                 for s, d in groups["a"][0]["series"].items()}
        draws = {m: [] for m in metrics}
        for _ in range(resamples):
            counts = np.bincount(generator.integers(0, len(names), len(names)), minlength=len(names)).astype(float)
            if paired:
                draw = generator.integers(0, 3, 3)
                picks = {g: [runs[i] for i in draw] for g, runs in groups.items()}
            else:
                picks = {g: [runs[i] for i in generator.integers(0, len(runs), len(runs))]
                         for g, runs in groups.items()}
            values = {g: [metric_values(run, {s: counts[w] for s, w in where.items()}, metrics) for run in runs]
                      for g, runs in picks.items()}
            for m in metrics:
                per_group = [[v[m] for v in values[g]] for g in weights]
                if not any(x is None for vs in per_group for x in vs):
                    draws[m].append(100 * sum(w * sum(vs) / len(vs) for w, vs in zip(weights.values(), per_group)))
        return draws

    shared, reference = np.random.default_rng(7), np.random.default_rng(7)
    for resamples in (300, 45):  # a second call continues the same generator
        result = bootstrap_contrast(groups, weights, metrics, resamples, rng=shared, paired_runs=paired)
        draws = one_at_a_time(reference, resamples)
        for m in metrics:
            if not draws[m]:
                assert result[m]["ci95"] is None
                continue
            drawn = np.asarray(draws[m])
            p = min(1.0, 2 * (min(int((drawn <= 0).sum()), int((drawn >= 0).sum())) + 1) / (len(drawn) + 1))
            assert result[m]["ci95"] == np.percentile(drawn, [2.5, 97.5]).tolist(), m
            assert result[m]["se"] == float(np.std(drawn, ddof=1)) and result[m]["p"] == p, m
    assert result["none"]["ci95"] is None and result["M.Avg"]["ci95"] is not None


def test_the_metrics_asked_for_are_computed_from_their_own_series_alone():
    """A bootstrap resample asks for one metric; the others (retrieval over thousands of ranks) are not touched."""
    run = outcomes({"add_att": [1, 0], "swap_obj": [1, 1]}, ["a", "b"])
    run["metrics"]["image_retrieval_recall@1"] = {"mean": "t2i_rank", "below": 1}  # a series this run lacks
    assert metric_values(run, names=["M.Avg"]) == {"M.Avg": 0.75}
    with pytest.raises(KeyError):
        metric_values(run)


def test_holm_adjusts_the_smallest_p_by_the_family_size_and_keeps_the_order():
    from concrete_jungle.outcomes import holm

    assert holm({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx({"a": 0.03, "c": 0.06, "b": 0.06})
    assert holm({"a": 0.5, "b": 0.6}) == {"a": 1.0, "b": 1.0}
    assert holm({"only": 0.02}) == {"only": 0.02}


def test_items_of_one_image_move_together_so_the_interval_is_wider_than_for_independent_items():
    rng = np.random.default_rng(0)
    # each image's items agree (an easy or a hard picture): resampling items alone would understate the spread
    per_image = rng.integers(0, 2, 100)
    flags = np.repeat(per_image, 5).tolist()
    other = np.repeat(rng.integers(0, 2, 100), 5).tolist()
    clustered = [f"img{i // 5}" for i in range(500)]
    independent = [f"img{i}" for i in range(500)]
    width = {}
    for name, units in (("clustered", clustered), ("independent", independent)):
        groups = {"a": [outcomes({"x": flags}, units)], "b": [outcomes({"x": other}, units)]}
        low, high = bootstrap_contrast(groups, {"a": -1.0, "b": 1.0}, ["x"], resamples=300)["x"]["ci95"]
        width[name] = high - low
    assert width["clustered"] > 1.8 * width["independent"]  # sqrt(5) in theory


def test_mcnemar_is_the_exact_binomial_test_of_the_discordant_items():
    a = np.array([1] * 30 + [0] * 10 + [1] * 50 + [0] * 7, bool)
    b = np.array([0] * 30 + [1] * 10 + [1] * 50 + [0] * 7, bool)
    result = mcnemar(a, b)
    assert (result["only_first"], result["only_second"]) == (30, 10)
    expected = 2 * sum(math.comb(40, i) for i in range(11)) / 2**40
    assert result["p"] == pytest.approx(expected, rel=1e-9)
    assert mcnemar(a, a)["p"] == 1.0


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Result files of four random tiny models on SugarCrepe, Winoground and Flickr-style retrieval."""
    from benchmark_fixtures import noise_image, write_data_root, write_winoground

    root = tmp_path_factory.mktemp("results")
    data = write_data_root(root / "data")
    write_winoground(data / "winoground", "a {} on the left of a box", "a box on the left of a {}", n=12)
    (data / "flickr30k" / "images").mkdir(parents=True)
    images = []
    for i in range(10):
        noise_image(data / "flickr30k" / "images" / f"{i}.jpg", 100 + i)
        images.append({"filename": f"{i}.jpg", "split": "test",
                       "sentences": [{"raw": f"a photo number {i}"}, {"raw": f"picture {i} of things"}]})
    (data / "flickr30k" / "dataset_flickr30k.json").write_text(json.dumps({"images": images}))
    for seed in (0, 1, 2, 3):
        assert main(["eval", "--benchmarks", "sugarcrepe,retrieval,winoground", "--data-root", str(data),
                     "--model", "cj-tiny", "--pretrained", "none", "--seed", str(seed), "--out",
                     str(root / f"s{seed}"), "--no-progress"]) == 0
    return root


def test_result_files_keep_every_item_with_its_image(results):
    result = json.loads((results / "s0" / "sugarcrepe.json").read_text())
    outcomes = result["outcomes"]
    # a series per subset, and per bag-of-words part of a subset (docs/method.md §7)
    parts = {f"{s}/{part}": n for s, split in result["bag_of_words"].items() for part, n in split.items()}
    assert set(outcomes["series"]) == set(result["n"]) | set(parts)
    assert all(len(outcomes["series"][s]["keys"]) == n for s, n in (result["n"] | parts).items())
    assert metric_values(outcomes) == result["metrics"]  # the reported numbers are the outcomes' numbers
    ranks = json.loads((results / "s0" / "retrieval.json").read_text())
    assert metric_values(ranks["outcomes"]) == ranks["metrics"]
    assert set(ranks["outcomes"]["series"]) == {"i2t_rank", "t2i_rank"}


def test_eval_compare_prints_intervals_mcnemar_and_words_and_writes_json(results, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the table on one line per row
    a, b = results / "s0" / "sugarcrepe.json", results / "s1" / "sugarcrepe.json"
    assert main(["eval", "--compare", str(a), str(b), "--resamples", "200", "--compare-json",
                 str(tmp_path / "c.json")]) == 0
    printed = capsys.readouterr().out
    assert "95 % interval" in printed and "McNemar p" in printed and "resolved?" in printed
    comparison = json.loads((tmp_path / "c.json").read_text())
    row = next(r for r in comparison["rows"] if r["metric"] == "add_att")
    diff = row["differences"][0]
    ra, rb = (json.loads(p.read_text()) for p in (a, b))
    assert diff["estimate"] == pytest.approx(100 * (rb["metrics"]["add_att"] - ra["metrics"]["add_att"]))
    assert diff["ci95"][0] <= diff["estimate"] <= diff["ci95"][1]
    flags = [np.array(r["outcomes"]["series"]["add_att"]["values"], bool) for r in (ra, rb)]
    assert diff["mcnemar"] == mcnemar(*flags)
    groups = {"first": [ra["outcomes"]], "second": [rb["outcomes"]]}
    direct_result = bootstrap_contrast(groups, {"first": -1.0, "second": 1.0}, ["add_att", "M.Avg"], 200, 0)
    assert diff["ci95"] == direct_result["add_att"]["ci95"]
    m_avg = next(r for r in comparison["rows"] if r["metric"] == "M.Avg")["differences"][0]
    assert m_avg["ci95"] == direct_result["M.Avg"]["ci95"] and "mcnemar" not in m_avg  # a macro: no McNemar


def test_eval_compare_puts_the_headline_first_and_an_empty_subset_has_no_mcnemar(results, tmp_path):
    from concrete_jungle.evaluation.report import compare, compare_markdown

    files = []
    for seed in (0, 1):  # a subset without items (a data root that holds none of it), in both runs alike
        result = json.loads((results / f"s{seed}" / "sugarcrepe.json").read_text())
        result["metrics"]["add_att"] = None
        result["outcomes"]["series"]["add_att"].update(keys=[], units=[], values=[])
        files.append(tmp_path / f"s{seed}.json")
        files[-1].write_text(json.dumps(result))
    comparison = compare(files, resamples=50)
    metrics = [row["metric"] for row in comparison["rows"]]
    assert metrics[0] == "M.Avg" and metrics[1:] == [m for m in json.loads(files[0].read_text())["metrics"]
                                                     if m != "M.Avg"]
    empty = next(r for r in comparison["rows"] if r["metric"] == "add_att")["differences"][0]
    assert empty["estimate"] is None and "mcnemar" not in empty
    line = next(line for line in compare_markdown(comparison).splitlines() if line.startswith("| add_att "))
    assert line.split(" | ")[3:6] == ["-", "-", "-"]  # the difference, its interval and McNemar's p


def test_eval_compare_of_seeds_against_seeds(results, capsys, tmp_path):
    files = [str(results / f"s{s}" / "winoground.json") for s in range(4)]
    assert main(["eval", "--compare", *files[:2], "--vs", *files[2:], "--resamples", "100", "--compare-json",
                 str(tmp_path / "c.json")]) == 0
    comparison = json.loads((tmp_path / "c.json").read_text())
    assert comparison["columns"] == ["A", "B"] and len(comparison["files"]["A"]) == 2
    row = next(r for r in comparison["rows"] if r["metric"] == "text")
    runs = [json.loads(open(f).read())["metrics"]["text"] for f in files]
    assert row["differences"][0]["estimate"] == pytest.approx(100 * (np.mean(runs[2:]) - np.mean(runs[:2])))
    assert "mcnemar" not in row["differences"][0]  # several runs a side: the bootstrap alone
    assert "A: s0/winoground.json" in capsys.readouterr().out


def test_compare_refuses_other_items_and_other_benchmarks(results, tmp_path, capsys):
    a = json.loads((results / "s0" / "sugarcrepe.json").read_text())
    fewer = json.loads(json.dumps(a))
    answers = fewer["outcomes"]["series"]["add_att"]
    for field in ("keys", "units", "values"):
        answers[field] = answers[field][1:]
    (tmp_path / "fewer.json").write_text(json.dumps(fewer))
    assert main(["eval", "--compare", str(results / "s0" / "sugarcrepe.json"), str(tmp_path / "fewer.json")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "hold different items in 'add_att' (items only in" in err and "not a paired comparison" in err
    with pytest.raises(OutcomesError, match="different benchmarks"):
        from concrete_jungle.evaluation.report import compare

        compare([results / "s0" / "sugarcrepe.json", results / "s0" / "winoground.json"])
    old = {k: v for k, v in a.items() if k != "outcomes"}  # a result written before outcomes were kept
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert main(["eval", "--compare", str(tmp_path / "old.json"), str(results / "s1" / "sugarcrepe.json")]) == 0
    assert "hold(s) no per-item outcomes" in " ".join(capsys.readouterr().out.split())


def test_every_interval_has_one_default_number_of_resamples():
    """A model card bootstrapped 1,000 resamples and `tradeoff` 2,000: one model had two intervals."""
    import inspect

    from concrete_jungle.analysis import model_card, tradeoff
    from concrete_jungle.cli import build_parser
    from concrete_jungle.evaluation import leaderboard, report
    from concrete_jungle.experiments.grid import GridEval
    from concrete_jungle.outcomes import RESAMPLES

    parser = build_parser()
    for command in (["eval"], ["tradeoff", "a", "b", "--out", "t"], ["model-card", "ckpt"]):
        assert parser.parse_args(command).resamples == RESAMPLES, command
    for function in (model_card.card, model_card.write_card, tradeoff.tradeoff, tradeoff.place, leaderboard.table,
                     report.compare, bootstrap_contrast):
        assert inspect.signature(function).parameters["resamples"].default == RESAMPLES, function
    assert GridEval(data_root="d").resamples == RESAMPLES
