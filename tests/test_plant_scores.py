"""Scores on every planted pair and the gates on them: the scores are Table 1's quantities and identical on resume,
a gate rejects exactly the pairs its threshold names, a re-plant with other gates makes no rewrite or edit, and
`analyze` and the gallery read the scores back. Every model is a tiny random one built here: nothing is downloaded."""

import hashlib
import json
import statistics

import pytest
import torch
import torch.nn.functional as F

from concrete_jungle.cli import main
from concrete_jungle.concretebatch import iter_records, read_manifest
from plant_fixtures import make_dataset, plant_args
from plugin_example import CountingCaptioner, CountingEditor, PixelChangeScorer

SCORES = {"text_sim", "image_sim", "agreement", "agreement_anchor", "agreement_negative"}
EDITOR = ["--editor", "plugin_example:CountingEditor"]


@pytest.fixture(scope="module")
def tiny_scorers(tmp_path_factory):
    from concrete_jungle.models.tiny import build_tiny_dinov2, build_tiny_roberta

    root = tmp_path_factory.mktemp("scorers")
    return build_tiny_dinov2(root / "dino"), build_tiny_roberta(root / "roberta")


def scoring_flags(tiny_scorers):
    """The default scorers (bertscore, dino, open_clip) on the tiny models."""
    dino, roberta = tiny_scorers
    options = [f"bertscore.model={roberta}", "bertscore.num_layers=2", "bertscore.rescale=false",
               f"dino.model={dino}", "open_clip.model=cj-tiny", "open_clip.pretrained=none"]
    return ["--score", *(x for option in options for x in ("--scorer-option", option))]


def fingerprint(out):
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    return {p.name: digest(p) for p in sorted(out.glob("shard-*.tar"))} | {"manifest": digest(out / "manifest.jsonl")}


@pytest.fixture(scope="module")
def scored(tmp_path_factory, tiny_scorers):
    """A dataset planted with the default scorers: (its folder, the arguments that made it, the input)."""
    root = tmp_path_factory.mktemp("scored")
    captions, images = make_dataset(root, 24)
    args = plant_args(captions, images, root / "cb", "--samples-per-shard", 8, "--batch-size", 4, *EDITOR,
                      *scoring_flags(tiny_scorers))
    CountingEditor.stop_at = None
    assert main(args) == 0
    return root / "cb", args, (captions, images)


def test_every_record_holds_table_1_s_scores_with_their_models(scored, tiny_scorers):
    from bert_score import score as bert_score
    from transformers import AutoImageProcessor, AutoModel

    from concrete_jungle.models import load_model

    out, _, _ = scored
    records = list(iter_records(out))
    rows = {r["id"]: r for r in read_manifest(out) if r["status"] == "ok"}
    assert len(records) == len(rows) > 10
    for r in records:
        meta = r["meta"]
        assert set(meta["scores"]) == set(meta["score_models"]) == SCORES
        assert rows[meta["id"]]["scores"] == meta["scores"] and rows[meta["id"]]["score_models"] == meta["score_models"]
        assert meta["score_models"]["agreement"].startswith("open_clip:cj-tiny:none-seed0@sha1:")
        assert meta["score_models"]["image_sim"].startswith(f"dino:{tiny_scorers[0]}@sha256:")
        assert meta["score_models"]["text_sim"].startswith(f"bertscore:{tiny_scorers[1]}@L2-sha256:")
    # each score as computed here from the stored pictures and captions (Table 1's way: `analyze`)
    dino_path, roberta_path = tiny_scorers
    f1 = bert_score([r["neg_caption"] for r in records], [r["caption"] for r in records],
                    model_type=str(roberta_path), num_layers=2)[2]
    assert [r["meta"]["scores"]["text_sim"] for r in records] == pytest.approx(f1.tolist(), abs=1e-5)
    clip = load_model("cj-tiny", "none", seed=0)
    processor, dino = AutoImageProcessor.from_pretrained(dino_path), AutoModel.from_pretrained(dino_path).eval()
    with torch.no_grad():
        for r in records:
            scores = r["meta"]["scores"]
            v, v2 = (F.normalize(clip.model.encode_image(clip.preprocess(im)[None]), dim=-1)[0]
                     for im in (r["image"], r["neg_image"]))
            t, t2 = (F.normalize(clip.model.encode_text(clip.tokenizer([c])), dim=-1)[0]
                     for c in (r["caption"], r["neg_caption"]))
            d1, d2 = (F.normalize(dino(**processor(images=[im], return_tensors="pt")).pooler_output, dim=-1)[0]
                      for im in (r["image"], r["neg_image"]))
            assert scores["image_sim"] == pytest.approx(float(d1 @ d2), abs=1e-5)
            assert scores["agreement_anchor"] == pytest.approx(float(v @ t - v @ t2), abs=1e-5)
            assert scores["agreement_negative"] == pytest.approx(float(v2 @ t2 - v2 @ t), abs=1e-5)
            assert scores["agreement"] == min(scores["agreement_anchor"], scores["agreement_negative"])
    config = (out / "config.yaml").read_text()
    assert "scoring:" in config and "gates: []" in config


def test_an_interrupted_scored_plant_resumes_to_the_same_scores_and_records(scored, tmp_path):
    out, args, _ = scored
    resumed = tmp_path / "resumed"
    again = [str(resumed) if a == str(out) else a for a in args]
    CountingEditor.calls, CountingEditor.stop_at = 0, 3  # stopped as Ctrl-C stops it, in its second shard
    try:
        assert main(again) == 130
    finally:
        CountingEditor.stop_at = None
    assert 0 < len(list((resumed / "manifests").glob("*.jsonl"))) < 3 and not (resumed / "manifest.jsonl").exists()
    assert main(again) == 0
    assert fingerprint(resumed) == fingerprint(out)  # the json members hold the scores: the same to the bit


def test_a_gate_rejects_exactly_the_pairs_its_threshold_names_and_a_new_gate_makes_nothing_again(tmp_path):
    from concrete_jungle.analysis.planted_scores import gated_pairs

    captions, images = make_dataset(tmp_path, 40)

    def plant(out, gate):
        return main(plant_args(captions, images, out, "--samples-per-shard", 12, "--batch-size", 5,
                               "--captioner", "plugin_example:CountingCaptioner", *EDITOR,
                               "--scorer", "plugin_example:PixelChangeScorer", "--gate", gate))

    def decided(out, gate_text, passes):
        """Every scored pair is kept when its score passes and gated, with the score in its reason, when not."""
        rows = [r for r in read_manifest(out) if "scores" in r]
        assert len(rows) > 20
        for r in rows:
            value = r["scores"]["pixel_change"]
            if passes(value):
                assert r["status"] == "ok", r
            else:
                assert r["status"] == "rejected" and r["stage"] == "gate", r
                assert r["reason"] == f"gate {gate_text} failed: pixel_change = {value:.6g}"
        gated = sum(r["status"] != "ok" for r in rows)
        summary = json.loads((out / "summary.json").read_text())
        assert summary["rejects_by_reason"][f"gate {gate_text} failed"] == gated == gated_pairs(out)[
            f"gate {gate_text} failed"]
        assert summary["ok"] == len(list(iter_records(out))) == len(rows) - gated
        return [r["scores"]["pixel_change"] for r in rows]

    CountingCaptioner.requests = CountingEditor.edited = PixelChangeScorer.scored = 0
    out = tmp_path / "cb"
    assert plant(out, "pixel_change<=0.233") == 0  # mirrored noise, stored as JPEG: 0.22 to 0.25 of the range
    values = decided(out, "pixel_change<=0.233", lambda v: v <= 0.233)
    assert min(values) <= 0.233 < max(values)  # the gate splits the pairs
    made = (CountingCaptioner.requests, CountingEditor.edited, PixelChangeScorer.scored)
    assert all(made)

    # another gate: the same pairs decided again from their stored scores, nothing asked, edited or scored again
    middle = statistics.median(values)
    assert plant(out, f"pixel_change>={middle!r}") == 0
    decided(out, f"pixel_change>={middle!r}", lambda v: v >= middle)
    assert (CountingCaptioner.requests, CountingEditor.edited, PixelChangeScorer.scored) == made
    assert plant(out, "pixel_change>=0.0") == 0  # every pair back in
    assert not [r for r in read_manifest(out) if r.get("stage") == "gate"]
    assert not list((out / "gated").glob("*.tar")) and (CountingCaptioner.requests,) == made[:1]

    # the re-gated dataset is the one a plant with that gate makes from the start
    assert plant(out, f"pixel_change>={middle!r}") == 0
    assert plant(tmp_path / "fresh", f"pixel_change>={middle!r}") == 0
    assert fingerprint(out) == fingerprint(tmp_path / "fresh")


def test_analyze_summarises_and_the_gallery_shows_the_planted_scores(scored, tmp_path):
    from concrete_jungle.analysis.dataset_statistics import analyze_datasets
    from concrete_jungle.analysis.gallery import build_gallery
    from concrete_jungle.models import load_model

    out, _, _ = scored
    records = [r["meta"] for r in iter_records(out)]
    stats = analyze_datasets([out], load_model("cj-tiny", "none", seed=0), tmp_path / "report", progress=False)
    planted = stats["datasets"]["cb"]["planted_scores"]
    assert set(planted) == SCORES and stats["datasets"]["cb"]["gated"] == {}
    for score, row in planted.items():
        values = sorted(m["scores"][score] for m in records)
        assert row["pairs"] == len(records) and row["null"] == 0
        assert row["mean"] == pytest.approx(statistics.fmean(values)) and row["sd"] == pytest.approx(
            statistics.stdev(values))
        assert (row["min"], row["max"]) == (values[0], values[-1])
        assert row["median"] == pytest.approx(statistics.median(values))
        assert row["model"] == records[0]["score_models"][score]
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Scores recorded by the plant" in report and f"| agreement | {len(records)} |" in report

    page = build_gallery([out], tmp_path / "gallery").read_text()
    for meta in records:
        assert f"<dd>{meta['scores']['agreement']:.3f}</dd>" in page
    assert "plant agreement (the smaller margin)" in page and "plant image_sim: DINO cosine" in page


def test_a_text_only_negative_has_no_image_scores_and_a_gate_on_one_lets_it_pass_counted_undecided(tmp_path,
                                                                                                  capsys):
    """A gate whose score was None for every pair passed every pair and counted nothing undecided."""
    captions, images = make_dataset(tmp_path, 12)
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out, "--scorer", "plugin_example:PixelChangeScorer",
                           "--gate", "pixel_change>=0.5")) == 0
    rows = read_manifest(out)
    assert all(r["scores"] == {"pixel_change": None} and r["status"] == "ok" for r in rows if "scores" in r)
    scored = sum("scores" in r for r in rows)
    assert scored and json.loads((out / "summary.json").read_text())["gates_undecided"] == {
        "pixel_change>=0.5": scored}
    assert f"note: gate pixel_change>=0.5 decided none of the {scored} scored pairs" in " ".join(
        capsys.readouterr().err.split())


def test_plant_merge_sums_each_gate_s_undecided_pairs_over_the_parts(tmp_path, capsys):
    captions, images = make_dataset(tmp_path, 12)
    out = tmp_path / "cb"
    for i in (0, 1):
        assert main(plant_args(captions, images, out, "--scorer", "plugin_example:PixelChangeScorer",
                               "--gate", "pixel_change>=0.5", "--num-shards", 2, "--shard-index", i)) == 0
    parts = [json.loads((out / f"summary-{i:05d}-of-00002.json").read_text())["gates_undecided"]["pixel_change>=0.5"]
             for i in (0, 1)]
    assert main(["plant", "merge", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    scored = sum("scores" in r for r in read_manifest(out))
    assert summary["gates_undecided"] == {"pixel_change>=0.5": sum(parts)} and sum(parts) == scored > 0
    assert summary["gates"] == ["pixel_change>=0.5"]
    capsys.readouterr()


def test_a_scored_dataset_is_not_resumed_without_its_scores(scored, capsys):
    out, args, _ = scored
    assert main([a for a in args if a != "--score" and not a.startswith(("bertscore.", "dino.", "open_clip."))
                 and a != "--scorer-option"]) == 2
    assert "other settings (scoring" in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("flags, message", [
    (["--gate", "agreement>=0.0"], "gate agreement>=0.0 needs scores: turn scoring on (--score"),
    (["--score", "--gate", "agreement=>0"], "gate 'agreement=>0' is not SCORE>=NUMBER"),
    (["--scorer", "plugin_example:PixelChangeScorer", "--gate", "dino<=0.9"],
     "gate dino<=0.9: no scorer gives 'dino'; the scorers give pixel_change"),
    (["--score", "--scorer-option", "clip.model=ViT-B-32"], "'clip' is not a scorer of this run (bertscore, dino, "
                                                            "open_clip)"),
    (["--scorer", "plugin_example:MirrorEditor"], "scorer 'plugin_example:MirrorEditor': plugin_example:MirrorEditor "
                                                  "has no score() method"),
])
def test_scoring_and_gate_mistakes_are_one_error_before_any_file(tmp_path, capsys, flags, message):
    captions, images = make_dataset(tmp_path, 4, image_size=8)
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out, *flags)) == 2
    assert message in " ".join(capsys.readouterr().err.split())
    assert not out.exists()


def test_scoring_in_a_config_file_is_typed_and_its_unknown_keys_are_errors(tmp_path, capsys):
    captions, images = make_dataset(tmp_path, 4, image_size=8)
    config = tmp_path / "plant.yaml"
    config.write_text(f"captions: [{captions}]\nimages: {images}\nout: {tmp_path / 'cb'}\nmode: hc\n"
                      "scoring: {scorers: {'plugin_example:PixelChangeScorer': {}}, devcie: cpu}\n"
                      "gates: ['pixel_change>=0.1']\n")
    assert main(["plant", "--config", str(config), "--no-progress"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "scoring: unknown key(s) 'devcie' (did you mean device?)" in err
    config.write_text(config.read_text().replace("devcie", "device"))
    assert main(["plant", "--config", str(config), "--no-progress", "--gate", "pixel_change>=0.2"]) == 0
    assert json.loads((tmp_path / "cb" / "summary.json").read_text())["gates"] == ["pixel_change>=0.2"]


def test_a_plant_without_scoring_writes_no_score_and_no_gated_store(planted):
    assert not any("scores" in r["meta"] for r in iter_records(planted))
    assert not any("scores" in r for r in read_manifest(planted)) and not (planted / "gated").exists()
    config = (planted / "config.yaml").read_text()
    assert "scoring" not in config and "gates" not in config
    assert "gates" not in json.loads((planted / "summary.json").read_text())


def test_the_estimate_counts_a_scoring_pass_a_scorer_a_record(tmp_path, capsys):
    captions, images = make_dataset(tmp_path, 10, image_size=8)
    args = ["plant", "--captions", str(captions), "--images", str(images), "--mode", "hc", "--estimate", "--json"]
    assert main([*args, "--score"]) == 0
    f = json.loads(capsys.readouterr().out)["figures"]
    assert f["scoring_passes"]["value"] == 3 * f["records"]["value"] > 0 and f["scoring_hours"]["value"] is None
    assert main(args) == 0
    f = json.loads(capsys.readouterr().out)["figures"]
    assert f["scoring_passes"]["value"] == f["scoring_hours"]["value"] == 0


@pytest.mark.processes  # a local Ray starts processes of its own (GCS, raylet, workers)
def test_the_ray_engine_scores_and_gates_as_the_local_engine_does(tmp_path):
    ray = pytest.importorskip("ray", reason="the Ray engine needs pip install 'concrete-jungle[ray]'")
    from pathlib import Path

    captions, images = make_dataset(tmp_path, 24)
    flags = ["--samples-per-shard", 12, "--batch-size", 4, *EDITOR, "--scorer", "plugin_example:PixelChangeScorer",
             "--gate", "pixel_change<=0.233"]
    assert main(plant_args(captions, images, tmp_path / "local", *flags)) == 0
    # the actors import the tests' own plugins (plugin_example) as a user's actors import theirs
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).parent)}})
    try:
        assert main(plant_args(captions, images, tmp_path / "ray", *flags, "--engine", "ray")) == 0
    finally:
        ray.shutdown()

    def records(out):
        rows = [{k: v for k, v in r.items() if k != "engine"} for r in read_manifest(out)]
        return fingerprint(out) | {"manifest": None}, rows, sorted(p.name for p in (out / "gated").glob("*.tar"))

    assert records(tmp_path / "ray") == records(tmp_path / "local")
    assert any(r.get("stage") == "gate" for r in read_manifest(tmp_path / "ray"))


def test_a_score_past_float_s_range_is_one_error_naming_the_scorer():
    """A scorer returning 10**400 was an OverflowError traceback naming no scorer."""
    from types import SimpleNamespace

    from concrete_jungle.errors import PlantError
    from concrete_jungle.plant.scoring import checked_value

    scorer = SimpleNamespace(name="huge")
    for value in (10**400, -(10**400), float("nan"), "0.5", True):
        with pytest.raises(PlantError, match=r"scorer 'huge' gave agreement = .*; a score is a finite number or "
                                             r"None: fix the scorer's score\(\)"):
            checked_value(scorer, "agreement", value)
    assert checked_value(scorer, "agreement", 10**300) == 1e300 and checked_value(scorer, "agreement", None) is None


def test_an_entailment_rule_decides_each_negative_from_its_score_and_records_the_threshold(tmp_path):
    captions, images = make_dataset(tmp_path, 30)
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out, "--samples-per-shard", 12, "--batch-size", 5, *EDITOR,
                           "--scorer", "plugin_example:PixelChangeScorer",
                           "--entailment", "pixel_change<=0.233")) == 0
    records = list(iter_records(out))
    decided = [n["anchor_true_of_negative"] for r in records for n in r["negatives"]]
    assert len(decided) == len(records) > 20 and set(decided) == {True, False}  # the rule splits the pairs
    for r in records:
        (negative,) = r["negatives"]
        assert negative["anchor_true_of_negative"] == (r["meta"]["scores"]["pixel_change"] <= 0.233)
        assert negative["entailment"] == {"by": "score", "score": "pixel_change", "rule": "pixel_change<=0.233",
                                          "threshold": 0.233, "model": "pixel-change@1"}
        assert r["meta"]["negatives"][0]["concreteness"] == r["meta"]["concreteness"]
    assert "entailment: pixel_change<=0.233" in (out / "config.yaml").read_text()


def test_a_negative_is_unknown_when_no_decider_ran_and_true_when_its_picture_is_the_anchor_s(tmp_path):
    captions, images = make_dataset(tmp_path, 12)
    scored_only, text_only = tmp_path / "scored", tmp_path / "text-only"
    assert main(plant_args(captions, images, scored_only, *EDITOR, "--scorer", "plugin_example:PixelChangeScorer")) \
        == 0
    assert main(plant_args(captions, images, text_only, "--scorer", "plugin_example:PixelChangeScorer",
                           "--entailment", "pixel_change<=0.233")) == 0  # --editor none: v' is the anchor
    unknown = [n for r in iter_records(scored_only) for n in r["negatives"]]
    assert unknown and all(n["anchor_true_of_negative"] is None and n["entailment"] is None for n in unknown)
    assert all("negatives" not in r["meta"] for r in iter_records(scored_only))  # the records made before the field
    same = [n for r in iter_records(text_only) for n in r["negatives"]]
    assert same and all(n["anchor_true_of_negative"] is True and n["entailment"] == {"by": "neg_image_is_anchor"}
                        for n in same)


def test_an_entailment_rule_must_parse_and_name_a_score_a_scorer_gives(tmp_path, capsys):
    captions, images = make_dataset(tmp_path, 6)
    for rule, message in (("pixel_change=1", "scoring.entailment 'pixel_change=1' is not SCORE>=NUMBER"),
                          ("agreement_negative<0.0", "scoring.entailment agreement_negative<0.0: no scorer gives "
                           "'agreement_negative'; the scorers give pixel_change")):
        assert main(plant_args(captions, images, tmp_path / "cb", "--scorer", "plugin_example:PixelChangeScorer",
                               "--entailment", rule)) == 2
        assert message in " ".join(capsys.readouterr().err.split())
        assert not (tmp_path / "cb").exists()  # refused before anything is written
