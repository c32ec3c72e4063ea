"""A study starts only when its design is committed (`experiments.preregistration`): the design file and its docs
section as they stand, the package's source clean; a start whose design differs from the first start's is refused;
a start made anyway (--not-preregistered) is recorded so in run.json and every report. Each on a real git
repository."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from concrete_jungle.cli import main
from concrete_jungle.experiments import gate
from concrete_jungle.experiments.preregistration import PreregistrationError, check, waive
from concrete_jungle.experiments.published import run_json, write_digests

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGE = "# A study\n\n## Pre-registration\n\nThe hypothesis, the design.\n\n## Result\n\nNot run yet.\n"


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=study", "-c", "user.email=study@example.org", *args],
                   check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path) -> Path:
    """A checkout holding a package, a gate design and its docs page, all committed."""
    repo = tmp_path / "repo"
    (repo / "src" / "pkg").mkdir(parents=True)
    (repo / "src" / "pkg" / "__init__.py").write_text("VERSION = 1\n")
    (repo / "docs").mkdir()
    (repo / "docs" / "gate.md").write_text(PAGE)
    shutil.copy(DOCS / "studies" / "gate" / "design.json", repo / "docs" / "design.json")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the design")
    return repo


def checked(repo: Path, how=check) -> dict:
    return how([repo / "docs" / "design.json"], repo / "docs" / "gate.md", "## Pre-registration",
               package=repo / "src" / "pkg")


def test_a_committed_design_on_a_clean_tree_is_pre_registered_and_only_its_section_counts(repo):
    record = checked(repo)
    assert record["preregistered"] and len(record["design_sha256"]) == 64
    (repo / "docs" / "gate.md").write_text(PAGE.replace("Not run yet.", "It ran."))  # the result, written later
    assert checked(repo) == record


def test_a_dirty_source_tree_is_refused_naming_the_changed_file(repo):
    (repo / "src" / "pkg" / "__init__.py").write_text("VERSION = 2\n")
    with pytest.raises(PreregistrationError, match=r"1 uncommitted change\(s\) \(src/pkg/__init__.py\)"):
        checked(repo)
    (repo / "src" / "pkg" / "__init__.py").write_text("VERSION = 1\n")
    (repo / "src" / "pkg" / "new.py").write_text("")  # an untracked file is a change too
    with pytest.raises(PreregistrationError, match="src/pkg/new.py"):
        checked(repo)


def test_an_uncommitted_design_file_or_design_section_is_refused(repo):
    design = json.loads((repo / "docs" / "design.json").read_text())
    (repo / "docs" / "design.json").write_text(json.dumps(design | {"seeds": [0, 1, 2, 3, 4]}))
    with pytest.raises(PreregistrationError, match="design.json differs from its last commit"):
        checked(repo)
    git(repo, "checkout", "--", "docs/design.json")
    (repo / "docs" / "gate.md").write_text(PAGE.replace("The hypothesis", "Another hypothesis"))
    with pytest.raises(PreregistrationError, match="the section '## Pre-registration' of .* is not committed"):
        checked(repo)
    (repo / "docs" / "other.json").write_text("{}")
    with pytest.raises(PreregistrationError, match="other.json is not committed"):
        check([repo / "docs" / "other.json"], repo / "docs" / "gate.md", "## Pre-registration",
              package=repo / "src" / "pkg")


def test_a_start_whose_design_differs_from_the_first_start_s_is_refused(repo, tmp_path):
    out = tmp_path / "run"
    config = gate.GateConfig(out=str(out), design=str(repo / "docs" / "design.json"))
    gate.Gate(config, progress=False, preregistration=checked(repo)).start_clock()
    gate.Gate(config, progress=False, preregistration=checked(repo)).start_clock()  # the same design resumes
    design = json.loads((repo / "docs" / "design.json").read_text())
    (repo / "docs" / "design.json").write_text(json.dumps(design | {"bootstrap": 500}, indent=2, sort_keys=True))
    git(repo, "commit", "-qam", "the design, edited between starts")  # committed, so the check alone passes
    with pytest.raises(PreregistrationError, match="the design differs from the one this run's first start ran with"):
        gate.Gate(config, progress=False, preregistration=checked(repo)).start_clock()
    starts = json.loads((out / "starts.json").read_text())["starts"]
    assert len(starts) == 2 and all(s["preregistration"]["preregistered"] for s in starts)
    assert all(s["code"]["commit"] for s in starts)  # every start records the commit it ran


def test_a_start_made_without_pre_registration_is_recorded_so_in_run_json_and_the_report(repo, tmp_path, capsys):
    (repo / "src" / "pkg" / "__init__.py").write_text("VERSION = 2\n")
    out = tmp_path / "run"
    config = gate.GateConfig(out=str(out), design=str(repo / "docs" / "design.json"))
    study = gate.Gate(config, progress=False, preregistration=checked(repo, waive))
    study.start_clock()
    # the published gate's files, with this run's starts as `publish` writes them
    folder = tmp_path / "published"
    shutil.copytree(DOCS / "studies" / "gate", folder)
    run = run_json(60.0, study.starts.starts)
    assert run["preregistration"] == "not pre-registered"
    (folder / "run.json").write_text(json.dumps(run))
    write_digests(folder)
    assert main(["study", "report", str(folder)]) == 0
    out_text = " ".join(capsys.readouterr().out.split())
    assert ("**Not pre-registered**: start 1 ran with --not-preregistered (the package's source tree "
            f"{repo / 'src' / 'pkg'} has 1 uncommitted change(s) (src/pkg/__init__.py))") in out_text


def test_study_run_refuses_a_design_outside_git_in_one_line(tmp_path, capsys):
    design = tmp_path / "design.json"
    shutil.copy(DOCS / "studies" / "gate" / "design.json", design)
    assert main(["study", "run", "gate", "--design", str(design), "--out", str(tmp_path / "run")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"this study is not pre-registered as it stands: {design} is not in a git checkout" in err
    assert "--not-preregistered" in err and not (tmp_path / "run").exists()  # nothing of the run exists


@pytest.mark.parametrize("name", ["study", "study2", "gate", "gate2", "study3"])
def test_each_study_s_design_section_is_on_its_page(name):
    import importlib

    from concrete_jungle.experiments.preregistration import section

    page, heading = importlib.import_module(f"concrete_jungle.experiments.{name}").DESIGN_SECTION
    found = section((DOCS.parent / page).read_text(), heading)
    assert found is not None and found.startswith(heading) and "\n## " not in found[len(heading):]


def test_study3_s_page_states_the_budget_and_the_planning_figure_its_design_gives():
    """docs/studies/study3.md's budget and resolvable difference, each computed from study3/design.json and gate 2's
    step times (0.23 s a pretraining or masked step, 0.46 s a step with negatives) and pilot sd (0.74)."""
    import json
    import math
    import statistics
    from pathlib import Path

    studies = Path(__file__).resolve().parents[1] / "docs" / "studies"
    design = json.loads((studies / "study3" / "design.json").read_text())
    text = " ".join((studies / "study3.md").read_text().split())
    seeds, steps = len(design["seeds"]), design["finetune"]["steps"]
    with_negatives = 3 * len(design["finetune"]["losses"])  # D_hc, D_lc, D_wo x each loss; the control besides
    assert with_negatives == 9 and f"nine rows with negatives x {seeds} seeds x {steps} steps x 0.46 s = " \
        f"{with_negatives * seeds * steps * 0.46:,.0f} s" in text
    pretrain = design["model"]["pretrain_steps"] * 0.23
    control = seeds * steps * 0.23
    total = pretrain + with_negatives * seeds * steps * 0.46 + control + 1400
    assert f"about **{round(total, -2):,.0f} CPU seconds, {total / 3600:.1f} hours**" in text
    assert total / 60 <= design["budget"]["cpu"]["minutes"]
    se = 0.74 / math.sqrt(seeds)
    z = statistics.NormalDist().inv_cdf(1 - design["decision"]["alpha"] / len(design["primary"]) / 2)
    power = statistics.NormalDist().inv_cdf(0.8)
    assert f"({z:.2f} + {power:.2f}) x {se:.2f} = **{(z + power) * se:.1f} points**" in text
    assert design["world"]["seed"] not in (1, 2, 3, 4) and "**Status: run on 2026-12-06;" in text
