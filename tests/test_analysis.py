"""The analyses (`concrete-jungle analyze`): gradient share against batch size (paper Fig. 6) on random features
and on a model's features, dataset statistics and their report, the text-shift figure, the feature cache."""

import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from concrete_jungle.analysis.statistics import gradient_share_by_batch_size
from concrete_jungle.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from test_plant import make_dataset, plant_args  # noqa: E402


def random_pairs(m, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    image = F.normalize(torch.randn(2 * m, d, generator=g), dim=1)
    text = F.normalize(image + 0.7 * torch.randn(2 * m, d, generator=g), dim=1)
    return image, text, 1 + 4 * torch.rand(m, generator=g)


def test_one_batch_reproduces_the_closed_form():
    image, text, c = random_pairs(16)
    curves = gradient_share_by_batch_size(image, text, c, 20.0, [16], schedules=("none",), batches=1)
    s = 20.0 * image @ text.T
    idx = torch.arange(32)
    hard = (idx + 16) % 32
    shares = []
    for mat in (s, s.T):
        p = torch.softmax(mat, dim=1)
        shares.append(p[idx, hard] / (1 - p[idx, idx]))
    assert curves["none"][16] == pytest.approx(torch.cat(shares).mean().item(), rel=1e-5)


def test_share_falls_with_batch_size_for_infonce_and_rises_with_a_positive_margin():
    image, text, c = random_pairs(512, seed=1)
    curves = gradient_share_by_batch_size(image, text, c, 30.0, [16, 64, 256, 512], batches=4)
    infonce = [curves["none"][n] for n in (16, 64, 256, 512)]
    assert all(a > b for a, b in zip(infonce, infonce[1:])), infonce
    for n in (16, 64, 256, 512):
        assert curves["static"][n] > curves["none"][n]


def test_batch_larger_than_the_data_is_a_clear_error():
    image, text, c = random_pairs(8)
    with pytest.raises(ValueError, match=r"batch sizes \[16\] exceed the 8 pairs available"):
        gradient_share_by_batch_size(image, text, c, 20.0, [4, 16])


@pytest.fixture(scope="module")
def small_concretebatch(tmp_path_factory):
    root = tmp_path_factory.mktemp("cb")
    captions, images = make_dataset(root, 24, image_size=64)
    assert main(["plant", "--captions", str(captions), "--images", str(images), "--out", str(root / "cb"),
                 "--mode", "hc", "--no-progress"]) == 0
    return root / "cb"


def test_analyze_gradient_share_writes_json_and_plot(tmp_path, small_concretebatch):
    out = tmp_path / "report"
    assert main(["analyze", "gradient-share", "--data", str(small_concretebatch), "--model", "cj-tiny",
                 "--pretrained", "none", "--batch-sizes", "4,8,16", "--out", str(out)]) == 0
    result = json.loads((out / "gradient_share.json").read_text())
    assert set(result["curves"]) == {"none", "static", "adaptive", "inverse"} and result["pairs"] == 24
    assert set(result["curves"]["none"]) == {"4", "8", "16"}
    png = (out / "gradient_share.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


@pytest.fixture(scope="module")
def scorers(tmp_path_factory):
    from concrete_jungle.tiny import build_tiny_dinov2, build_tiny_roberta

    root = tmp_path_factory.mktemp("scorers")
    return build_tiny_dinov2(root / "dino"), build_tiny_roberta(root / "roberta")


def test_dataset_statistics_equal_a_direct_computation(tmp_path, scorers):
    from bert_score import score as bert_score
    from transformers import AutoImageProcessor, AutoModel

    from concrete_jungle.analysis.statistics import word_edit_distance
    from concrete_jungle.concretebatch import iter_records
    from concrete_jungle.models import load_model
    from test_gallery import make_concretebatch

    data = make_concretebatch(tmp_path, "D_hc")
    dino_path, roberta_path = scorers
    out = tmp_path / "report"
    assert main(["analyze", str(data), "--model", "cj-tiny", "--pretrained", "none", "--out", str(out),
                 "--dino-model", str(dino_path), "--bertscore-model", str(roberta_path), "--bertscore-layers", "2",
                 "--no-rescale"]) == 0
    stats = json.loads((out / "stats.json").read_text())
    pairs, summary = stats["pairs"]["D_hc"], stats["datasets"]["D_hc"]["summary"]

    clip = load_model("cj-tiny", "none", seed=0)
    processor, dino = AutoImageProcessor.from_pretrained(dino_path), AutoModel.from_pretrained(dino_path).eval()
    records = list(iter_records(data))
    scale = clip.model.logit_scale.exp().item()
    with torch.no_grad():
        for r in records:
            v, v2 = (F.normalize(clip.model.encode_image(clip.preprocess(im)[None]), dim=-1)[0]
                     for im in (r["image"], r["neg_image"]))
            t, t2 = (F.normalize(clip.model.encode_text(clip.tokenizer([c])), dim=-1)[0]
                     for c in (r["caption"], r["neg_caption"]))
            d1, d2 = (F.normalize(dino(**processor(images=[im], return_tensors="pt")).pooler_output, dim=-1)[0]
                      for im in (r["image"], r["neg_image"]))
            got = pairs[r["meta"]["id"]]
            assert got["i2t"] == bool(v @ t > v @ t2) and got["t2i"] == bool(v @ t > v2 @ t)
            assert got["logit_gap"] == pytest.approx(scale * float(v @ t - v @ t2), abs=1e-4)
            assert got["clip_l"] == pytest.approx(float(t @ t2), abs=1e-5)
            assert got["clip_v"] == pytest.approx(float(v @ v2), abs=1e-5)
            assert got["dino"] == pytest.approx(float(d1 @ d2), abs=1e-5)
            assert got["edit_distance"] == word_edit_distance(r["caption"], r["neg_caption"])
    f1 = bert_score([r["neg_caption"] for r in records], [r["caption"] for r in records], model_type=str(roberta_path),
                    num_layers=2)[2]
    assert [pairs[r["meta"]["id"]]["bertscore"] for r in records] == pytest.approx(f1.tolist(), abs=1e-5)
    assert summary["i2t"] == pytest.approx(sum(p["i2t"] for p in pairs.values()) / 5)
    assert summary["mean_c"] == pytest.approx(sum(r["concreteness"] for r in records) / 5)
    assert summary["median_c"] == 4.24 and summary["unique_keywords"] == 5
    for png in ("fig5a_concreteness", "fig5bc_logit_gap", "fig5d_text_shift", "fig5ef_correlation"):
        assert (out / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / f"{png}.png").stat().st_size > 10_000
    report = (out / "report.md").read_text()
    assert "| Mean c | 4.2280 | 4.7700 |" in report and "DINOScore" in report


def test_word_edit_distance():
    from concrete_jungle.analysis.statistics import word_edit_distance

    assert word_edit_distance("a red car", "a blue car") == 1
    assert word_edit_distance("in front of the tree", "behind the tree") == 3
    assert word_edit_distance("", "a b") == 2


def test_embeddings_are_computed_once_per_model_and_dataset(tmp_path):
    from concrete_jungle.analysis.statistics import concretebatch_features
    from concrete_jungle.errors import DatasetError
    from concrete_jungle.models import load_model
    from test_gallery import make_concretebatch

    data = make_concretebatch(tmp_path, "D_hc")
    clip = load_model("cj-tiny", "none", seed=0)
    first = concretebatch_features(clip, data, cache_dir=tmp_path / "cache")
    # the second answer can only come from the cache: the shards are unreadable now, though the dataset's
    # identity (its shards' recorded digests, which key the cache) is the same
    for shard in data.glob("shard-*.tar"):
        shard.write_bytes(b"\0" * shard.stat().st_size)
    second = concretebatch_features(clip, data, cache_dir=tmp_path / "cache")
    assert all(torch.equal(a, b) for a, b in zip(first[:3], second[:3])) and first[3] == second[3]
    # another model is encoded afresh, and with no cache the shards are read: nothing readable is left
    for model, cache in ((load_model("cj-tiny", "none", seed=1), tmp_path / "cache"), (clip, None)):
        with pytest.raises((DatasetError, ValueError), match="holds no records|damaged"):
            concretebatch_features(model, data, cache_dir=cache)


def test_the_analysis_encodes_captions_at_the_full_context_when_asked(tmp_path):
    """A run made before captions were encoded at their length (Study 1) analyses its data as it trained: the
    features come from the full context, into a cache of their own, and agree with the cut ones up to rounding."""
    from concrete_jungle.analysis.statistics import analyze_datasets, feature_cache_path
    from concrete_jungle.models import load_model
    from test_gallery import make_concretebatch

    data = make_concretebatch(tmp_path, "D_hc")
    clip = load_model("cj-tiny", "none", seed=0)
    stats = {}
    for trim in (True, False):
        out = tmp_path / f"trim-{trim}"
        stats[trim] = analyze_datasets([data], clip, out, progress=False, trim_text=trim)
        assert (feature_cache_path(clip, data, None, None, out / "embeddings", trim) / "metas.json").is_file()
        assert not feature_cache_path(clip, data, None, None, out / "embeddings", not trim).exists()
    cut, full = stats[True]["pairs"]["D_hc"], stats[False]["pairs"]["D_hc"]
    assert cut.keys() == full.keys()
    for key in cut:
        assert full[key]["clip_l"] == pytest.approx(cut[key]["clip_l"], abs=1e-5)
        assert full[key]["logit_gap"] == pytest.approx(cut[key]["logit_gap"], abs=1e-3)


def test_analyze_features_are_keyed_by_the_shards_not_the_manifest(tmp_path):
    import shutil

    from concrete_jungle.analysis.statistics import feature_cache_path
    from concrete_jungle.models import load_model

    captions, images = make_dataset(tmp_path, 10, image_size=16)
    out, clip = tmp_path / "cb", load_model("cj-tiny", "none")
    assert main(plant_args(captions, images, out)) == 0
    before, manifest = feature_cache_path(clip, out, None, None, tmp_path), (out / "manifest.jsonl").read_bytes()
    shutil.rmtree(out)  # planted again with another editor: the same manifest, other negative images
    assert main(plant_args(captions, images, out, "--editor", "plugin_example:MirrorEditor")) == 0
    assert (out / "manifest.jsonl").read_bytes() == manifest
    assert feature_cache_path(clip, out, None, None, tmp_path) != before


def test_analyze_says_when_negatives_are_text_only_and_names_the_reference_model(planted, tmp_path, capsys):
    out = tmp_path / "analysis"
    assert main(["analyze", "datasets", str(planted), "--model", "cj-tiny", "--pretrained", "none",
                 "--out", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "every pair have text-only negatives" in printed
    stats = json.loads((out / "stats.json").read_text())
    summary = stats["datasets"]["cb"]["summary"]
    assert summary["t2i"] is None and summary["clip_v"] is None and summary["text_only_pairs"] == summary["pairs"]
    report = (out / "report.md").read_text()
    assert "| T2I acc. | n/a (text-only) |" in report and "image-image cosine (CLIP-V) | n/a (text-only)" in report
    assert "under cj-tiny (random init, seed 0)" in report and "| CLIP-L |" not in report


def test_text_shift_plot_keeps_every_dataset_visible_on_integer_ticks(tmp_path):
    import random

    from concrete_jungle.analysis.figures import text_shift_figure

    rng = random.Random(0)
    per = {name: [{"concreteness": rng.uniform(1, 5), "edit_distance": rng.randint(1, 3)} for _ in range(300)]
           for name in ("D_hc", "D_lc", "D_wo")}
    fig = text_shift_figure(per)
    ax = fig.axes[0]
    assert [c.get_label() for c in ax.containers] == ["D_hc", "D_lc", "D_wo"]  # one errorbar series each
    assert all(float(t).is_integer() for t in ax.get_yticks())
    xs = [c.lines[0].get_xdata() for c in ax.containers]
    assert not set(xs[0]) & set(xs[1])  # offset: no dataset's means drawn on top of another's


def test_the_gradient_share_plot_names_data_and_model_and_has_error_bars(planted, tmp_path, capsys):
    out = tmp_path / "gs"
    assert main(["analyze", "gradient-share", "--data", str(planted), "--model", "cj-tiny", "--pretrained", "none",
                 "--batch-sizes", "4,8", "--batches", "3", "--out", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "on cb under cj-tiny (random init, seed 0)" in printed and "±" in printed
    saved = json.loads((out / "gradient_share.json").read_text())
    assert saved["batches"] == 3 and set(saved["sd"]) == set(saved["curves"])
