"""The study: its paired bootstrap on answers whose truth is known, and a tiny run end to end."""

import json

import numpy as np
import pytest

from concrete_jungle.cli import main
from concrete_jungle.experiments.stages import BASELINE, CONTROL
from concrete_jungle.experiments.study import HYPOTHESES, ROWS, contrasts
from concrete_jungle.toyworld.build import WorldConfig

SUBSETS = ("add_att", "swap_obj")


def answers(rates: dict[str, float], seeds=(0, 1, 2), items=400, seed=0):
    """Per-item answers of every row with the given accuracy (the same items, two per scene, independent draws per
    seed), as `stats` outcomes."""
    from concrete_jungle.evaluation.benchmarks.sugarcrepe import recipes
    from concrete_jungle.outcomes import series

    rng = np.random.default_rng(seed)
    out = {}
    for label in [BASELINE] + [r.label for r in ROWS]:
        for s in seeds:
            answers = {sub: series(range(items), [f"scene{i // 2}" for i in range(items)],
                                   rng.random(items) < rates.get(label, 0.6)) for sub in SUBSETS}
            out[(label, s)] = {"outcomes": {"series": answers, "metrics": recipes(list(SUBSETS))}}
    return out


def test_the_bootstrap_finds_a_real_difference_and_not_a_missing_one():
    better = answers({"D_hc + Cement": 0.75, "D_hc + InfoNCE": 0.60})
    result = {h["name"]: h for h in contrasts(better, (0, 1, 2), resamples=400)}
    h2 = result["H2"]  # Cement 15 points above InfoNCE on D_hc
    assert h2["verdict"] == "supported" and 10 < h2["estimate"] < 20 and h2["ci95"][0] > 0
    assert result["H1"]["verdict"] == "not resolved"  # the control and InfoNCE: same rate
    assert 0 < result["H1"]["resolvable"] < 10  # 3 seeds x 800 items resolve a few points
    worse = {h["name"]: h for h in contrasts(answers({"D_hc + Cement": 0.45, "D_hc + InfoNCE": 0.60}), (0, 1, 2),
                                             resamples=400)}
    assert worse["H2"]["verdict"] == "contradicted" and worse["H2"]["ci95"][1] < 0
    assert result["H2"]["estimate"] == pytest.approx(-worse["H2"]["estimate"], abs=6)
    assert [h["name"] for h in contrasts(better, (0, 1, 2), resamples=10)] == [h[0] for h in HYPOTHESES]


@pytest.mark.slow  # the fast set runs Study 2's tiny study, which goes through the same stages and files
def test_a_tiny_study_runs_end_to_end_and_records_its_design(tmp_path, capsys, monkeypatch):
    import concrete_jungle.experiments.study as study

    tiny = dict(world=WorldConfig(train=160, test=40, val=30, seed=1), pretrain_steps=10, pretrain_batch_size=16,
                batch_sizes=(8, 16), share_pairs=64, max_steps=10, curve_every=5, seeds=(0, 1), bootstrap=50)
    monkeypatch.setitem(study.PROFILES, "cpu", tiny)  # the cpu profile at toy size: the command's own path
    out = tmp_path / "study"
    assert main(["demo", "--study", "--out", str(out), "--no-progress", "--not-preregistered"]) == 0
    printed = capsys.readouterr().out
    design = json.loads((out / "design.json").read_text())
    assert design["n"] in (8, 16) and design["steps"] in (5, 10)
    assert set(design["batch_size_choice"]["curves"]["infonce"]) == {"8", "16"}
    assert set(design["steps_choice"]["curve"]) == {"5", "10"}
    result = json.loads((out / "results.json").read_text())
    assert [h["name"] for h in result["hypotheses"]] == [h[0] for h in HYPOTHESES]
    assert all(h["verdict"] in ("supported", "contradicted", "not resolved") for h in result["hypotheses"])
    assert set(result["table"]) == {BASELINE, *(r.label for r in ROWS)} and CONTROL.label in result["table"]
    report = (out / "study.md").read_text()
    assert f"**N = {design['n']}**" in report and "| H1 (primary) |" in report and "H7:" in printed
    # every compared fine-tune ran with the chosen N and T
    runs = [json.loads(p.read_text()) for p in out.glob("finetune-*/stage.json")]
    compared = [r for r in runs if "save_every" not in r]
    assert len(compared) == len(ROWS) * 2
    assert {(r["batch_size"], r["steps"]) for r in compared} == {(design["n"], design["steps"])}
    # the published files alone give every number of the report: no model, no world
    import shutil

    published = tmp_path / "published"
    shutil.copytree(out / "published", published)
    shutil.rmtree(out)
    assert main(["study", "report", str(published), "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    assert again["table"] == result["table"] and again["hypotheses"] == result["hypotheses"]
    assert (tmp_path / "again" / "study.md").read_text() == report


def test_study1_trains_and_scores_with_text_at_the_full_context_as_when_it_ran(tmp_path):
    """Study 1 ran before captions were encoded at their length; its rerun must use the full context to give the
    same numbers (the two differ by float rounding, which compounds over training), in folders of its own."""
    from concrete_jungle.experiments.stages import StageConfig, Stages
    from concrete_jungle.experiments.study import Study, StudyConfig
    from concrete_jungle.experiments.study2 import Study2, Study2Config

    assert Study(StudyConfig(out=str(tmp_path))).stages.c.trim_text is False
    assert Study2(Study2Config(out=str(tmp_path))).stages.c.trim_text is True
    world = WorldConfig(train=40, test=10, seed=1)
    baselines = {}
    for trim in (True, False):
        stages = Stages(StageConfig(out=str(tmp_path), world=world, batch_size=8, pretrain_steps=2, trim_text=trim),
                        progress=False)
        checkpoint = stages.baseline(stages.world())
        run = checkpoint.parents[1]
        assert json.loads((run / "config.json").read_text())["model"]["trim_text"] is trim
        assert json.loads((run.parent / "stage.json").read_text()).get("trim_text", True) is trim
        baselines[trim] = run.parent
    assert baselines[True] != baselines[False]  # a run made with captions at their length keeps its folders


def test_each_start_records_the_commit_and_dirty_flag_of_the_code_or_why_they_are_not_known(tmp_path, monkeypatch):
    """A study's run.json records, for each start, the code it ran: where git is missing or the package is not in a
    checkout that versions it (an installed wheel), the commit and dirty flag are null with the reason."""
    import shutil
    import subprocess

    from concrete_jungle.experiments.stages import PACKAGE, StartRecord, code_version

    here = code_version()
    if shutil.which("git") and (PACKAGE.parents[1] / ".git").exists():
        head = subprocess.run(["git", "-C", str(PACKAGE), "rev-parse", "HEAD"], capture_output=True, text=True)
        assert here["commit"] == head.stdout.strip() and isinstance(here["dirty"], bool)
        assert here["dirty"] == (here["changes_sha256"] is not None) == bool(here["changed"])
    copy = tmp_path / "wheel" / "concrete_jungle"  # the package's files outside any checkout
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    outside = code_version(copy)
    assert outside["commit"] is None and outside["dirty"] is None and "not in a git checkout" in outside["reason"]
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    assert code_version() == {"version": here["version"], "commit": None, "dirty": None,
                              "reason": "git is not installed"}

    record = tmp_path / "starts.json"
    first = StartRecord(record)
    second = StartRecord(record)  # a resumed run
    assert len(second.lap()) == 2 and first.starts[0] == second.starts[0]
    assert json.loads(record.read_text())["starts"][1]["code"]["reason"] == "git is not installed"
    # a run begun before this record: its earlier starts left wall time, and are counted as not known
    assert StartRecord(tmp_path / "other.json", earlier_seconds=60.0).starts[0]["code"] is None


def test_the_batch_size_sentence_reads_infonce_s_curve_by_its_loss_name_or_its_0_2_0_schedule_name():
    from pathlib import Path

    from concrete_jungle.experiments.study import batch_size_sentence

    published = json.loads((Path(__file__).parents[1] / "docs/studies/study1/design.json").read_text())
    assert {"none", "adaptive"} <= set(published["batch_size_choice"]["curves"])  # written by 0.2.0
    renamed = {"none": "infonce", "adaptive": "cement"}
    now = json.loads(json.dumps(published))
    now["batch_size_choice"]["curves"] = {renamed.get(k, k): v for k, v in published["batch_size_choice"]["curves"]
                                          .items()}
    sentence = batch_size_sentence(now)
    assert sentence == batch_size_sentence(published)
    assert f"{published['batch_size_choice']['curves']['none']['256']:.3f} at N = 256" in sentence
