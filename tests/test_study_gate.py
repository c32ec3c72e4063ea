"""The gate (docs/studies/gate.md): its positive control's negatives come from training scenes only, read false of
their anchor's picture and pass the stricter refusal; its seed-level interval; a tiny gate whose published files
alone rebuild its result through `study report`."""

import io
import json
import math
import shutil
from pathlib import Path

import pytest
from PIL import Image

from concrete_jungle.cli import main
from concrete_jungle.concretebatch import encode_jpeg, iter_records
from concrete_jungle.experiments import gate
from concrete_jungle.experiments.published import load
from concrete_jungle.records import read_jsonl
from concrete_jungle.toyworld.build import SUBSETS, WorldConfig, build_world, named_part
from concrete_jungle.toyworld.rewrite import ToyEditor
from concrete_jungle.toyworld.viewer import reads_true
from concrete_jungle.toyworld.world import parse_caption, pixel_hash, scene_clause

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "studies" / "gate" / "design.json"


def tiny_design(tmp_path: Path, train: int, test: int, rungs: int = 1) -> Path:
    """The pre-registered design at toy size: the same keys and rules, a small world and few steps."""
    design = json.loads(DESIGN.read_text())
    design["world"] |= {"train": train, "test": test}
    design["pretrain"]["batch_size"] = 16
    design["finetune"] |= {"batch_size": 8, "steps": 4}
    design["ladder"] = [dict(r, pretrain_steps=4) for r in design["ladder"][:rungs]]
    design["seeds"], design["bootstrap"] = [0, 1], 50
    path = tmp_path / "design.json"
    path.write_text(json.dumps(design, indent=2, sort_keys=True) + "\n")
    return path


def test_positive_control_negatives_come_from_training_scenes_read_false_and_pass_the_stricter_refusal(tmp_path):
    design = gate.read_design(tiny_design(tmp_path, train=100, test=100))
    world = tmp_path / "world"
    build_world(world, WorldConfig(**design["world"]), progress=False)
    rows = {r["id"]: r for r in read_jsonl(world / "scenes.jsonl")}
    held_out = {named_part(r["key"]) for r in rows.values() if r["split"] != "train"}
    data = gate.build_positive_control(world, tmp_path, design)
    editor = ToyEditor(world)
    records = list(iter_records(data))
    summary = json.loads((data / "summary.json").read_text())
    assert len(records) == summary["ok"] == sum(summary["per_edit"].values())
    assert {r["meta"]["edit"] for r in records} == set(SUBSETS)  # every edit kind of the test
    for r in records:
        row = rows[r["meta"]["scene"]]
        assert row["split"] == "train"  # no held-out scene is ever an anchor
        anchor = parse_caption(row["captions"][0], row["layout"])
        assert pixel_hash(r["image"]) == row["pixel_hash"]  # the world's own training picture
        assert not reads_true(r["neg_caption"], anchor)  # false of the anchor's picture, as the test's negatives
        if r["meta"]["edit"] != "add_att":  # a full description: the scene it names is the negative's scene
            named = parse_caption(r["neg_caption"] + scene_clause(anchor))
            assert named_part(named.key()) not in held_out  # the stricter refusal
            # the negative picture is what the toy editor draws for that caption on the anchor's layout
            drawn = editor.edit([r["image"]], [r["neg_caption"] + scene_clause(anchor)], [0])[0]
            stored = Image.open(io.BytesIO(encode_jpeg(drawn, quality=95))).convert("RGB")
            assert stored.tobytes() == r["neg_image"].tobytes()
    # the refusal bites: the generator made pairs whose scene is a held-out scene's things and relations, and none
    # of them is in the data (counted by the reason, per edit kind)
    refused = summary["dropped"]["a held-out scene's named part"]
    pairs = list(gate.positive_control_pairs(list(rows.values()), design["positive_control"]["seed"],
                                             mirror_relations=True))
    named_held_out = [p for p, _ in pairs if named_part(p["changed"].key()) in held_out
                      and not reads_true(p["negative"], parse_caption(rows[p["scene"]]["captions"][0],
                                                                 rows[p["scene"]]["layout"]))]
    assert sum(refused.values()) == len(named_held_out) > 0
    assert {p["id"] for p in named_held_out}.isdisjoint(r["meta"]["id"] for r in records)


def test_each_positive_control_negative_records_whether_the_viewer_reads_its_anchor_caption_true_of_it(tmp_path):
    design = gate.read_design(tiny_design(tmp_path, train=60, test=30))
    world = tmp_path / "world"
    build_world(world, WorldConfig(**design["world"]), progress=False)
    data = gate.build_positive_control(world, tmp_path, design)
    pairs = {p["id"]: p for p, reason in gate.positive_control_pairs(read_jsonl(world / "scenes.jsonl"),
                                                                   design["positive_control"]["seed"],
                                                                   mirror_relations=True) if reason is None}
    entailed: dict[str, set] = {}
    for r in iter_records(data):
        (negative,) = r["negatives"]
        changed = pairs[r["meta"]["id"]]["changed"]  # the scene the negative picture was drawn from
        assert negative["anchor_true_of_negative"] == reads_true(r["caption"], changed)
        assert negative["entailment"] == {"by": "toyworld.viewer"}
        entailed.setdefault(r["meta"]["edit"], set()).add(negative["anchor_true_of_negative"])
    # adding a colour or a thing leaves the anchor's caption true; a swap or a replacement makes it false
    assert entailed["add_att"] == entailed["add_obj"] == {True}
    assert all(entailed[kind] == {False} for kind in ("swap_att", "swap_obj", "replace_att", "replace_obj"))
    summary = json.loads((data / "summary.json").read_text())
    assert summary["anchor_true_of_negative"] == {kind: summary["per_edit"][kind] if kind.startswith("add_") else 0
                                                  for kind in SUBSETS}


def test_a_positive_control_of_chosen_edits_that_drops_entailed_pairs_keeps_only_true_negatives(tmp_path):
    design = gate.read_design(tiny_design(tmp_path, train=60, test=30))
    world = tmp_path / "world"
    build_world(world, WorldConfig(**design["world"]), progress=False)
    design["positive_control"] |= {"edit_kinds": ["add_att", "swap_obj"], "drop_entailed": True}
    data = gate.build_positive_control(world, tmp_path, design, name="D_chosen")
    records = list(iter_records(data))
    summary = json.loads((data / "summary.json").read_text())
    assert data.name == "D_chosen" and set(summary["per_edit"]) == {"add_att", "swap_obj"}
    # every add_att negative picture still shows what the anchor's caption says: all dropped, by that reason
    assert summary["per_edit"]["add_att"] == 0 and summary["dropped"][gate.ENTAILED]["add_att"] > 0
    assert len(records) == summary["per_edit"]["swap_obj"] > 0
    assert all(r["meta"]["edit"] == "swap_obj" and r["negatives"][0]["anchor_true_of_negative"] is False
               for r in records)


def test_the_seed_level_interval_uses_student_s_t_quantile():
    # closed forms: one degree of freedom tan(pi (p - 1/2)); two, (2p - 1) sqrt(2 / (4p (1 - p)))
    assert gate.t_quantile(0.975, 1) == pytest.approx(math.tan(math.pi * 0.475), rel=1e-6)
    assert gate.t_quantile(0.975, 2) == pytest.approx(0.95 * math.sqrt(2 / (4 * 0.975 * 0.025)), rel=1e-6)
    mean, sd, low, high = gate.seed_interval([4.0, 5.0, 6.0], 0.95)
    assert (mean, sd) == (5.0, 1.0) and low == pytest.approx(5 - 4.3027 / math.sqrt(3), abs=1e-3)
    assert high - mean == pytest.approx(mean - low)


def test_a_design_that_is_not_the_gate_s_is_refused_with_its_fix(tmp_path):
    path = tiny_design(tmp_path, train=40, test=20)
    design = json.loads(path.read_text())
    design["finetune"]["warmup"] = 10
    path.write_text(json.dumps(design))
    with pytest.raises(gate.GateDesignError, match="finetune warmup 10 is not the 5 steps"):
        gate.read_design(path)
    with pytest.raises(gate.GateDesignError, match="--design FILE"):
        gate.read_design(tmp_path / "none.json")


@pytest.mark.slow  # a world, a baseline and four fine-tunes: minutes on 2 shared cores
def test_a_tiny_gate_publishes_files_from_which_study_report_rebuilds_its_result(tmp_path, capsys):
    design = tiny_design(tmp_path, train=120, test=40)
    out = tmp_path / "gate"
    assert main(["study", "run", "gate", "--design", str(design), "--out", str(out), "--no-progress",
                 "--not-preregistered"]) == 0  # a design in a temporary folder: not committed
    result = json.loads((out / "results.json").read_text())
    published = tmp_path / "published"
    shutil.copytree(out / "published", published)
    shutil.rmtree(out)
    assert (published / "design.json").read_text() == design.read_text()  # the design, published unchanged
    assert main(["study", "report", str(published), "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    assert again["rungs"] == result["rungs"] and again["table"] == result["table"]
    assert again["gated"] == result["gated"]
    rung = result["rungs"][0]
    assert rung["passes"] == (rung["mean"] >= 3.0 and rung["t95"][0] > 0)
    report = (tmp_path / "again" / "study.md").read_text()
    assert f"{rung['mean']:+.2f}" in report and "The positive control's data" in report
    assert "**Not pre-registered**: start 1 ran with --not-preregistered" in " ".join(report.split())
    assert json.loads((published / "run.json").read_text())["preregistration"] == "not pre-registered"
    _, world, items, _ = load(published)
    assert world["positive_control"]["anchors_from"] == "train"
    assert {row for row, _ in items} == {f"R1: {x}" for x in (gate.BASELINE, gate.POSITIVE, gate.CONTROL)}
    capsys.readouterr()


def test_gate2_s_threshold_and_budget_in_its_page_follow_from_its_design_and_the_pilot():
    """docs/studies/gate2.md's justification of its margin: each number computed from gate2/design.json and the
    pilot's +5.15, sd 0.74 over two seeds."""

    design = json.loads((DESIGN.parents[1] / "gate2" / "design.json").read_text())
    text = " ".join((DESIGN.parents[1] / "gate2.md").read_text().split())
    assert design["study"] == "gate2" and design["world"]["seed"] not in (1, 2, 3)  # no earlier study's world
    seeds, margin = len(design["seeds"]), design["margin"]
    assert seeds == 5 and margin["confidence"] == pytest.approx(1 - 0.05 / len(margin["family"]))  # Bonferroni over two
    t = gate.t_quantile(0.5 + margin["confidence"] / 2, seeds - 1)
    power = gate.t_quantile(0.80, seeds - 1)
    pilot, sd = 5.15, 0.74
    se = sd / math.sqrt(seeds)
    assert f"t(0.9875, 4) × sd / √5, t = {t:.3f}" in text and f"({t:.3f} + {power:.3f}) × {se:.2f}" in text
    resolvable = (t + power) * se
    assert f"= **{resolvable:.2f} points**" in text
    assert margin["mean_at_least"] == 2.5 <= pilot / 2 and margin["mean_at_least"] > resolvable
    largest = pilot * math.sqrt(seeds) / t  # the sd at which the pilot's mean still clears the t bound
    assert f"sd < {largest:.2f}" in text and f"up to {largest / sd:.1f} times the pilot's" in text
    steps, warm = design["finetune"]["steps"], design["model"]["pretrain_steps"]
    finetunes = seeds * steps * (0.46 + 0.23) * len(design["controls"])
    assert f"{warm:,} × 0.23 = {warm * 0.23:.0f} s" in text and f"= {finetunes:,.0f} s" in text
    total = warm * 0.23 + finetunes + 700
    assert f"about **{round(total, -2):,.0f} CPU seconds, {total / 60:.0f} minutes**" in text
    assert total / 60 <= design["budget"]["minutes"]
