"""The analyses (`concrete-jungle analyze`): gradient share against batch size (paper Fig. 6) on random features
and on a model's features, dataset statistics and their report, the text-shift figure, the feature cache."""

import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from concrete_jungle.analysis.dataset_statistics import gradient_share_by_batch_size
from concrete_jungle.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from plant_fixtures import make_dataset, plant_args  # noqa: E402


def random_pairs(m, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    image = F.normalize(torch.randn(2 * m, d, generator=g), dim=1)
    text = F.normalize(image + 0.7 * torch.randn(2 * m, d, generator=g), dim=1)
    return image, text, 1 + 4 * torch.rand(m, generator=g)


def test_one_batch_reproduces_the_closed_form():
    image, text, c = random_pairs(16)
    curves = gradient_share_by_batch_size(image, text, c, 20.0, [16], schedules=("infonce",), batches=1)
    s = 20.0 * image @ text.T
    idx = torch.arange(32)
    hard = (idx + 16) % 32
    shares = []
    for mat in (s, s.T):
        p = torch.softmax(mat, dim=1)
        shares.append(p[idx, hard] / (1 - p[idx, idx]))
    assert curves["infonce"][16] == pytest.approx(torch.cat(shares).mean().item(), rel=1e-5)


def test_share_falls_with_batch_size_for_infonce_and_rises_with_a_positive_margin():
    image, text, c = random_pairs(512, seed=1)
    curves = gradient_share_by_batch_size(image, text, c, 30.0, [16, 64, 256, 512], batches=4)
    infonce = [curves["infonce"][n] for n in (16, 64, 256, 512)]
    assert all(a > b for a, b in zip(infonce, infonce[1:])), infonce
    for n in (16, 64, 256, 512):
        assert curves["static"][n] > curves["infonce"][n]


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
    assert set(result["curves"]) == {"infonce", "static", "cement", "inverse"} and result["pairs"] == 24
    assert set(result["curves"]["infonce"]) == {"4", "8", "16"}
    png = (out / "gradient_share.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


@pytest.fixture(scope="module")
def scorers(tmp_path_factory):
    from concrete_jungle.models.tiny import build_tiny_dinov2, build_tiny_roberta

    root = tmp_path_factory.mktemp("scorers")
    return build_tiny_dinov2(root / "dino"), build_tiny_roberta(root / "roberta")


def test_dataset_statistics_equal_a_direct_computation(tmp_path, scorers):
    from bert_score import score as bert_score
    from transformers import AutoImageProcessor, AutoModel

    from concrete_jungle.analysis.dataset_statistics import word_edit_distance
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
    from concrete_jungle.analysis.dataset_statistics import word_edit_distance

    assert word_edit_distance("a red car", "a blue car") == 1
    assert word_edit_distance("in front of the tree", "behind the tree") == 3
    assert word_edit_distance("", "a b") == 2


def test_embeddings_are_computed_once_per_model_and_dataset(tmp_path):
    from concrete_jungle.analysis.dataset_statistics import concretebatch_features
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
    from concrete_jungle.analysis.dataset_statistics import analyze_datasets, feature_cache_path
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

    from concrete_jungle.analysis.dataset_statistics import feature_cache_path
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
    # where two lines coincide, the one beneath still shows: each dataset its own marker and dash
    styles = {(c.lines[0].get_marker(), c.lines[0].get_linestyle()) for c in ax.containers}
    assert len(styles) == 3 and len({m for m, _ in styles}) == 3 and len({d for _, d in styles}) == 3


def test_the_gradient_share_plot_names_data_and_model_and_has_error_bars(planted, tmp_path, capsys):
    out = tmp_path / "gs"
    assert main(["analyze", "gradient-share", "--data", str(planted), "--model", "cj-tiny", "--pretrained", "none",
                 "--batch-sizes", "4,8", "--batches", "3", "--out", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "on cb under cj-tiny (random init, seed 0)" in printed and "±" in printed
    saved = json.loads((out / "gradient_share.json").read_text())
    assert saved["batches"] == 3 and set(saved["sd"]) == set(saved["curves"])


# a checkpoint as the demo's analysis loads it: a path deep enough to run off any axis
CHECKPOINT = {"checkpoint": "bbe8f09340eb88205bba975545a289b4dd7bf4fc",
              "path": "/tmp/demo_figs/baseline-1e4cfe73/run/checkpoints/step-0000120"}


def pair_rows_for_figures(names=("D_hc", "D_lc", "D_wo"), n=200, seed=0):
    """Per dataset, pairs shaped like the demo's: concreteness over a dataset's own range, logit gaps mostly near 0
    with a few large ones at middling concreteness, cosines near 1."""
    import random

    rng = random.Random(seed)
    per = {}
    for k, name in enumerate(names):
        rows = []
        for _ in range(n):
            c = rng.uniform(2.2 + 0.8 * (k == 0), 5.1)
            large = 3.8 <= c <= 4.5 and rng.random() < 0.6
            rows.append({"concreteness": c, "logit_gap": rng.uniform(4, 12) if large else abs(rng.gauss(0, 0.2)),
                         "clip_l": rng.uniform(0.8, 1.0), "clip_v": rng.uniform(0.7, 1.0),
                         "edit_distance": rng.randint(1, 3)})
        per[name] = rows
    return per


def texts_inside_the_figure(fig) -> list[str]:
    """The titles and axis labels that reach past the figure's edges (empty: every one is inside)."""
    fig.canvas.draw()
    renderer, bounds = fig.canvas.get_renderer(), fig.bbox
    texts = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label]
    outside = []
    for text in texts:
        box = text.get_window_extent(renderer)
        if text.get_text() and (box.x0 < bounds.x0 - 1 or box.y0 < bounds.y0 - 1 or box.x1 > bounds.x1 + 1
                                or box.y1 > bounds.y1 + 1):
            outside.append(text.get_text())
    return outside


def test_a_checkpoint_is_named_by_its_run_and_step_in_figures_and_the_report():
    from concrete_jungle.analysis.dataset_statistics import model_label

    assert model_label(CHECKPOINT) == "checkpoint step-0000120 of run (sha1 bbe8f093)"
    assert model_label({"name": "cj-tiny", "pretrained": "none", "seed": 0}) == "cj-tiny (random init, seed 0)"


def test_the_correlation_figure_tells_clip_l_from_clip_v_and_keeps_the_model_on_the_figure():
    import matplotlib.pyplot as plt

    from concrete_jungle.analysis.dataset_statistics import model_label
    from concrete_jungle.analysis.figures import correlation_figure

    fig = correlation_figure(pair_rows_for_figures(), model_label(CHECKPOINT))
    ax = fig.axes[0]
    assert ax.get_xlabel() == "CLIP-L: text-text cosine (t, t')"
    assert ax.get_ylabel() == "CLIP-V: image-image cosine (v, v')"
    title = " ".join(ax.get_title().split("\n"))
    assert "under checkpoint step-0000120 of run (sha1 bbe8f093)" in title and CHECKPOINT["path"] not in title
    assert texts_inside_the_figure(fig) == []
    # hollow markers, each in its legend entry's colour: no blend of two datasets' colours anywhere
    legend = ax.get_legend()
    listed = {t.get_text(): tuple(h.get_edgecolor()[0]) for t, h in zip(legend.get_texts(), legend.legend_handles)}
    for points in ax.collections:
        assert len(points.get_facecolor()) == 0 and tuple(points.get_edgecolor()[0]) == listed[points.get_label()]
    assert set(listed) == {"D_hc", "D_lc", "D_wo"}
    plt.close(fig)


def test_the_gradient_share_title_names_the_model_without_a_path_and_wraps_between_words():
    import matplotlib.pyplot as plt

    from concrete_jungle.analysis.dataset_statistics import model_label
    from concrete_jungle.analysis.figures import gradient_share_figure, gradient_share_title

    title = gradient_share_title("D_hc", 256, model_label(CHECKPOINT), 15.0)
    curves = {"infonce": {8: 0.4, 16: 0.3}, "cement": {8: 0.6, 16: 0.5}}
    fig = gradient_share_figure(curves, title, {s: {8: 0.01, 16: 0.01} for s in curves}, 8)
    shown = fig.axes[0].get_title()
    assert " ".join(shown.split("\n")) == title and "/" not in title  # broken only between words
    assert texts_inside_the_figure(fig) == []
    plt.close(fig)


def test_the_concreteness_histograms_show_only_colours_their_legend_has():
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from concrete_jungle.analysis.figures import concreteness_figure

    fig = concreteness_figure(pair_rows_for_figures())
    ax = fig.axes[0]
    assert ax.patches and not any(p.get_fill() for p in ax.patches)  # outlines: nothing to blend
    drawn = {to_hex(p.get_edgecolor()) for p in ax.patches}
    legend = ax.get_legend()
    listed = {t.get_text(): to_hex(h.get_edgecolor()) for t, h in zip(legend.get_texts(), legend.legend_handles)}
    assert set(listed) == {"D_hc", "D_lc", "D_wo"} and drawn == set(listed.values())
    plt.close(fig)


def test_every_line_of_the_logit_gap_figure_stays_within_its_bins_interval():
    """A smoother's line left the binned means' 95 % intervals (9.5 where the bin's mean was 5.2, 3-7.5): every
    point of every line drawn must lie within the interval of the bin it is drawn in."""
    import math

    import matplotlib.pyplot as plt

    from concrete_jungle.analysis.figures import binned_means, logit_gap_figure

    per = pair_rows_for_figures()
    fig = logit_gap_figure(per, "the CLIP baseline (cj-demo)")
    assert "under the CLIP baseline (cj-demo)" in fig._suptitle.get_text()
    for ax, (name, rows) in zip(fig.axes, per.items()):
        bins = {round(b[0] / 0.25 - 0.5): b for b in binned_means([r["concreteness"] for r in rows],
                                                                   [r["logit_gap"] for r in rows])}
        assert ax.get_lines(), name
        for line in ax.get_lines():
            for x, y in zip(line.get_xdata(), line.get_ydata()):
                if math.isnan(x):
                    continue  # the break between bins that are not adjacent
                centre, mean, half, _ = bins[int(x // 0.25)]
                assert abs(y - mean) <= half + 1e-9, (name, line.get_label(), x, y, mean, half)
    plt.close(fig)


def test_the_analysis_report_names_a_checkpoint_as_its_figures_do(planted, tmp_path):
    from concrete_jungle.models import load_model, save_checkpoint

    clip = load_model("cj-tiny", "none", seed=0)
    checkpoint = save_checkpoint(tmp_path / "cement_hc" / "checkpoints" / "step-0000007", clip.model, clip.config)
    out = tmp_path / "analysis"
    assert main(["analyze", "datasets", str(planted), "--checkpoint", str(checkpoint), "--limit", "16",
                 "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    label = next(line for line in report.splitlines() if line.startswith("Reference CLIP: ")).split(": ")[1]
    assert label.startswith("checkpoint step-0000007 of cement_hc (sha1 ")
    assert f"{label}: {checkpoint}" in report  # the full path once, beside the label, in the text
    assert f"the cosines are under {label}; the paper's under PE-Core-L" in report


def test_a_rating_at_the_top_of_the_scale_is_binned_within_it():
    from concrete_jungle.analysis.figures import binned_means

    bins = binned_means([5.0] * 6 + [4.8] * 4, [1.0] * 6 + [3.0] * 4)
    assert [(centre, n) for centre, _, _, n in bins] == [(4.875, 10)]  # not a bin at 5.125, off the axis


def test_lines_through_binned_means_break_where_a_bin_is_left_out():
    """A line drawn across a bin with too few pairs would claim a mean there: the lines break (NaN) instead."""
    import math

    import matplotlib.pyplot as plt

    from concrete_jungle.analysis.figures import logit_gap_figure, text_shift_figure

    # 10 pairs in each of the bins at c = 2.1 and 2.6, 2 pairs (left out) in the bin at 2.35 between them
    rows = [{"concreteness": c, "logit_gap": 1.0 + k % 3, "edit_distance": 1 + k % 2}
            for k, c in enumerate([2.1] * 10 + [2.35] * 2 + [2.6] * 10)]
    for fig in (logit_gap_figure({"D_hc": rows}), text_shift_figure({"D_hc": rows})):
        means = fig.axes[0].containers[0].lines[0]
        xs = list(means.get_xdata())
        assert len(xs) == 3 and math.isnan(xs[1]), xs
        assert xs[0] == pytest.approx(2.125) and xs[2] == pytest.approx(2.625)
        plt.close(fig)


def test_the_encoding_progress_bar_counts_to_the_ok_records_of_the_manifest(planted, tmp_path, capsys):
    import shutil

    from concrete_jungle.analysis.dataset_statistics import concretebatch_features
    from concrete_jungle.models import load_model
    from concrete_jungle.records import read_jsonl

    clip = load_model("cj-tiny", "none", seed=0)
    ok = sum(r["status"] == "ok" for r in read_jsonl(planted / "manifest.jsonl"))
    capsys.readouterr()
    concretebatch = concretebatch_features(clip, planted)[2]
    assert len(concretebatch) == ok and f"encode cb:   0%|          | 0/{ok} " in capsys.readouterr().err
    concretebatch_features(clip, planted, limit=5)
    assert "| 0/5 " in capsys.readouterr().err
    # an unfinished dataset of one finished shard: that shard's manifest tells
    unfinished = tmp_path / "cb"
    shutil.copytree(planted, unfinished)
    for path in [unfinished / "manifest.jsonl", unfinished / "summary.json", *unfinished.glob("shard-00000[12].tar"),
                 *(unfinished / "manifests").glob("shard-00000[12].*")]:
        path.unlink()
    first = sum(r["status"] == "ok" for r in read_jsonl(unfinished / "manifests" / "shard-000000.jsonl"))
    assert len(concretebatch_features(clip, unfinished, partial=True)[2]) == first < ok
    assert f"| 0/{first} " in capsys.readouterr().err


def test_caption_only_negatives_leave_out_the_image_quantities_and_records_of_k_negatives_use_the_first(
        tmp_path, scorers, capsys):
    from transformers import AutoImageProcessor, AutoModel

    from concrete_jungle.analysis.dataset_statistics import table1_markdown, word_edit_distance
    from concrete_jungle.concretebatch import iter_records
    from concrete_jungle.models import load_model
    from test_gallery import make_k_negative_batch

    data = make_k_negative_batch(tmp_path, "K")  # k1, k3: first negative without a picture; k2, k3: K > 1
    dino_path, roberta_path = scorers
    out = tmp_path / "report"
    args = ["analyze", str(data), "--model", "cj-tiny", "--pretrained", "none", "--out", str(out), "--dino-model",
            str(dino_path), "--bertscore-model", str(roberta_path), "--bertscore-layers", "2", "--no-rescale"]
    assert main(args) == 0
    printed = " ".join(capsys.readouterr().out.split())
    text = (out / "stats.json").read_text()
    stats = json.loads(text)
    pairs, summary = stats["pairs"]["K"], stats["datasets"]["K"]["summary"]
    assert "NaN" not in text  # a quantity left out is null

    clip = load_model("cj-tiny", "none", seed=0)
    processor, dino = AutoImageProcessor.from_pretrained(dino_path), AutoModel.from_pretrained(dino_path).eval()
    scale = clip.model.logit_scale.exp().item()
    image = lambda im: F.normalize(clip.model.encode_image(clip.preprocess(im)[None]), dim=-1)[0]  # noqa: E731
    caption = lambda c: F.normalize(clip.model.encode_text(clip.tokenizer([c])), dim=-1)[0]  # noqa: E731
    records = list(iter_records(data))
    with torch.no_grad():
        for r in records:
            got = pairs[r["meta"]["id"]]
            v, t, t2 = image(r["image"]), caption(r["caption"]), caption(r["negatives"][0]["caption"])
            # the text-side quantities of every record, from its first negative
            assert got["logit_gap"] == pytest.approx(scale * float(v @ t - v @ t2), abs=1e-4)
            assert got["i2t"] == bool(v @ t > v @ t2) and got["clip_l"] == pytest.approx(float(t @ t2), abs=1e-5)
            assert got["edit_distance"] == word_edit_distance(r["caption"], r["neg_caption"])
            assert isinstance(got["bertscore"], float) and got["negatives"] == len(r["negatives"])
            if r["neg_image"] is None:
                assert got["negative_picture"] == "none"
                assert got["t2i"] is None and got["clip_v"] is None and got["dino"] is None
            else:
                v2 = image(r["neg_image"])
                d1, d2 = (F.normalize(dino(**processor(images=[im], return_tensors="pt")).pooler_output, dim=-1)[0]
                          for im in (r["image"], r["neg_image"]))
                assert got["negative_picture"] == "own" and got["t2i"] == bool(v @ t > v2 @ t)
                assert got["clip_v"] == pytest.approx(float(v @ v2), abs=1e-5)
                assert got["dino"] == pytest.approx(float(d1 @ d2), abs=1e-5)
    pictured = [pairs[i] for i in ("k2", "k4")]
    assert (summary["pairs"], summary["no_picture_pairs"], summary["more_negatives_pairs"]) == (4, 2, 2)
    assert summary["clip_v"] == pytest.approx(sum(p["clip_v"] for p in pictured) / 2)
    assert summary["clip_l"] == pytest.approx(sum(p["clip_l"] for p in pairs.values()) / 4)
    report = " ".join((out / "report.md").read_text().split())
    for note in ("K: image quantities (T2I, image-image cosine, DINOScore) over 2 of 4 records: the others' negatives "
                 "have no picture; the text ones (I2T, the logit gap, text-text cosine, BERTScore, edit distance) "
                 "over all 4.",
                 "K: 2 of 4 records hold more than one negative; every statistic uses the first negative of each"):
        assert note in printed and note in report
    # again: the features (and DINO similarities, null where there is no picture) come from the cache alike
    assert main(args) == 0 and json.loads((out / "stats.json").read_text()) == stats

    # a dataset none of whose negatives has a picture has no image-side statistic at all
    only_captions = dict(summary, pairs=2, no_picture_pairs=2, more_negatives_pairs=0, t2i=None, clip_v=None,
                         dino=None)
    table = table1_markdown({"K": only_captions}, {"K": None})
    assert "| T2I acc. | n/a (no picture) |" in table and "| DINOScore | n/a (no picture) |" in table

    assert main(["analyze", "gradient-share", "--data", str(data), "--model", "cj-tiny", "--pretrained", "none",
                 "--batch-sizes", "2,4", "--batches", "2", "--out", str(tmp_path / "gs")]) == 0
    saved = json.loads((tmp_path / "gs" / "gradient_share.json").read_text())
    assert saved["negatives_without_picture"] == 2
    assert all(0 < share < 1 for curve in saved["curves"].values() for share in curve.values())
    assert "2 of 4 negatives have no picture" in " ".join(capsys.readouterr().out.split())


def test_analyze_reports_the_share_of_negatives_still_true_of_their_anchor_per_dataset_and_edit_kind(
        planted, tmp_path, capsys):
    from concrete_jungle.concretebatch import iter_records

    captions, images = make_dataset(tmp_path, 30)
    ruled = tmp_path / "ruled"
    assert main(plant_args(captions, images, ruled, "--editor", "plugin_example:CountingEditor",
                           "--scorer", "plugin_example:PixelChangeScorer", "--entailment", "pixel_change<=0.233")) == 0
    out = tmp_path / "analysis"
    assert main(["analyze", "datasets", str(ruled), str(planted), "--model", "cj-tiny", "--pretrained", "none",
                 "--out", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    stats = json.loads((out / "stats.json").read_text())
    report = (out / "report.md").read_text()
    expected = {}  # per edit kind (the planted keyword's category): true, false, unknown
    for r in iter_records(ruled):
        counts = expected.setdefault(r["meta"]["category"], {"true": 0, "false": 0, "unknown": 0})
        counts["true" if r["negatives"][0]["anchor_true_of_negative"] else "false"] += 1
    got = stats["datasets"]["ruled"]["entailment"]
    assert {k: {s: row[s] for s in ("true", "false", "unknown")} for k, row in got["by_kind"].items()} == expected
    n, true = sum(map(sum, (c.values() for c in expected.values()))), sum(c["true"] for c in expected.values())
    assert 0 < true < n and got["all"] == {"negatives": n, "true": true, "false": n - true, "unknown": 0,
                                           "share_true": true / n, "share_false": (n - true) / n, "share_unknown": 0.0}
    (how,) = got["deciders"]
    assert json.loads(how)["rule"] == "pixel_change<=0.233" and got["deciders"][how] == n
    assert f"| ruled | all | {n} | {true} | {n - true} | 0 | {true / n:.1%} |" in report
    # a dataset whose negatives no decider saw: every one unknown
    undecided = stats["datasets"]["cb"]["entailment"]["all"]
    assert undecided["unknown"] == undecided["negatives"] == 48 and undecided["share_true"] == 0.0
    assert "| cb | all | 48 | 0 | 0 | 48 | 0.0% |" in report and "## Negatives still true of their anchor" in report
    assert f"ruled: the anchor's caption is true of {true} of {n} negative pictures" in printed
