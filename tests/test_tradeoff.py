"""The trade-off (analysis/tradeoff.py, `concrete-jungle tradeoff`): real evaluations of a start model, a fine-tune
and a WiSE-FT point placed by their compositional and recognition means, with 95 % intervals and the Pareto front,
as a figure and a table of the same numbers; results that cannot share a figure refused with the reason."""

import json
import re
import shutil

import pytest

from concrete_jungle.cli import main


@pytest.fixture(scope="module")
def evaluated(data_root, tmp_path_factory):
    """``eval --out`` folders of three models on SugarCrepe (compositional) and a Flickr30k-format retrieval split
    (recognition) made of the fixture's pictures and captions."""
    from benchmark_fixtures import SUGARCREPE, image_name
    from test_wise_ft import checkpoint

    root = tmp_path_factory.mktemp("tradeoff")
    data = root / "data"
    shutil.copytree(data_root, data)
    captions = {}
    for items in SUGARCREPE.values():
        for n, caption, _ in items:
            captions.setdefault(n, []).append(caption)
    shutil.copytree(data / "coco" / "val2017", data / "flickr30k" / "images")
    (data / "flickr30k" / "dataset_flickr30k.json").write_text(json.dumps({"images": [
        {"filename": image_name(n), "split": "test", "sentences": [{"raw": c} for c in dict.fromkeys(caps)]}
        for n, caps in sorted(captions.items())]}))
    start, tuned = checkpoint(root, "start"), checkpoint(root, "tuned", nudge=0.05)
    assert main(["wise-ft", str(start), str(tuned), "--alpha", "0.5", "--out", str(root / "wise")]) == 0
    out = {}
    for name, folder in [("start", start), ("tuned", tuned), ("wise", root / "wise" / "alpha-0.5")]:
        out[name] = root / "results" / name
        assert main(["eval", "--benchmarks", "sugarcrepe,retrieval", "--data-root", str(data), "--checkpoint",
                     str(folder), "--out", str(out[name]), "--no-progress"]) == 0
    assert main(["eval", "--benchmarks", "sugarcrepe", "--data-root", str(data), "--checkpoint", str(start),
                 "--out", str(root / "results" / "composition-only"), "--no-progress"]) == 0
    return out | {"composition-only": root / "results" / "composition-only"}


def test_the_tradeoff_places_each_model_by_its_summary_means_with_intervals_and_draws_the_front(evaluated, tmp_path,
                                                                                               capsys):
    from concrete_jungle.evaluation.report import summary

    out = tmp_path / "plot"
    assert main(["tradeoff", f"start={evaluated['start']}", f"fine-tune={evaluated['tuned']}",
                 f"WiSE-FT 0.5={evaluated['wise']}", "--out", str(out), "--resamples", "300"]) == 0
    table = json.loads((out / "tradeoff.json").read_text())
    assert [p["label"] for p in table["points"]] == ["start", "fine-tune", "WiSE-FT 0.5"]
    assert table["benchmarks"] == {"compositional": ["sugarcrepe"], "recognition": ["retrieval"]}
    for point, name in zip(table["points"], ("start", "tuned", "wise")):
        results = {b: json.loads((evaluated[name] / f"{b}.json").read_text()) for b in ("sugarcrepe", "retrieval")}
        means = summary(results)  # the numbers eval's summary line gives
        for kind in ("compositional", "recognition"):
            assert point[kind]["mean"] == pytest.approx(100 * means[kind]["mean"])
            low, high = point[kind]["ci95"]
            assert low <= point[kind]["mean"] <= high and high - low > 0
    xy = [(p["recognition"]["mean"], p["compositional"]["mean"]) for p in table["points"]]
    dominated = [any(o[0] >= x and o[1] >= y and o != (x, y) for o in xy) for x, y in xy]
    assert [p["front"] for p in table["points"]] == [not d for d in dominated]
    assert table["sweeps"] == [[0, 2, 1]]  # start -> alpha 0.5 -> fine-tune, found from the checkpoints' records
    md = (out / "tradeoff.md").read_text()
    for p in table["points"]:  # the table holds the figure's numbers
        c, r = p["compositional"], p["recognition"]
        assert re.search(rf"\| {re.escape(p['label'])} \| {c['mean']:.2f} \| \[{c['ci95'][0]:.2f}, "
                         rf"{c['ci95'][1]:.2f}\] \| {r['mean']:.2f} \|", md), md
    assert (out / "tradeoff.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "on the front:" in capsys.readouterr().out


def test_results_that_cannot_share_the_figure_are_refused_with_the_reason(evaluated, tmp_path, capsys):
    assert main(["tradeoff", str(evaluated["start"]), str(evaluated["composition-only"]), "--out",
                 str(tmp_path / "x")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "has no recognition benchmark: a point needs both means" in err
    assert main(["tradeoff", str(evaluated["start"]), "--out", str(tmp_path / "x")]) == 2
    assert "a trade-off needs two or more models" in " ".join(capsys.readouterr().err.split())
    other = tmp_path / "other"
    shutil.copytree(evaluated["tuned"], other)
    result = json.loads((other / "retrieval.json").read_text())
    result["benchmark_files_sha256"] = "0" * 64
    (other / "retrieval.json").write_text(json.dumps(result))
    assert main(["tradeoff", str(evaluated["start"]), str(other), "--out", str(tmp_path / "x")]) == 2
    assert "were evaluated on different retrieval files" in " ".join(capsys.readouterr().err.split())


def test_the_pareto_front_keeps_exactly_the_points_no_other_point_beats_on_both_means():
    from concrete_jungle.analysis.tradeoff import pareto

    def point(recognition, compositional):
        return {"recognition": {"mean": recognition}, "compositional": {"mean": compositional}}

    points = [point(60, 70), point(55, 80), point(50, 75), point(60, 70), point(40, 85), point(65, 60)]
    assert pareto(points) == [True, True, False, True, True, True]


def test_files_in_out_that_the_tradeoff_did_not_write_are_kept_unless_overwrite(evaluated, tmp_path, capsys):
    """`tradeoff` replaced a tradeoff.md / .png it did not write (a hand-written note, another command's figure)."""
    out = tmp_path / "notes"
    out.mkdir()
    (out / "tradeoff.md").write_text("my notes\n")
    args = ["tradeoff", str(evaluated["start"]), str(evaluated["tuned"]), "--resamples", "50", "--out", str(out)]
    assert main(args) == 2
    assert f"{out / 'tradeoff.md'} was not written by `concrete-jungle tradeoff`, which would replace it: pass " \
           "--overwrite to replace it, or choose another --out" in " ".join(capsys.readouterr().err.split())
    assert (out / "tradeoff.md").read_text() == "my notes\n" and not (out / "tradeoff.png").exists()
    assert main([*args, "--overwrite"]) == 0
    assert main(args) == 0  # its own files: replaced
    (out / "tradeoff.png").write_bytes(b"edited")
    assert main(args) == 2
    assert "tradeoff.png was edited after `concrete-jungle tradeoff`" in " ".join(capsys.readouterr().err.split())
    assert main([*args[:-1], str(out / "tradeoff.md")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_two_points_under_one_label_are_refused(evaluated, tmp_path, capsys):
    assert main(["tradeoff", f"a={evaluated['start']}", f"a={evaluated['tuned']}", "--out", str(tmp_path / "x")]) == 2
    assert "give each point a label of its own" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "x").exists()


def test_a_result_whose_headline_disagrees_with_its_outcomes_is_refused_naming_it(evaluated, tmp_path, capsys):
    """A result whose headline number is not what its per-item outcomes give crashed in matplotlib (negative error
    bars: the interval was another number's)."""
    other = tmp_path / "edited"
    shutil.copytree(evaluated["tuned"], other)
    result = json.loads((other / "sugarcrepe.json").read_text())
    result["metrics"] = {k: (0.01 if v is not None else v) for k, v in result["metrics"].items()}
    (other / "sugarcrepe.json").write_text(json.dumps(result))
    assert main(["tradeoff", str(evaluated["start"]), str(other), "--resamples", "50", "--out",
                 str(tmp_path / "x")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{other}: its sugarcrepe result disagrees with its own per-item outcomes (M.Avg 0.01 where they give" \
        in err
    assert "evaluate the model again" in err


def test_a_point_s_label_keeps_off_the_lines_drawn_through_it():
    """The WiSE-FT line ran through the label of the fine-tune it ends at."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import Bbox

    from concrete_jungle.analysis.tradeoff import label_points

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.set(xlim=(0, 10), ylim=(0, 10))
    line = [(5.0, 5.0), (9.0, 5.6)]  # from the point out to the right, through the first place a label may go
    ax.plot(*zip(*line))
    fig.canvas.draw()
    label_points(fig, ax, [("D_hc + Cement", 5.0, 5.0)], [line])
    box = ax.texts[0].get_window_extent(fig.canvas.get_renderer())
    (x0, y0), (x1, y1) = ax.transData.transform(line[0]), ax.transData.transform(line[1])
    crossings = [Bbox.from_extents(x - 1, y - 1, x + 1, y + 1) for x, y in
                 ((x0 + (x1 - x0) * k / 100, y0 + (y1 - y0) * k / 100) for k in range(101))]
    assert not any(box.overlaps(c) for c in crossings)
    plt.close(fig)
