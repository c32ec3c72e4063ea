"""The experiments' report (experiments/report.py): the training-curves figure, its colours and legends."""

import json


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
