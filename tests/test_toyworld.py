"""The toy world: deterministic rendering, captions the real keyword sampler reads as intended, rewrites
and edits that agree, and a test set without training scenes."""

import json
import random
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from concrete_jungle.cli import main
from concrete_jungle.concretebatch import iter_records, read_manifest
from concrete_jungle.errors import DatasetError
from concrete_jungle.plant.captioners import RewriteRequest, make_captioner
from concrete_jungle.plant.captioners.validation import check_rewrite
from concrete_jungle.plant.editors import make_editor
from concrete_jungle.plant.keywords import extract_candidates
from concrete_jungle.toyworld.build import SUBSETS, WorldConfig, build_world
from concrete_jungle.toyworld.edit_kinds import EDIT_KIND_SUBSET, edit_kind_counts
from concrete_jungle.toyworld.world import (
    COLOURS,
    RELATIONS,
    SHAPES,
    SIZES,
    TEXTURES,
    WORD_VALUE,
    CaptionError,
    Scene,
    Thing,
    full_caption,
    layout_positions,
    parse_caption,
    pixel_hash,
    render,
    sample_scene,
    word_kind,
)

EXPECTED = {**{w: "object" for w in SHAPES}, **{w: "attribute" for w in [*COLOURS, *TEXTURES, *WORD_VALUE]},
            **{p.split()[-2] if len(p.split()) > 1 else p: "relation" for p in RELATIONS.values()}}
EXPECTED["next"] = "relation"  # `next to`: the content word is `next`


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("world")
    build_world(d, WorldConfig(train=120, test=60, seed=3), progress=False)
    return d


def scenes(n, seed=0):
    rng = random.Random(seed)
    return [sample_scene(rng) for _ in range(n)]


def test_rendering_is_deterministic_and_depends_on_content_and_layout(tmp_path):
    s = scenes(20)
    assert all(render(x).tobytes() == render(x).tobytes() for x in s)
    a = build_world(tmp_path / "a", WorldConfig(train=30, test=10, seed=1), progress=False)
    b = build_world(tmp_path / "b", WorldConfig(train=30, test=10, seed=1), progress=False)
    assert a == b
    for name in ("scenes.jsonl", "captions.jsonl", "test/retrieval.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    first = json.loads((tmp_path / "a" / "scenes.jsonl").read_text().splitlines()[0])
    assert pixel_hash(Image.open(tmp_path / "a" / "images" / first["image"])) == first["pixel_hash"]
    x = s[0]
    assert render(replace(x, layout=x.layout + 1)).tobytes() != render(x).tobytes()
    other = "red" if x.things[0].colour != "red" else "blue"
    changed = replace(x, things=(replace(x.things[0], colour=other),) + x.things[1:])
    assert render(changed).tobytes() != render(x).tobytes()


def test_scene_words_change_the_picture_a_little_and_everywhere():
    x = Scene((Thing("ball", "red", "big"),), (), "bright", "calm", layout=7)
    base = np.asarray(render(x), np.float32)
    for changed in (replace(x, light="dim"), replace(x, mood="busy")):
        diff = np.abs(np.asarray(render(changed), np.float32) - base)
        assert 0.5 < diff.mean() < 0.06 * 255  # a few percent, not nothing
        assert (diff.mean(axis=2) > 0).mean() > 0.5  # global, not one object


def test_captions_parse_back_to_their_scene():
    for i, s in enumerate(scenes(500)):
        caption = full_caption(s, random.Random(i))
        assert parse_caption(caption, s.layout).content() == s.content(), caption
    with pytest.raises(CaptionError, match="toy world"):
        parse_caption("a big red dragon; it is dim and calm")
    with pytest.raises(CaptionError, match="clause"):
        parse_caption("a dog on a couch")


def test_every_keyword_is_found_by_the_real_sampler_with_its_category(nlp, ratings):
    captions = [full_caption(s, random.Random(i)) for i, s in enumerate(scenes(600, seed=5))]
    for caption, doc in zip(captions, nlp.pipe(captions)):
        found = {(c.text.lower(), c.category) for c in extract_candidates(doc, ratings)}
        content = [w for w in re.findall(r"[a-z]+", caption.lower()) if w in EXPECTED]
        missing = [w for w in content if (w, EXPECTED[w]) not in found]
        assert not missing, (caption, missing, found)
        extra = {c for c in found if c[0] not in EXPECTED}
        assert not extra, (caption, extra)


def test_the_rewrite_and_the_edit_change_the_same_one_thing(world, nlp, ratings):
    rows = [json.loads(line) for line in (world / "scenes.jsonl").read_text().splitlines()]
    captioner, editor = make_captioner("toyworld"), make_editor("toyworld", world=str(world))
    checked = set()
    for row in [r for r in rows if r["split"] == "train"][:60]:
        caption = row["captions"][0]
        anchor = Image.open(world / "images" / row["image"]).convert("RGB")
        original = parse_caption(caption, row["layout"])
        for cand in extract_candidates(nlp(caption), ratings):
            req = RewriteRequest(row["id"], caption, cand.text, (cand.start, cand.end), cand.category, "hc")
            reply = captioner.rewrite([req])[0]
            assert reply.error is None and check_rewrite(caption, (cand.start, cand.end), cand.category,
                                                         reply.text) is None, (caption, cand, reply)
            negative = editor.edit([anchor], [reply.text], [0])[0]
            edited = parse_caption(reply.text, row["layout"])
            assert negative.tobytes() == render(edited).tobytes()
            assert negative.tobytes() != anchor.tobytes()
            changes = scene_changes(original, edited)
            assert len(changes) == 1, (caption, reply.text, changes)
            assert changes[0][0] == word_kind(cand.text), (cand.text, changes)
            # the kind the editor records on the record is the slot the edit changed
            assert editor.meta_fields(cand.text, caption, reply.text) == {"edit_kind": changes[0][0]}
            checked.add(changes[0][0])
            if changes[0][0] in ("shape", "colour", "texture"):  # same layout: only that thing's pixels change
                assert changed_pixels_outside(anchor, negative, original, changes[0][1]) == 0, (caption, reply.text)
    assert checked == {"shape", "colour", "size", "texture", "relation", "light", "mood"}
    with pytest.raises(ValueError, match="scenes.jsonl not found"):
        make_editor("toyworld", world=str(world / "images"))
    with pytest.raises(ValueError, match="did not render"):
        editor.edit([Image.new("RGB", (64, 64))], [caption], [0])
    assert captioner.rewrite([RewriteRequest("x", "a dog on a couch", "dog", (2, 5), "object", "hc")])[0].error


def changed_pixels_outside(a: Image.Image, b: Image.Image, scene: Scene, i: int) -> int:
    """How many pixels differ between two renders outside thing i's box (one pixel of anti-aliasing allowed)."""
    diff = np.any(np.asarray(a) != np.asarray(b), axis=2)
    (x, y), half = layout_positions(scene)[i], SIZES[scene.things[i].size] / 2 + 1
    y0, y1, x0, x1 = (max(0, int(np.floor(v))) for v in (y - half, y + half + 1, x - half, x + half + 1))
    diff[y0:y1, x0:x1] = False
    return int(diff.sum())


def scene_changes(a: Scene, b: Scene) -> list[tuple[str, int]]:
    assert len(a.things) == len(b.things)
    out = [(f, i) for i, (x, y) in enumerate(zip(a.things, b.things))
           for f in ("shape", "colour", "size", "texture") if getattr(x, f) != getattr(y, f)]
    out += [("relation", i) for i, (x, y) in enumerate(zip(a.relations, b.relations)) if x != y]
    out += [(f, 0) for f in ("light", "mood") if getattr(a, f) != getattr(b, f)]
    return out


def test_the_test_set_holds_no_training_scene_and_is_in_sugarcrepe_format(world):
    from concrete_jungle.evaluation.benchmarks import retrieval, sugarcrepe

    rows = [json.loads(line) for line in (world / "scenes.jsonl").read_text().splitlines()]
    train = {r["key"] for r in rows if r["split"] == "train"}
    test = [r for r in rows if r["split"] == "test"]
    assert len(test) == 60 and not train & {r["key"] for r in test}
    data = sugarcrepe.load(world / "test" / "sugarcrepe", world / "images" / "test")
    assert set(data["items"]) == set(SUBSETS) and all(data["items"].values())
    assert not any(data["skipped"].values())
    for subset, items in data["items"].items():
        for _, path, caption, negative in items:
            assert path.exists() and caption != negative, (subset, caption)
    assert len(retrieval.load(world / "test" / "retrieval.json", world / "images" / "test")["items"]) == 60


def test_plant_runs_the_toy_captioner_and_editor_through_the_cli(world, tmp_path):
    out = tmp_path / "D_hc"
    assert main(["plant", "--captions", str(world / "captions.jsonl"), "--images", str(world / "images"),
                 "--out", str(out), "--mode", "hc", "--captioner", "toyworld", "--editor", "toyworld",
                 "--editor-option", f"world={world}", "--no-progress"]) == 0
    ok = [r for r in read_manifest(out) if r["status"] == "ok"]
    assert len(ok) == 120
    kinds = Counter()
    for record in iter_records(out):
        assert record["meta"]["editor"] == "toyworld" and not record["meta"]["neg_image_is_anchor"]
        parse_caption(record["neg_caption"])  # the negative caption is in the world's grammar
        assert record["meta"]["edit_kind"] == word_kind(record["meta"]["keyword"])
        kinds[record["meta"]["edit_kind"]] += 1
    counts = edit_kind_counts(out)
    assert list(counts) == list(EDIT_KIND_SUBSET) and counts == {k: kinds[k] for k in EDIT_KIND_SUBSET}
    assert sum(counts.values()) == 120 and counts["shape"] > 0
    assert main(["plant", "--captions", str(world / "captions.jsonl"), "--images", str(world / "images"),
                 "--out", str(tmp_path / "x"), "--mode", "hc", "--editor", "toyworld", "--no-progress"]) == 2
    # text-only negatives (no toy editor): no record says its edit kind, and counting them says so
    text_only = tmp_path / "text_only"
    assert main(["plant", "--captions", str(world / "captions.jsonl"), "--images", str(world / "images"),
                 "--out", str(text_only), "--mode", "hc", "--captioner", "toyworld", "--no-progress"]) == 0
    with pytest.raises(DatasetError, match="has no edit_kind; plant it again with the toy editor"):
        edit_kind_counts(text_only)


def test_each_edit_kind_names_the_test_subset_that_changes_its_slot():
    from concrete_jungle.toyworld.attributes import ATTRIBUTE_SUBSETS

    assert EDIT_KIND_SUBSET == {"colour": "replace_att", "texture": "replace_att", "size": "replace_size",
                                "shape": "replace_obj", "relation": "replace_rel", "light": "replace_light",
                                "mood": "replace_mood"}
    # every slot a toy-world word can be in, and only test subsets the world writes
    words = [*SHAPES, *COLOURS, *TEXTURES, *WORD_VALUE, *RELATIONS, *RELATIONS.values()]
    assert {word_kind(w) for w in words} == set(EDIT_KIND_SUBSET)
    assert set(EDIT_KIND_SUBSET.values()) <= {*SUBSETS, *ATTRIBUTE_SUBSETS}


def test_plant_from_a_config_file_equals_plant_from_flags(world, tmp_path):
    import yaml

    flags = tmp_path / "flags"
    assert main(["plant", "--captions", str(world / "captions.jsonl"), "--images", str(world / "images"),
                 "--out", str(flags), "--mode", "lc", "--captioner", "toyworld", "--editor", "toyworld",
                 "--editor-option", f"world={world}", "--no-progress"]) == 0
    config = tmp_path / "plant.yaml"
    config.write_text(yaml.safe_dump({
        "captions": [str(world / "captions.jsonl")], "images": str(world / "images"), "out": "unused", "mode": "lc",
        "captioner": "toyworld", "editor": "toyworld",
        "editor_options": {"world": str(world)}}))
    from_file = tmp_path / "file"
    assert main(["plant", "--config", str(config), "--set", f"out={from_file}", "--no-progress"]) == 0
    assert (from_file / "manifest.jsonl").read_bytes() == (flags / "manifest.jsonl").read_bytes()
    shards = sorted(p.name for p in flags.glob("shard-*.tar"))
    assert shards and all((from_file / s).read_bytes() == (flags / s).read_bytes() for s in shards)
    assert main(["plant", "--config", str(config), "--out", str(tmp_path / "x"), "--no-progress"]) == 2


def test_the_demo_settings_in_the_docs_are_the_code_s():
    from concrete_jungle.experiments.demo import QUICK, DemoConfig

    text = (Path(__file__).resolve().parents[1] / "docs" / "toyworld.md").read_text()
    start = text.index("## The demo run")
    section = text[start:text.index("\n## ", start + 1)]
    rows = {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")]
                                             for line in section.splitlines() if line.startswith("| "))}
    for column, config in enumerate((DemoConfig(), replace(DemoConfig(), **QUICK))):
        expected = {"training scenes": config.world.train, "test scenes": config.world.test, "model": config.model,
                    "batch size (anchors)": config.batch_size, "baseline steps": config.pretrain_steps,
                    "baseline learning rate": config.pretrain_lr, "fine-tuning steps": config.finetune_steps,
                    "fine-tuning learning rate": config.finetune_lr, "seeds": ", ".join(map(str, config.seeds))}
        assert {k: rows[k][column] for k in expected} == {k: str(v) for k, v in expected.items()}


# ------------------------------------------------------------------------------------------------ Study 2's world


def test_a_named_held_out_world_in_one_codec_and_a_captioner_that_refuses_held_out_negatives(tmp_path):
    """Held-out scenes differ from every training scene in something their captions name; every split is JPEG as
    the ConcreteBatch stores it (anchors byte-identical to the world's files); and with the world given, the toy
    captioner refuses a rewrite that describes a held-out scene, which the plain captioner writes."""
    import tarfile

    from concrete_jungle.cli import main
    from concrete_jungle.concretebatch import iter_records, read_manifest
    from concrete_jungle.records import read_jsonl
    from concrete_jungle.toyworld.build import named_part

    world = tmp_path / "world"
    # Study 2's 600 test and 100 validation scenes, so that leaky negatives hit held-out scenes (10 of them here);
    # 500 training scenes rather than its 1,500 (the same refusal, a third of the plant)
    build_world(world, WorldConfig(train=500, test=600, val=100, seed=1, held_out="named", image_format="jpeg"),
                progress=False)
    rows = read_jsonl(world / "scenes.jsonl")
    train = {named_part(parse_caption(r["captions"][0]).key()) for r in rows if r["split"] == "train"}
    held_out = {parse_caption(r["captions"][0]).key(): r["id"] for r in rows if r["split"] != "train"}
    assert not any(named_part(k) in train for k in held_out)
    assert all(r["image"].endswith(".jpg") for r in rows)
    plant = ["plant", "--captions", str(world / "captions.jsonl"), "--images", str(world / "images"), "--mode", "hc",
             "--captioner", "concrete_jungle.toyworld.rewrite:ToyCaptioner", "--editor",
             "concrete_jungle.toyworld.rewrite:ToyEditor", "--editor-option", f"world={world}", "--no-progress",
             "--samples-per-shard", "500", "--batch-size", "64"]
    leaky, clean = tmp_path / "leaky", tmp_path / "clean"
    assert main([*plant, "--out", str(leaky)]) == 0
    assert main([*plant, "--out", str(clean), "--captioner-option", f"world={world}"]) == 0

    def negatives_held_out(out):
        return sum(parse_caption(r["neg_caption"]).key() in held_out for r in iter_records(out))

    assert negatives_held_out(leaky) > 0  # the plain captioner does write held-out scenes
    assert negatives_held_out(clean) == 0
    ok = [r for r in read_manifest(clean) if r["status"] == "ok"]
    assert len(ok) >= 0.95 * 500  # another attempt finds a negative that is not held out, nearly always
    with tarfile.open(clean / "shard-000000.tar") as tar:  # one codec: the world's JPEG bytes, unchanged
        member = next(m for m in tar if m.name.endswith(".jpg") and not m.name.endswith(".neg.jpg"))
        meta = json.loads(tar.extractfile(member.name.replace(".jpg", ".json")).read())
        assert tar.extractfile(member).read() == (world / "images" / meta["source"]).read_bytes()


@pytest.mark.slow
def test_no_negative_is_a_held_out_scene_on_a_study_sized_world(tmp_path):
    """Study 2's world, planted by the study's own stages with the no-leak captioner: zero negatives of D_hc, D_lc
    or D_wo describe a test or validation scene (Study 1: 54, 64 and 64 test scenes)."""
    from concrete_jungle.concretebatch import iter_records
    from concrete_jungle.experiments.stages import StageConfig, Stages
    from concrete_jungle.experiments.study2 import Study2Config
    from concrete_jungle.records import read_jsonl

    world_config = Study2Config().world
    stages = Stages(StageConfig(out=str(tmp_path), world=world_config, no_leak=True), progress=False)
    world = stages.world()
    held_out = {parse_caption(r["captions"][0]).key() for r in read_jsonl(world / "scenes.jsonl")
                if r["split"] != "train"}
    for mode in ("hc", "lc", "wo"):
        data = stages.plant(world, mode)
        keys = [parse_caption(r["neg_caption"]).key() for r in iter_records(data)]
        assert len(keys) >= 0.95 * 4000, mode
        assert not any(k in held_out for k in keys), mode


def test_the_viewer_reads_relations_off_the_drawn_boxes():
    from concrete_jungle.toyworld.viewer import reads_true
    from concrete_jungle.toyworld.world import Scene, Thing

    ball, cube = Thing("ball", "red", "big"), Thing("cube", "red", "small")
    left = Scene((ball, cube), ("left",), "dim", "calm", layout=3)
    assert reads_true("a big red ball to the left of a small red cube", left)
    assert reads_true("a small red cube to the right of a big red ball", left)
    assert reads_true("a ball next to a cube", left)  # 5 pixels apart sideways is next to
    assert reads_true("a red cube", left) and not reads_true("a blue cube", left)
    assert not reads_true("a big red ball to the right of a small red cube", left)
    assert not reads_true("a ball above a cube", left) and not reads_true("a ball on top of a cube", left)
    on_top = Scene((cube, ball), ("top",), "dim", "calm", layout=3)
    assert reads_true("a cube above a ball", on_top) and reads_true("a cube on top of a ball", on_top)
    assert not reads_true("a cube below a ball", on_top) and not reads_true("a cube next to a ball", on_top)
    inside = Scene((cube, ball), ("inside",), "dim", "calm", layout=3)
    assert reads_true("a cube inside a ball", inside) and not reads_true("a ball inside a cube", inside)
    assert not reads_true("a cube next to a ball", inside) and not reads_true("a cube above a ball", inside)
    twins = Scene((Thing("star", "blue", "small"), Thing("ball", "blue", "small")), ("next",), "dim", "calm", 1)
    assert reads_true("a small blue ball next to a small blue star", twins)  # a shape swap that reads the same
    with pytest.raises(ValueError, match="not a toy-world"):
        reads_true("a big red elephant", left)


def test_with_viewer_negatives_every_test_negative_reads_false_and_relation_words_are_balanced():
    """On 600 scenes: every positive reads true of its picture and, with ``test_negatives="viewer"``, every negative
    reads false, per subset; the construction rule alone lets some swap_obj negatives through (two things alike
    but for their shape, next to each other). replace_rel's negatives then use each relation word about as often
    as its positives (Study 1's used the one-word above/below in 55 % of items against 33 % of positives)."""
    from collections import Counter

    from concrete_jungle.toyworld.build import compositional_test
    from concrete_jungle.toyworld.viewer import described, reads_true
    from concrete_jungle.toyworld.world import sample_scene

    rng = random.Random(11)
    scenes = [sample_scene(rng) for _ in range(3000)]
    files = [f"test-{i:06d}.png" for i in range(len(scenes))]
    by_file = dict(zip(files, scenes))
    items, dropped = compositional_test(scenes, files, seed=2, viewer=True)
    for subset in SUBSETS:
        assert len(items[subset]) > 300, subset
        for it in items[subset]:
            scene = by_file[it["filename"]]
            assert reads_true(it["caption"], scene) and not reads_true(it["negative_caption"], scene), (subset, it)
    assert sum(map(len, dropped.values())) == len(dropped["swap_obj"]) > 0
    construction, _ = compositional_test(scenes, files, seed=2)
    assert sum(reads_true(it["negative_caption"], by_file[it["filename"]]) for it in construction["swap_obj"]) > 0
    words = {side: Counter(r for it in items["replace_rel"] for r in described(it[side])[1])
             for side in ("caption", "negative_caption")}
    total = {side: sum(c.values()) for side, c in words.items()}
    for word in set(words["caption"]) | set(words["negative_caption"]):
        shares = [words[side][word] / total[side] for side in words]
        assert abs(shares[0] - shares[1]) < 0.05, (word, shares)


def test_the_viewer_decides_whether_the_anchor_caption_is_still_true_of_a_negative_picture():
    from concrete_jungle.toyworld.entailment import anchor_true_of
    from concrete_jungle.toyworld.viewer import reads_true
    from concrete_jungle.toyworld.world import Scene, Thing

    cube, ball = Thing("cube", "red", "big"), Thing("ball", "blue", "small")
    anchor = Scene((cube, ball), ("left",), "bright", "calm", layout=4)
    # add_att: the anchor's caption names shapes only; a colour added to the picture leaves it true
    add_att = Scene((replace(cube, colour="green"), ball), ("left",), "bright", "calm", layout=4)
    assert anchor_true_of("a cube to the left of a ball", add_att)
    # add_obj: a third thing added to the picture leaves it true
    add_obj = Scene((cube, ball, Thing("star", "pink", "small")), ("left", "above"), "bright", "calm", layout=4)
    assert anchor_true_of("a big red cube to the left of a small blue ball", add_obj)
    # swap_att: the colours swapped, the full caption is false of the picture
    swap_att = Scene((replace(cube, colour="blue"), replace(ball, colour="red")), ("left",), "bright", "calm", 4)
    assert not anchor_true_of("a big red cube to the left of a small blue ball", swap_att)
    # a light edit: the things and relations read the same, the light does not
    dim = replace(anchor, light="dim")
    full = "a big red cube to the left of a small blue ball; it is bright and calm"
    assert anchor_true_of(full, anchor) and not anchor_true_of(full, dim)
    assert reads_true(full, dim)  # the viewer alone does not read the light (no test caption names it)
    assert not anchor_true_of("a big red cube to the left of a small blue ball; it is bright and busy", anchor)


def test_the_viewer_scorer_reads_the_stored_negative_picture_and_is_unknown_for_a_picture_it_cannot_name(world):
    from concrete_jungle.plant.scorers import ScorePair
    from concrete_jungle.records import read_jsonl
    from concrete_jungle.toyworld.entailment import ViewerScorer
    from concrete_jungle.toyworld.separation import stored
    from concrete_jungle.toyworld.world import full_caption

    row = next(r for r in read_jsonl(world / "scenes.jsonl") if r["split"] == "train")
    caption = row["captions"][0]
    anchor = parse_caption(caption, row["layout"])
    picture = lambda scene: Image.fromarray(stored(scene))  # noqa: E731  (as the plant stores it)
    recoloured = replace(anchor, things=(replace(anchor.things[0], colour=next(
        c for c in COLOURS if c != anchor.things[0].colour)),) + anchor.things[1:])
    other = full_caption(recoloured)
    dimmed = replace(anchor, light="dim" if anchor.light == "bright" else "bright")
    scorer = ViewerScorer(world)
    pairs = [ScorePair(picture(anchor), caption, picture(recoloured), other),  # the toy editor's picture: false
             ScorePair(picture(anchor), caption, picture(anchor), other),  # an editor that changed nothing: true
             ScorePair(picture(anchor), caption, None, other),  # a text-only negative: its picture is the anchor's
             ScorePair(picture(anchor), caption, picture(dimmed), full_caption(dimmed)),  # the light edited: false
             ScorePair(picture(anchor), caption, picture(recoloured), full_caption(dimmed)),  # not what it names
             ScorePair(picture(anchor), "a red ball", picture(recoloured), other)]  # no scene of the world
    assert scorer.score(pairs) == {"viewer_anchor_true": [0.0, 1.0, 1.0, 0.0, None, None]}
    with pytest.raises(ValueError, match="scenes.jsonl not found"):
        ViewerScorer(world / "images")


def test_a_toy_plant_with_the_viewer_records_each_negative_s_decision(world, tmp_path):
    out = tmp_path / "D_lc"
    assert main(["plant", "--captions", str(world / "captions.jsonl"), "--images", str(world / "images"),
                 "--out", str(out), "--mode", "lc", "--captioner", "toyworld", "--editor", "toyworld",
                 "--editor-option", f"world={world}", "--scorer", "concrete_jungle.toyworld.entailment:ViewerScorer",
                 "--scorer-option", f"concrete_jungle.toyworld.entailment:ViewerScorer.world={world}",
                 "--entailment", "viewer_anchor_true>=1", "--no-progress"]) == 0
    records = list(iter_records(out))
    assert len(records) == 120 and not any(viewer_decisions(world, records))


def viewer_decisions(world, records) -> list[bool]:
    """Each record's anchor_true_of_negative, checked to be the viewer's reading of its negative picture, decided by
    the rule ``viewer_anchor_true>=1`` with its score, threshold and decider recorded."""
    from concrete_jungle.records import read_jsonl
    from concrete_jungle.toyworld.entailment import anchor_true_of

    layouts = {r["id"]: r["layout"] for r in read_jsonl(world / "scenes.jsonl")}
    decisions = []
    for r in records:
        (negative,) = r["negatives"]
        drawn = parse_caption(r["neg_caption"], layouts[r["meta"]["id"]])
        assert negative["anchor_true_of_negative"] is anchor_true_of(r["caption"], drawn)
        assert negative["entailment"] == {"by": "score", "score": "viewer_anchor_true",
                                          "rule": "viewer_anchor_true>=1.0", "threshold": 1.0,
                                          "model": "toyworld-viewer@viewer-1"}
        decisions.append(negative["anchor_true_of_negative"])
    return decisions


def test_a_stage_plant_with_entailment_records_the_viewer_s_decision_and_the_edit_kind_of_each_record(world, tmp_path):
    """The experiments' plant (`Stages.plant` with ``entailment``): each negative's anchor_true_of_negative as the
    viewer reads it, with its decider and threshold (the rule ``viewer_anchor_true>=1``), and each record's kind."""
    from concrete_jungle.experiments.stages import VIEWER_RULE, StageConfig, Stages

    d = Stages(StageConfig(out=str(tmp_path), entailment=True), progress=False).plant(world, "wo")
    assert VIEWER_RULE == "viewer_anchor_true>=1"
    assert json.loads((d.parent / "stage.json").read_text())["entailment"] == VIEWER_RULE
    records = list(iter_records(d))
    assert len(records) == 120
    viewer_decisions(world, records)
    assert all(r["meta"]["edit_kind"] == word_kind(r["meta"]["keyword"]) for r in records)


def test_sample_world_rows_are_the_scenes_build_world_writes_without_their_pictures(tmp_path):
    from concrete_jungle.records import read_jsonl
    from concrete_jungle.toyworld.build import sample_world

    config = WorldConfig(train=30, test=12, val=6, seed=3, held_out="named", image_format="jpeg")
    build_world(tmp_path, config, progress=False)
    written = read_jsonl(tmp_path / "scenes.jsonl")
    assert [row for _, row in sample_world(config)] == [{k: v for k, v in r.items() if k != "pixel_hash"}
                                                         for r in written]
