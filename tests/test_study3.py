"""Study 3 (docs/studies/study3.md): its design as the runner reads it; the refusals (gate 2 not passing, a
projection over the budget); the entailment factor's rule; N*'s rule; the matched outcome from the datasets' edit
kinds and the rows' blind scores; Holm and the verdicts; a tiny Study 3 whose published files alone rebuild its
result through `study report`."""

import json
import shutil
from pathlib import Path

import pytest

from concrete_jungle.cli import main
from concrete_jungle.experiments import study3, study3_result
from concrete_jungle.experiments.published import publish
from concrete_jungle.experiments.study import smallest_below
from concrete_jungle.experiments.study3_requirements import MissingRequirementError
from concrete_jungle.toyworld.attributes import ATTRIBUTE_SUBSETS
from concrete_jungle.toyworld.build import SUBSETS
from test_study_gate2 import control_a_answers, outcomes

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "studies" / "study3" / "design.json"
TEN = SUBSETS + ATTRIBUTE_SUBSETS


def written(tmp_path: Path, design: dict, name: str = "design.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(design, indent=2, sort_keys=True) + "\n")
    return path


def test_study3_s_committed_design_reads_and_one_not_written_as_it_runs_is_refused(tmp_path):
    design = study3.read_design(DESIGN)
    info = {"profile": "cpu", "entailment_factor": {"sets": [], "runs": False}}
    labels = [label for label, _, _ in study3_result.rows(design, info)]
    assert labels == ["control"] + [f"D_{m} + {loss}" for m in ("hc", "lc", "wo")
                                    for loss in ("infonce", "cement", "negclip")]
    assert all(row.mask_entailed for _, row, _ in study3_result.rows(design, info)[1:])
    wrong = json.loads(DESIGN.read_text())
    wrong["finetune"]["losses"]["cement"]["tau"] = 0.2
    with pytest.raises(study3.Study3DesignError, match="cement.*write the design as it will run"):
        study3.read_design(written(tmp_path, wrong))
    wrong = json.loads(DESIGN.read_text())
    wrong["world"]["test_subsets"].remove("replace_mood")
    with pytest.raises(study3.Study3DesignError, match="test_subsets"):
        study3.read_design(written(tmp_path, wrong))


def test_study3_refuses_to_start_while_a_requirement_of_its_design_is_missing():
    study3.check_requirements(study3.read_design(DESIGN))  # the committed design: nothing is missing
    design = json.loads(DESIGN.read_text())
    design["data"]["entailment"] = "viewer_anchor_true>=2"  # a rule the plant does not decide by
    with pytest.raises(MissingRequirementError, match="Study 3 cannot start; missing: .*entailment rule"):
        study3.check_requirements(design)


def published_gate2(folder: Path, positive: float, study: str = "gate2") -> Path:
    """A gate 2 published folder of control A alone, whose positive arm scores ``positive`` on both swap subsets
    (``study``: the study its design names)."""
    design, items = control_a_answers({"swap_att": positive, "swap_obj": positive},
                                      {"swap_att": 0.6, "swap_obj": 0.6}, {})
    design["study"] = study
    world = {"train": 1, "val": 0, "test": 20, "test_items": {s: 40 for s in SUBSETS}}
    publish(folder, design, world, items, 1.0, [], {key: [{"step": 1, "loss": 1.0}] for key in items})
    return folder


def test_study3_refuses_to_start_unless_gate2_s_published_files_say_it_passes(tmp_path):
    assert study3.check_gate2(published_gate2(tmp_path / "passes", 0.9)) == ["A"]
    with pytest.raises(study3.Study3DesignError, match="does not pass: Study 3 runs only if gate 2 passes"):
        study3.check_gate2(published_gate2(tmp_path / "fails", 0.6))
    with pytest.raises(study3.Study3DesignError, match="cannot be rebuilt"):
        study3.check_gate2(tmp_path)
    with pytest.raises(study3.Study3DesignError, match="cannot be rebuilt .* published folder of gate"):
        study3.check_gate2(published_gate2(tmp_path / "another", 0.9, study="gate"))


def world_info(entailed: dict[str, float], profile: str = "cpu", n_star: int | None = 256) -> dict:
    return {"profile": profile, "n_star": {"n": n_star},
            "datasets": {m: {"records": 100, "edit_kinds": {}, "entailed": {"share_true": share}}
                         for m, share in entailed.items()}}


PROJECTION = {"seconds": 500 + 2000 * (0.35 + 9 * 0.7) + 50, "timed_batch_size": 64, "evaluation_seconds": 1.0,
              "parts_seconds": {"finetunes and evaluations": 2000 * (0.35 + 9 * 0.7) + 50},
              "step_seconds": {"pretrain": 0.2, "control": 0.35, "infonce": 0.7, "cement": 0.7, "negclip": 0.7}}


def test_the_entailment_factor_runs_a_set_over_one_percent_unless_it_pushes_the_cpu_projection_over_budget():
    design = study3.read_design(DESIGN)
    roomy = dict(PROJECTION, step_seconds=dict(PROJECTION["step_seconds"], infonce=0.5, cement=0.5))
    info = study3.decide_factors(design, "cpu", world_info({"hc": 0.01, "lc": 0.02, "wo": 0.0}), roomy)
    assert info["entailment_factor"] == {"sets": ["lc"], "runs": True}  # 1 % is not over 1 %
    assert [label for label, row, _ in study3_result.rows(design, info) if not row.mask_entailed][1:] == [
        "D_lc + infonce, entailed negatives unmasked", "D_lc + cement, entailed negatives unmasked"]
    assert info["projected_seconds"] == pytest.approx(study3.projected(design, roomy, info))
    # the base run fits the 240 minutes (13,850 s); with D_lc's two unmasked rows it would not: they are dropped
    tight = study3.decide_factors(design, "cpu", world_info({"hc": 0.0, "lc": 0.02, "wo": 0.0}), PROJECTION)
    assert not tight["entailment_factor"]["runs"] and "over its budget of 240 min" in tight["entailment_factor"]["why"]
    assert tight["projected_seconds"] == pytest.approx(PROJECTION["seconds"])
    none = study3.decide_factors(design, "cpu", world_info({"hc": 0.0, "lc": 0.0, "wo": 0.0}), PROJECTION)
    assert none["entailment_factor"] == {"sets": [], "runs": False}
    # the gpu profile runs every row at N* too: projected as N* / 64 times the timed step, far over its hour
    with pytest.raises(study3.Study3DesignError, match="over the gpu profile's budget of 60 min"):
        study3.decide_factors(design, "gpu", world_info({"hc": 0.0, "lc": 0.02, "wo": 0.0}, "gpu"), PROJECTION)
    with pytest.raises(study3.Study3DesignError, match="over the cpu profile's budget of 240 min.*does not start"):
        study3.check_budget(240 * 60 + 1, 240 * 60, "cpu", "timing; it does not start")
    study3.check_budget(240 * 60, 240 * 60, "cpu", "timing")


def test_n_star_is_the_smallest_candidate_whose_share_is_below_the_threshold():
    assert smallest_below({128: 0.35, 256: 0.25, 512: 0.15, 1024: 0.1}, 0.2) == {"n": 512, "rule_met": True}
    assert smallest_below({128: 0.35, 256: 0.3}, 0.2) == {"n": 256, "rule_met": False}
    assert smallest_below({}, 0.2) == {"n": None, "rule_met": False}


def study_answers(design: dict, info: dict, accuracy: dict, blind: dict) -> dict:
    """The baseline and every row of ``info`` for every seed; ``accuracy[row]``/``blind[row]``: per subset (others
    at chance), with a wobble between seeds."""
    items = {(study3_result.BASELINE, None): {"outcomes": outcomes({}, {}, subsets=TEN)}}
    for label, _, _ in study3_result.rows(design, info):
        for k, seed in enumerate(design["seeds"]):
            wobble = {s: v + 0.025 * (k % 2) for s, v in accuracy.get(label, {}).items()}
            items[(label, seed)] = {"outcomes": outcomes(wobble, blind.get(label, {}), subsets=TEN)}
    return items


def synthetic_study(accuracy: dict, blind: dict) -> tuple[dict, dict, dict]:
    design = json.loads(DESIGN.read_text()) | {"bootstrap": 50, "seeds": [0, 1, 2]}
    info = world_info({"hc": 0.0, "lc": 0.0, "wo": 0.0}) | {"entailment_factor": {"sets": [], "runs": False}}
    kinds = {"hc": {"colour": 50, "shape": 40, "mood": 5, "relation": 5}, "lc": {"light": 60, "mood": 40},
             "wo": {"relation": 100}}
    for mode, counts in kinds.items():
        info["datasets"][mode]["edit_kinds"] = counts
    return design, info, study3_result.summarise(design, study_answers(design, info, accuracy, blind), 1.0, info)


def test_a_dataset_s_matched_outcome_is_its_edit_kinds_of_ten_percent_less_the_subsets_a_blind_picture_solves():
    hc_infonce = {"replace_att": 0.8, "replace_obj": 0.9, "replace_mood": 0.9}
    _, _, result = synthetic_study({"D_hc + infonce": hc_infonce, "D_hc + cement": {"replace_light": 0.9}},
                                   {"D_hc + infonce": {"replace_obj": 0.7}})
    assert result["dataset_subsets"] == {"hc": ["replace_att", "replace_obj"],  # mood: 5 % of D_hc's records
                                         "lc": ["replace_light", "replace_mood"], "wo": ["replace_rel"]}
    h1, h2, h3, h4 = result["primary"]
    # replace_obj's blind score is 70 in D_hc + infonce, above chance + 10: it leaves H1's and H2's outcome
    assert h1["subsets"] == ["replace_att", "replace_obj"] and h1["matched"] == ["replace_att"]
    assert h1["blind"]["D_hc + infonce"]["replace_obj"] == pytest.approx(70.0)
    assert h1["estimate"] == pytest.approx(30 + 2.5 / 3) and h1["per_seed"][1] == pytest.approx(32.5)
    assert h1["per_subset"]["replace_obj"] == pytest.approx(40 + 2.5 / 3)
    assert h2["matched"] == ["replace_att"] and h3["matched"] == ["replace_att", "replace_obj"]
    # H4, D_hc + cement against D_lc + cement: the union of both datasets' subsets
    assert h4["matched"] == ["replace_att", "replace_obj", "replace_light", "replace_mood"]
    assert h4["estimate"] == pytest.approx((40 + 2.5 / 3) / 4)
    assert {h["name"] for h in result["secondary"]} >= {"S-D_wo vs D_hc", "S-D_lc + cement vs D_lc + infonce"}
    # rows that answered alike at every seed are named: here every row given no accuracy of its own
    assert ["D_lc + infonce", "D_lc + negclip"] in result["same_answers"]
    assert not any("D_hc + infonce" in pair for pair in result["same_answers"])


def test_holm_over_the_primary_four_decides_the_verdicts():
    family = [{"name": "H1", "p": 0.01, "estimate": 2.0}, {"name": "H2", "p": 0.001, "estimate": -1.0},
              {"name": "H3", "p": 0.04, "estimate": 3.0}, {"name": "H4", "p": None, "estimate": None}]
    study3_result.verdicts(family, 0.05)
    assert [h["p_holm"] for h in family] == pytest.approx([0.03, 0.004, 0.08, 1.0])
    assert [h["verdict"] for h in family] == ["supported", "contradicted", "not resolved", "not resolved"]


def tiny_design(tmp_path: Path) -> Path:
    """The pre-registered design at toy size: the same keys and rules, a small world and few steps."""
    design = json.loads(DESIGN.read_text())
    design["world"] |= {"train": 150, "test": 40}
    design["pretrain"]["batch_size"] = 16
    design["finetune"]["steps"] = 4
    design["batch_size"] |= {"cpu": [8], "gpu": [8, "n_star"]}
    design["model"]["pretrain_steps"] = 4
    design["seeds"], design["bootstrap"] = [0, 1], 50
    return written(tmp_path, design)


@pytest.mark.slow  # a world, three plants, the timing runs and 20 or 40 fine-tunes: minutes on 2 shared cores
@pytest.mark.parametrize("profile", ["cpu", "gpu"])
def test_a_tiny_study3_publishes_files_from_which_study_report_rebuilds_its_result(profile, tmp_path, monkeypatch,
                                                                                   capsys):
    monkeypatch.chdir(ROOT)  # gate 2's published folder, docs/studies/gate2, is read from the repository root
    design = tiny_design(tmp_path)
    out = tmp_path / "study3"
    assert main(["study", "run", "study3", "--design", str(design), "--out", str(out), "--no-progress",
                 "--profile", profile, "--not-preregistered", "--threads", "1"]) == 0  # a design outside git
    result = json.loads((out / "results.json").read_text())
    report = (out / "study.md").read_text()
    published = tmp_path / "published"
    shutil.copytree(out / "published", published)
    shutil.rmtree(out)
    assert (published / "design.json").read_text() == design.read_text()  # the design, published unchanged
    assert sorted(p.name for p in published.iterdir()) == sorted(
        ["design.json", "world.json", "answers.jsonl.gz", "recipes.json", "curves.jsonl.gz", "run.json",
         "digests.json"])
    assert main(["study", "report", str(published), "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    assert again["primary"] == result["primary"] and again["secondary"] == result["secondary"]
    assert (tmp_path / "again" / "study.md").read_text() == report
    world = json.loads((published / "world.json").read_text())
    assert world["gate2"]["passed"] and world["projection"]["torch_threads"] == 1
    assert world["projection"]["seconds"] > 0 and world["profile"] == profile
    assert set(world["datasets"]) == {"hc", "lc", "wo"}
    assert all(d["entailed"]["unknown"] == 0 for d in world["datasets"].values())
    assert set(study3_result.test_items(world)) == set(TEN)
    assert [h["name"] for h in result["primary"]] == ["H1", "H2", "H3", "H4"]
    assert all(h["verdict"] in ("supported", "contradicted", "not resolved") for h in result["primary"])
    text = " ".join(report.split())
    assert "**Not pre-registered**" in text
    # NegCLIP's loss with its defaults on negatives with pictures is InfoNCE over every pair, by other code
    assert all(d["negatives_without_picture"] == 0 for d in world["datasets"].values())
    assert "differ from InfoNCE's only by float rounding" in text
    n_star = world["n_star"]["n"]  # the tiny D_hc's 150 pairs hold the smallest candidate
    assert n_star == 128
    if profile == "cpu":
        assert "runs N = 8 only" in text and not any("at N =" in h["name"] for h in result["secondary"])
    else:  # every row at N* too: its steps timed on the study's D_hc, the N factor among the secondary contrasts
        assert set(world["projection"]["step_seconds_at"][str(n_star)]) == {"control", "infonce", "cement", "negclip"}
        assert {f"H1 at N = {n_star}", "N-control"} <= {h["name"] for h in result["secondary"]}
    capsys.readouterr()
