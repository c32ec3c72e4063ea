"""The toy world's attribute test subsets (replace_size, replace_light, replace_mood): read by the viewer, behind a
setting that leaves every earlier world and its stage as they were, and scored beside the seven SugarCrepe-form
subsets without entering their averages."""

import hashlib
import json
import random
from dataclasses import asdict

import pytest

from concrete_jungle.evaluation.benchmarks import sugarcrepe
from concrete_jungle.experiments.stages import BLIND, StageConfig, Stages, settings_hash
from concrete_jungle.toyworld.attributes import ATTRIBUTE_SUBSETS, attribute_test
from concrete_jungle.toyworld.build import SUBSETS, WorldConfig, build_world, world_settings
from concrete_jungle.toyworld.viewer import described, reads_true
from concrete_jungle.toyworld.world import Scene, Thing, sample_scene

# a world like gate 2's and Study 3's (named held-out scenes, viewer-read negatives), tiny
SMALL = WorldConfig(train=40, test=20, seed=5, held_out="named", test_negatives="viewer")


def text_digest(folder) -> str:
    """sha256 over every JSON and JSONL file of a world (names and bytes): its scenes, captions, test and record."""
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*.json*")):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def test_a_world_config_without_attribute_subsets_keeps_the_settings_and_stage_hash_of_earlier_worlds():
    # the settings of a default world and of Study 3's world without the setting, as they were recorded and hashed
    # before the setting existed (world.json's config, `Stages.world`'s folder name)
    assert world_settings(WorldConfig()) == {"train": 2000, "test": 600, "val": 0, "seed": 0, "held_out": "content",
                                             "image_format": "png", "test_negatives": "construction"}
    assert settings_hash(world_settings(WorldConfig())) == "4375a346"
    study = WorldConfig(train=4000, test=1500, seed=5, held_out="named", image_format="jpeg", test_negatives="viewer")
    assert settings_hash(world_settings(study)) == "89027523"
    on = WorldConfig(attribute_subsets=True)
    assert world_settings(on) == asdict(on) and settings_hash(world_settings(on)) != "4375a346"


def test_a_world_without_attribute_subsets_is_byte_for_byte_the_world_made_before_the_setting(tmp_path):
    build_world(tmp_path, SMALL, progress=False)
    # the digest of this world's text files as the generator wrote them before the setting existed
    assert text_digest(tmp_path) == "2b5075e55d6472607a367341db5d9debc30a3a52a1b6322884def89b9a3db10f"
    assert not (tmp_path / "test" / "attributes").exists()


def test_attribute_subsets_add_three_viewer_read_subsets_and_leave_every_other_file_as_it_was(tmp_path):
    off, on = tmp_path / "off", tmp_path / "on"
    build_world(off, SMALL, progress=False)
    summary = build_world(on, WorldConfig(**asdict(SMALL) | {"attribute_subsets": True}), progress=False)
    made = {str(p.relative_to(on)) for p in on.rglob("*") if p.is_file()}
    before = {str(p.relative_to(off)) for p in off.rglob("*") if p.is_file()}
    assert made - before == {f"test/attributes/{s}.json" for s in ATTRIBUTE_SUBSETS}
    for name in before - {"world.json"}:  # the seven subsets, the scenes, the pictures: the same bytes
        assert (on / name).read_bytes() == (off / name).read_bytes(), name
    assert summary["config"]["attribute_subsets"] is True
    assert summary["attribute_items"] == {"test": {s: 20 for s in ATTRIBUTE_SUBSETS}}
    assert summary["attribute_dropped_items"] == {"test": {s: [] for s in ATTRIBUTE_SUBSETS}}
    off_summary = json.loads((off / "world.json").read_text())
    assert {k: v for k, v in summary.items() if not k.startswith("attribute")} == off_summary | {
        "config": off_summary["config"] | {"attribute_subsets": True}}
    data = sugarcrepe.load(on / "test" / "attributes", on / "images" / "test")
    assert set(data["items"]) == set(ATTRIBUTE_SUBSETS) and not any(data["skipped"].values())
    # the same world asked for again is reused; the setting is part of its record
    assert build_world(on, WorldConfig(**asdict(SMALL) | {"attribute_subsets": True}), progress=False) == summary


def test_each_attribute_negative_replaces_one_size_light_or_mood_word_and_reads_false_of_the_picture():
    rng = random.Random(4)
    scenes = [sample_scene(rng) for _ in range(1500)]
    files = [f"test-{i:06d}.png" for i in range(len(scenes))]
    by_file = dict(zip(files, scenes))
    items, dropped = attribute_test(scenes, files, seed=5)
    assert all(len(items[s]) == len(scenes) for s in ATTRIBUTE_SUBSETS) and not any(dropped.values())
    words = {"replace_size": {"big", "small"}, "replace_light": {"bright", "dim"}, "replace_mood": {"calm", "busy"}}
    for subset, subset_items in items.items():
        for it in subset_items:
            scene = by_file[it["filename"]]
            assert reads_true(it["caption"], scene, scene_words=True), (subset, it)
            assert not reads_true(it["negative_caption"], scene, scene_words=True), (subset, it)
            changed = [(a, b) for a, b in zip(it["caption"].split(), it["negative_caption"].split()) if a != b]
            assert len(it["caption"].split()) == len(it["negative_caption"].split()) and len(changed) == 1
            assert {w.strip(";") for w in changed[0]} == words[subset], (subset, it)
    # the thing whose size is replaced is drawn from the scene's things: every position of three is edited
    three = [it for it in items["replace_size"] if len(described(it["caption"])[0]) == 3]
    at = {next(k for k, (a, b) in enumerate(zip(described(it["caption"])[0], described(it["negative_caption"])[0]))
               if a != b) for it in three}
    assert at == {0, 1, 2}


def test_the_viewer_reads_size_words_and_with_scene_words_the_light_and_mood_clause():
    scene = Scene((Thing("cube", "red", "small"), Thing("ball", "blue", "big")), ("left",), "dim", "busy", layout=3)
    assert reads_true("a tiny red cube to the left of a big blue ball", scene)  # a synonym of small
    assert not reads_true("a big red cube to the left of a big blue ball", scene)
    clause = "a small red cube to the left of a big blue ball; it is {} and {}"
    assert reads_true(clause.format("dim", "lively"), scene, scene_words=True)
    assert not reads_true(clause.format("bright", "busy"), scene, scene_words=True)
    assert not reads_true(clause.format("dim", "calm"), scene, scene_words=True)
    with pytest.raises(ValueError, match="not a toy-world light and mood"):
        reads_true(clause.format("dim", "red"), scene, scene_words=True)


def test_stages_score_the_attribute_subsets_under_their_own_names_outside_the_seven_subsets_averages(tmp_path):
    stages = Stages(StageConfig(out=str(tmp_path), world=WorldConfig(**asdict(SMALL) | {"attribute_subsets": True}),
                                batch_size=8, pretrain_steps=2), progress=False)
    world = stages.world()
    assert world.name != Stages(StageConfig(out=str(tmp_path), world=SMALL)).out.name
    test = stages.test_data(world)
    assert list(test["attributes"]["items"]) == list(ATTRIBUTE_SUBSETS)
    assert "attributes" not in Stages(StageConfig(out=str(tmp_path / "off"), world=SMALL), progress=False).test_data(
        Stages(StageConfig(out=str(tmp_path / "off"), world=SMALL), progress=False).world())
    checkpoint = stages.baseline(world)
    both = stages.evaluate(checkpoint, test, name="both.json", per_item=True, blind=True)
    seven = stages.evaluate(checkpoint, {k: v for k, v in test.items() if k != "attributes"}, name="seven.json",
                            per_item=True, blind=True)
    added = {*ATTRIBUTE_SUBSETS, *(f"{BLIND}{s}" for s in ATTRIBUTE_SUBSETS)}
    # the seven subsets, their averages (M.Avg) and retrieval are what they are without the attribute subsets
    assert set(both["metrics"]) - set(seven["metrics"]) == added
    assert {k: v for k, v in both["metrics"].items() if k not in added} == seven["metrics"]
    for part in ("series", "metrics"):
        assert set(both["outcomes"][part]) - set(seven["outcomes"][part]) == added
        assert {k: v for k, v in both["outcomes"][part].items() if k not in added} == seven["outcomes"][part]
    assert seven["outcomes"]["metrics"]["M.Avg"] == {"macro": list(SUBSETS)}
    for subset in ATTRIBUTE_SUBSETS:  # the share of its items right, from its own answers and its blind ones
        for name in (subset, f"{BLIND}{subset}"):
            answers = both["outcomes"]["series"][name]
            assert len(answers["values"]) == 20 and both["outcomes"]["metrics"][name] == {"mean": name}
            assert both["metrics"][name] == pytest.approx(sum(answers["values"]) / 20)
