"""The experiments' report (experiments/report.py): the training-curves figure, its colours and legends."""

import json

import pytest


def test_training_curves_colour_each_row_alike_in_both_panels_with_a_legend_each(tmp_path):
    from concrete_jungle.experiments.report import training_curves_figure
    from concrete_jungle.experiments.stages import CONTROL

    runs = {}
    for k, (label, share) in enumerate([(CONTROL.label, None), ("D_hc + InfoNCE", 0.3), ("D_hc + Cement", 0.6),
                                        ("D_lc + Cement", 0.15)]):
        ckpt = tmp_path / f"r{k}" / "checkpoints" / "step-0000003"
        ckpt.mkdir(parents=True)
        (tmp_path / f"r{k}" / "metrics.jsonl").write_text("".join(
            json.dumps({"step": s, "loss": 3.0 - s / 10 - k, "hn_grad_share": share}) + "\n" for s in (1, 2, 3)))
        runs[(label, 0)] = ckpt
    fig = training_curves_figure(runs)
    loss, share = fig.axes
    colour_of = {line.get_label(): line.get_color() for line in loss.get_lines()}
    assert len(colour_of) == 4 and len(set(colour_of.values())) == 4
    plotted = {line.get_label(): (line.get_color(), line.get_ydata()[0]) for line in share.get_lines()}
    assert set(plotted) == {"D_hc + InfoNCE", "D_hc + Cement", "D_lc + Cement"}  # no share for the control
    for label, (colour, first) in plotted.items():
        assert colour == colour_of[label]  # the same colour as in the loss panel
    assert plotted["D_hc + Cement"][1] == 0.6 and plotted["D_lc + Cement"][1] == 0.15
    for ax in (loss, share):  # each panel's legend names its own lines, in their colours
        legend = ax.get_legend()
        assert legend is not None
        entries = {t.get_text(): h.get_color() for t, h in zip(legend.get_texts(), legend.legend_handles)}
        assert entries == {line.get_label(): line.get_color() for line in ax.get_lines()}


def write_runs(root, losses: dict[str, list[list[float]]], share: float | None = 0.3) -> dict:
    """A fine-tune's metrics.jsonl per row and seed, as the training loop logs it; ``losses``: per row, per seed,
    the loss at steps 1, 2, ...; the key of each run as the experiments hold them."""
    runs = {}
    for k, (label, seeds) in enumerate(losses.items()):
        for seed, values in enumerate(seeds):
            ckpt = root / f"r{k}-s{seed}" / "checkpoints" / f"step-{len(values):07d}"
            ckpt.mkdir(parents=True)
            row_share = None if label.startswith("control") else share
            (ckpt.parent.parent / "metrics.jsonl").write_text("".join(
                json.dumps({"step": s, "loss": v, "hn_grad_share": row_share}) + "\n"
                for s, v in enumerate(values, 1)))
            runs[(label, seed)] = ckpt
    return runs


def test_training_curves_say_what_they_plot_and_put_no_losses_of_different_definitions_on_one_scale(tmp_path):
    import matplotlib.pyplot as plt

    from concrete_jungle.experiments.report import training_curves_figure
    from concrete_jungle.experiments.stages import CONTROL

    # the control's loss is over N rows, the others' over 2N (and with margins): lower without being better
    runs = write_runs(tmp_path, {CONTROL.label: [[1.0, 0.9, 0.8], [1.2, 1.0, 0.8], [0.8, 0.8, 0.8]],
                                 "D_hc + InfoNCE": [[4.0, 3.0, 2.0], [4.2, 3.2, 2.2], [3.8, 2.8, 1.8]],
                                 "D_hc + Cement": [[6.0, 5.4, 4.8], [6.0, 5.4, 4.8], [6.0, 5.4, 4.8]]})
    fig = training_curves_figure(runs)
    loss, share = fig.axes
    for ax in (loss, share):
        assert ax.get_ylabel() and ax.get_xlabel() == "fine-tuning step"
        assert "mean over 3 seeds" in ax.get_title()
    assert share.get_ylabel() == "hard-negative gradient share"
    assert loss.get_ylabel() == "loss / loss at step 1"
    curves = {line.get_label(): list(line.get_ydata()) for line in loss.get_lines()}
    # each row relative to its own first step, from the mean over its seeds
    assert curves[CONTROL.label] == pytest.approx([1.0, 0.9, 0.8])
    assert curves["D_hc + InfoNCE"] == pytest.approx([1.0, 0.75, 0.5])
    assert curves["D_hc + Cement"] == pytest.approx([1.0, 0.9, 0.8])
    assert any("not comparable" in t.get_text() for t in fig.texts)  # the figure says why
    plt.close(fig)


def test_training_curves_say_when_a_row_has_one_seed(tmp_path):
    import matplotlib.pyplot as plt

    from concrete_jungle.experiments.report import training_curves_figure

    fig = training_curves_figure(write_runs(tmp_path, {"D_hc + Cement": [[2.0, 1.0]]}))
    assert all("one seed" in ax.get_title() and "mean" not in ax.get_title() for ax in fig.axes)
    plt.close(fig)


def test_the_demo_report_says_what_the_held_out_test_shares_with_training():
    from concrete_jungle.experiments.demo import DemoConfig, held_out_sentence
    from concrete_jungle.toyworld.build import WorldConfig

    demo = held_out_sentence(DemoConfig(), {"test": 600})
    assert "no training scene among them" not in demo
    assert demo.startswith("600 held-out test scenes, none of them a training scene (but ")
    assert "a hard negative planted from a training scene can describe a test scene" in demo
    assert "differ only in the light or the mood" in demo
    sealed = held_out_sentence(DemoConfig(world=WorldConfig(held_out="named"), no_leak=True), {"test": 600})
    assert sealed == "600 held-out test scenes, none of them a training scene"


def test_a_reused_stage_reports_the_time_it_took_when_it_was_made(tmp_path):
    from concrete_jungle.experiments.demo import timing_sentence
    from concrete_jungle.experiments.stages import STAGE_SECONDS, StageConfig, Stages
    from concrete_jungle.toyworld.build import WorldConfig

    config = StageConfig(out=str(tmp_path), world=WorldConfig(train=20, test=10))
    first = Stages(config, progress=False)
    world = first.timed("world", first.world)
    (made, reused), = first.stage_times["world"]
    assert not reused and json.loads((world / STAGE_SECONDS).read_text()) == {"seconds": made}
    # the record in the stage's folder is what a later run reports, not that run's own (near 0) seconds
    (world / STAGE_SECONDS).write_text(json.dumps({"seconds": 125.0}))
    again = Stages(config, progress=False)
    again.timed("world", again.world)
    again.seconds["report"], again.seconds["total"] = 2.5, 2.6
    assert again.stage_times["world"] == [(125.0, True)]
    sentence = timing_sentence(again.stage_times, again.seconds)
    assert "world 125 s (reused), report 2.5 s; 128 s in all. This invocation took 2.6 s." in sentence
    # a stage made before stages kept their time says so rather than counting 0
    (world / STAGE_SECONDS).unlink()
    old = Stages(config, progress=False)
    old.timed("world", old.world)
    assert "world time not kept (reused; it was made before stages kept their time)" in timing_sentence(
        old.stage_times, old.seconds)
    several = {"plant": [(10.0, True)] * 3, "finetune": [(20.0, False)] * 2, "evaluate": [(1.0, True), (2.0, False)]}
    assert timing_sentence(several, {"plant": 0.1, "finetune": 40.0, "evaluate": 2.0}).startswith(
        "Time each stage took when it was made (a reused stage: by the run that made it): plant 30 s (3 runs, all "
        "reused), finetune 40 s (2 runs), evaluate 3.0 s (2 runs, 1 reused); 73 s in all.")
    mixed = {"finetune": [(60.0, True), (None, True), (40.0, False)]}
    assert timing_sentence(mixed, {"finetune": 40.0, "total": 41.0}).startswith(
        "Time each stage took when it was made (a reused stage: by the run that made it): finetune 100 s for 2 of "
        "3 runs (2 reused; 1 of them was made before stages kept their time); 100 s in all.")
