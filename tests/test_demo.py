"""The main job end to end: `concrete-jungle demo --quick` (CI's one real end-to-end run, ~3 minutes)."""

import json
import math

import pytest

from concrete_jungle.cli import main
from concrete_jungle.concretebatch import iter_records
from concrete_jungle.experiments.demo import FINETUNES, POSITIVE, SWAP_DATA
from concrete_jungle.experiments.report import RETRIEVAL_COLUMNS, TEST_COLUMNS, signed
from concrete_jungle.experiments.stages import BASELINE, CONTROL


def test_demo_quick_writes_a_report_with_a_score_for_every_model(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    result = json.loads((out / "results.json").read_text())
    labels = [BASELINE] + [f.label for f in FINETUNES]
    assert sorted(result["table"]) == sorted(labels)
    report = (out / "report.md").read_text()
    for label in labels:
        row = result["table"][label]
        for column in TEST_COLUMNS + RETRIEVAL_COLUMNS:
            mean, _, n = row[column]
            assert n == 1 and math.isfinite(mean) and 0 <= mean <= 100, (label, column, row[column])
        line = next(x for x in report.splitlines() if x.startswith(f"| {label} |"))
        assert line.count("|") == len(TEST_COLUMNS + RETRIEVAL_COLUMNS) + 2 and f"{row['M.Avg'][0]:.1f}" in line
        assert label in printed
    # fine-tuning changed the weights: the fine-tuned models do not all score exactly like the baseline
    assert any(result["table"][label] != result["table"][BASELINE] for label in labels[1:])
    # the findings are printed as well as written, naming the control, and no difference reads "-0.0"
    assert CONTROL.label in labels and result["findings"]
    for finding in result["findings"]:
        assert finding.split(":")[0] in " ".join(printed.split()) and "-0.0 points" not in finding
    assert "-0.0 points" not in report
    # each finding says where its standard error comes from, and the report how it is computed
    assert all("(standard error " in f and ("from the test items)" in f or "from the seeds)" in f)
               for f in result["findings"])
    assert "How the standard error of a difference is computed" in report
    # the positive control: swap negatives against the same records masked, its outcome SWAP with the paired
    # interval and the verdict that interval gives, in the report and on the terminal, whichever way it fell
    control = result["positive_control"]
    (trained, masked), (low, high) = [row.label for row in POSITIVE], control["ci95"]
    assert control["outcome"] == "SWAP" and all(0 <= control["arms"][arm] <= 100 for arm in (trained, masked))
    assert math.isclose(control["difference"], control["arms"][trained] - control["arms"][masked], abs_tol=1e-9)
    assert low <= control["difference"] <= high
    assert control["verdict"] == ("registered" if low > 0 else "reversed" if high < 0 else "not resolved")
    row = next(x for x in report.splitlines() if x.startswith("| SWAP |"))
    assert f"[{signed(low)}, {signed(high)}] | **{control['verdict']}** |" in row
    assert report.index("## The instrument: a positive control") < report.index("## Compositional test")
    assert "The positive control " in printed and signed(control["difference"]) + " points" in " ".join(printed.split())
    # every record of the control is a swap of a training scene whose negative picture the anchor's caption is
    # false of: a true negative
    records = list(iter_records(out / next(out.glob(f"{SWAP_DATA}-*")).name / SWAP_DATA))
    assert len(records) == sum(control["records"].values()) > 0 and set(control["records"]) == {"swap_att", "swap_obj"}
    assert all(r["negatives"][0]["anchor_true_of_negative"] is False for r in records)
    # the run said its estimated time at the start, and the time left after each stage (piped: plain lines)
    assert printed.lstrip().startswith("estimated time: ") and "finetune done: " in printed
    # a finished fine-tune keeps its weights, not the optimizer state nothing resumes from
    finals = list(out.glob("*/run/checkpoints/step-*"))
    assert finals and all(not (d / "trainer_state.safetensors").exists() for d in finals)

    # the report's links and pictures exist: gallery of D_hc and D_lc, analysis, curves, gradient share
    assert "(gallery/index.html)" in report and (out / "gallery" / "index.html").is_file()
    gallery = (out / "gallery" / "index.html").read_text()
    assert "D_hc" in gallery and "D_lc" in gallery
    for picture in ["training_curves.png", *[line.split("](")[1].rstrip(")") for line in report.splitlines()
                                              if line.startswith("![gradient share]")]]:
        assert (out / picture).stat().st_size > 5000
    for mode in ("hc", "lc", "wo"):  # stable names for the datasets, as configs/tiny_cpu.yaml uses
        assert (out / f"D_{mode}" / "manifest.jsonl").is_file()
    analysis = next(out.glob("analysis-*"))
    assert (analysis / "report.md").is_file() and (analysis / "stats.json").is_file()
    share = result["analysis"]["gradient_share"]
    assert set(share) == {"infonce", "static", "cement", "inverse"}
    sizes = sorted(share["infonce"], key=int)
    assert share["infonce"][sizes[0]] > share["infonce"][sizes[-1]]  # more easy negatives dilute the share

    # a second run reuses every finished stage: no checkpoint is written again
    weights = {p: p.stat().st_mtime_ns for p in out.glob("*/run/checkpoints/*/open_clip_model.safetensors")}
    assert len(weights) == 1 + len(FINETUNES) + len(POSITIVE)
    capsys.readouterr()
    assert main(["demo", "--quick", "--out", str(out), "--no-progress"]) == 0
    assert weights == {p: p.stat().st_mtime_ns for p in out.glob("*/run/checkpoints/*/open_clip_model.safetensors")}
    again = " ".join(capsys.readouterr().out.split())
    for stage in ("the toy world", BASELINE, "D_hc", SWAP_DATA, f"{CONTROL.label}, seed 0", "the analysis"):
        assert f"reused: {stage}" in again, stage  # the terminal says what was not done again
    again_result = json.loads((out / "results.json").read_text())
    assert again_result["table"] == result["table"]
    assert again_result["positive_control"] == result["positive_control"]


def test_signed_differences_never_read_minus_zero():
    assert [signed(x) for x in (-0.04, 0.0, -0.06, 1.25)] == ["+0.0", "+0.0", "-0.1", "+1.2"]


def test_demo_refuses_malformed_seeds_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--quick", "--seeds", "0,one", "--out", str(tmp_path / "demo")])
    assert exit_.value.code == 2 and "comma-separated list of integers" in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()


def test_a_finding_s_difference_is_that_of_the_values_it_prints():
    from concrete_jungle.experiments.demo import findings
    from concrete_jungle.experiments.report import TEST_COLUMNS
    from concrete_jungle.experiments.stages import BASELINE, CONTROL

    labels = ["D_hc + InfoNCE", "D_hc + Cement", "D_hc + static margin", "D_lc + Cement", "D_wo + Cement",
              CONTROL.label, BASELINE]
    m_avg = {label: 61.37 for label in labels} | {"D_hc + InfoNCE": 62.14}  # unrounded difference 0.77
    table = {label: {s: (60.0, 0.0, 1) for s in TEST_COLUMNS[:-1]} | {"M.Avg": (m_avg[label], 0.0, 1)}
             for label in labels}
    first = findings(table, {s: 1000 for s in TEST_COLUMNS[:-1]})[0]
    assert "M.Avg 62.1 vs 61.4, +0.7 points" in first, first


def test_demo_threads_takes_a_positive_count(capsys):
    from concrete_jungle.cli import build_parser

    assert build_parser().parse_args(["demo", "--threads", "1"]).threads == 1
    with pytest.raises(SystemExit):
        main(["demo", "--threads", "0"])
    assert "--threads" in capsys.readouterr().err


def test_demo_out_that_is_a_file_is_a_one_line_error_naming_it(tmp_path, capsys):
    taken = tmp_path / "notes.txt"
    taken.write_text("mine")
    assert main(["demo", "--quick", "--out", str(taken), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(taken) in err[0] and "give a folder" in err[0], err
    assert taken.read_text() == "mine"


def test_time_left_piped_is_a_plain_line_after_each_stage(capsys):
    from concrete_jungle.experiments.demo import TimeLeft

    clock = TimeLeft(100.0)
    clock.advance("world", 40.0)
    clock.advance("evaluate", 10.0)  # seconds at the end: no line of its own
    clock.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("estimated time: 1 min 40 s on 2 idle cores")
    assert len(lines) == 2 and lines[1].strip().startswith("world done: ") and lines[1].endswith(" left")


def test_the_demo_s_estimate_counts_every_fine_tune_and_evaluation():
    from concrete_jungle.experiments.demo import QUICK, DemoConfig, calls

    for config in (DemoConfig(), DemoConfig(**QUICK)):
        runs = (len(FINETUNES) + len(POSITIVE)) * len(config.seeds)
        assert calls(config)["finetune"] == runs and calls(config)["evaluate"] == runs + 1
