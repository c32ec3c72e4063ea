"""Gate 2 (docs/studies/gate2.md): its design as the runner reads it; control A's data holds only swap pairs whose
anchor caption is false of the negative picture, control B's keeps every kind and records which negatives are
entailed; the matched-outcome rule (a subset the blind picture solves leaves it) and the pass by the margin; a tiny
gate 2 whose published files alone rebuild its result through `study report`."""

import json
import shutil
from pathlib import Path

import pytest

from concrete_jungle.cli import main
from concrete_jungle.concretebatch import iter_records
from concrete_jungle.experiments import gate, gate2
from concrete_jungle.experiments.report import RETRIEVAL_COLUMNS
from concrete_jungle.experiments.stages import BLIND
from concrete_jungle.outcomes import series
from concrete_jungle.toyworld.build import SUBSETS, WorldConfig, build_world

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "studies" / "gate2" / "design.json"


def tiny_design(tmp_path: Path, train: int, test: int) -> Path:
    """The pre-registered design at toy size: the same keys and rules, a small world and few steps."""
    design = json.loads(DESIGN.read_text())
    design["world"] |= {"train": train, "test": test}
    design["pretrain"]["batch_size"] = 16
    design["finetune"] |= {"batch_size": 8, "steps": 4}
    design["model"]["pretrain_steps"] = 4
    design["seeds"], design["bootstrap"] = [0, 1], 50
    path = tmp_path / "design.json"
    path.write_text(json.dumps(design, indent=2, sort_keys=True) + "\n")
    return path


def test_gate2_s_committed_design_reads_and_one_that_misstates_its_model_is_refused(tmp_path):
    design = gate2.read_design(DESIGN)
    assert [(name, arm) for name, arm, _ in gate2.arms(design)] == [
        ("A", "positive"), ("A", "control"), ("B", "positive"), ("B", "control")]
    rows = {f"{name}: {arm}": row for name, arm, row in gate2.arms(design)}
    assert rows["B: positive"].mask_entailed and not rows["A: positive"].mask_entailed
    assert not rows["A: control"].negatives and not rows["B: control"].mask_entailed
    wrong = json.loads(DESIGN.read_text())
    wrong["model"]["width"] = 128
    (tmp_path / "wrong.json").write_text(json.dumps(wrong))
    with pytest.raises(gate2.Gate2DesignError, match="width.*write the design as it will run"):
        gate2.read_design(tmp_path / "wrong.json")
    with pytest.raises(gate2.Gate2DesignError, match="not a gate2 design"):
        gate2.read_design(DESIGN.parents[1] / "gate" / "design.json")


def test_control_a_holds_swap_pairs_false_of_their_negative_picture_and_b_records_the_entailed_ones(tmp_path):
    design = gate2.read_design(tiny_design(tmp_path, train=60, test=30))
    world = tmp_path / "world"
    build_world(world, WorldConfig(**design["world"]), progress=False)
    runner = gate2.Gate2(gate2.Gate2Config(out=str(tmp_path / "out"), design=str(tmp_path / "design.json")),
                         progress=False)
    data = runner.datasets(runner.stages(design["world"], tmp_path / "out", 1), world)
    a = [r["meta"] for r in iter_records(data["A"])]
    assert a and {m["edit"] for m in a} <= {"swap_att", "swap_obj"}
    assert not any(m["negatives"][0]["anchor_true_of_negative"] for m in a)
    b = json.loads((data["B"] / "summary.json").read_text())
    assert set(b["per_edit"]) == set(SUBSETS) and b["anchor_true_of_negative"]["add_att"] == b["per_edit"]["add_att"]
    assert b["anchor_true_of_negative"]["swap_att"] == 0
    # dropping entailed pairs, as control A's rule does: every add_att pair is one, each counted under its reason
    dropped = gate.build_pairs(world, tmp_path / "add_att", 0, True, ["add_att"], drop_entailed=True)
    summary = json.loads((dropped / "summary.json").read_text())
    assert summary["ok"] == 0 and summary["dropped"][gate.ENTAILED]["add_att"] == b["per_edit"]["add_att"]


def outcomes(accuracy: dict[str, float], blind: dict[str, float], items: int = 40) -> dict:
    """A model's answers: per subset ``items`` answers, the first ``accuracy * items`` right (two items a scene;
    half of them in a subset ``accuracy`` does not name), as many blind answers right as ``blind`` says, and a
    retrieval rank per query."""
    def answers(name: str, share: float) -> dict:
        return series([f"{name}{i}" for i in range(items)], [i // 2 for i in range(items)],
                      [int(i < round(share * items)) for i in range(items)])

    made = {s: answers(s, accuracy.get(s, 0.5)) for s in SUBSETS}
    made |= {f"{BLIND}{s}": answers(s, blind.get(s, 0.5)) for s in SUBSETS}
    made |= {name: answers(name, 0.1) for name in RETRIEVAL_COLUMNS}
    return {"series": made, "metrics": {name: {"mean": name} for name in made} | {"M.Avg": {"macro": list(SUBSETS)}}}


def control_a_result(positive: dict, control: dict, blind_positive: dict) -> dict:
    design = json.loads(DESIGN.read_text())
    design["controls"] = {"A": design["controls"]["A"]}
    design["bootstrap"] = 50
    chance = {"swap_att": 0.5, "swap_obj": 0.5}
    items = {(gate2.BASELINE, None): {"outcomes": outcomes(chance, chance)}}
    for k, seed in enumerate(design["seeds"]):
        wobble = {s: v + 0.025 * (k % 2) for s, v in positive.items()}  # a seed-level sd above 0
        items[("A: positive control", seed)] = {"outcomes": outcomes(wobble, blind_positive)}
        items[("A: control", seed)] = {"outcomes": outcomes(control, chance)}
    return gate2.summarise(design, items, 1.0)


def test_a_subset_the_blind_picture_solves_leaves_the_outcome_and_the_pass_follows_the_margin():
    # swap_obj's blind score is 75 in the positive arm, above chance + 10: only swap_att is matched
    result = control_a_result({"swap_att": 0.7, "swap_obj": 0.9}, {"swap_att": 0.6, "swap_obj": 0.6},
                              {"swap_att": 0.5, "swap_obj": 0.75})
    a = result["controls"][0]
    assert a["matched"] == ["swap_att"] and not a["subsets"]["swap_obj"]["matched"]
    assert a["mean"] == pytest.approx(10 + 2.5 * 2 / 5) and a["t_interval"][0] > 0 and a["passes"] and result["gated"]
    small = control_a_result({"swap_att": 0.6, "swap_obj": 0.6}, {"swap_att": 0.6, "swap_obj": 0.6},
                             {"swap_att": 0.5, "swap_obj": 0.5})["controls"][0]
    assert small["mean"] == pytest.approx(1.0) and not small["passes"]  # under the 2.5-point margin
    blind = control_a_result({"swap_att": 0.9, "swap_obj": 0.9}, {"swap_att": 0.6, "swap_obj": 0.6},
                             {"swap_att": 0.9, "swap_obj": 0.9})
    assert blind["controls"][0]["matched"] == [] and blind["controls"][0]["mean"] is None
    assert not blind["gated"] and "no matched subset" in gate2.study_report(blind, {
        "train": 1, "test": 1, "test_items": {}}, {"seconds": 1.0, "starts": []})


@pytest.mark.slow  # a world, a baseline, the timing runs and eight fine-tunes: a minute or two on 2 shared cores
def test_a_tiny_gate2_publishes_files_from_which_study_report_rebuilds_its_result(tmp_path, capsys):
    design = tiny_design(tmp_path, train=120, test=40)
    out = tmp_path / "gate2"
    assert main(["study", "run", "gate2", "--design", str(design), "--out", str(out), "--no-progress",
                 "--not-preregistered", "--threads", "1"]) == 0  # a design in a temporary folder: not committed
    result = json.loads((out / "results.json").read_text())
    report = (out / "study.md").read_text()
    published = tmp_path / "published"
    shutil.copytree(out / "published", published)
    shutil.rmtree(out)
    assert (published / "design.json").read_text() == design.read_text()  # the design, published unchanged
    assert main(["study", "report", str(published), "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    assert again["controls"] == result["controls"] and again["gated"] == result["gated"]
    assert (tmp_path / "again" / "study.md").read_text() == report
    for c in result["controls"]:
        assert c["passes"] == (c["mean"] is not None and c["mean"] >= 2.5 and c["t_interval"][0] > 0)
    world = json.loads((published / "world.json").read_text())
    assert world["projection"]["torch_threads"] == 1 and world["projection"]["seconds"] > 0
    assert world["controls"]["A"]["per_edit"].keys() == {"swap_att", "swap_obj"}
    assert "**Not pre-registered**" in " ".join(report.split())
    capsys.readouterr()
