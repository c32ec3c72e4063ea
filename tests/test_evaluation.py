"""The evaluation suite on fixtures in the official formats, scored by a tiny random-init open_clip model: the
scores, the checks of the benchmark files and images, the embedding cache, and comparing results."""

import itertools
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import open_clip
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from benchmark_fixtures import (
    WRITERS,
    every_benchmark_writer,
    noise_image,
    random_features,
    write_image_folders,
    write_karpathy,
    write_retrieval,
    write_winoground,
)
from concrete_jungle.cli import main
from concrete_jungle.evaluation import load_data
from concrete_jungle.evaluation.benchmarks import linear_probe, retrieval, sugarcrepe, sugarcrepe_pp, winoground
from concrete_jungle.evaluation.checks import BenchmarkDataError
from concrete_jungle.evaluation.encoding import Encoder
from concrete_jungle.models import load_model, save_checkpoint, uses_quick_gelu


class Reference:
    """The straightforward loop: every image and caption encoded alone, item by item."""

    def __init__(self, clip):
        self.clip = clip

    @torch.no_grad()
    def image(self, path):
        with Image.open(path) as im:  # as the official SugarCrepe loop: the file as opened, into preprocess
            x = self.clip.preprocess(im)[None]
        return F.normalize(self.clip.model.encode_image(x), dim=-1)[0]

    @torch.no_grad()
    def text(self, caption):
        return F.normalize(self.clip.model.encode_text(self.clip.tokenizer([caption])), dim=-1)[0]


# the same check on the 7,511 items of the official files is benchmarks/eval_speed.py (it takes their path)
@pytest.mark.parametrize("subsets", [("swap_obj", "add_att"), sugarcrepe.SUBSETS])
def test_sugarcrepe_equals_the_per_item_reference_loop(data_root, clip, subsets):
    data = sugarcrepe.load(data_root / "sugarcrepe", data_root / "coco" / "val2017", subsets=subsets)
    result = sugarcrepe.evaluate(Encoder(clip, batch_size=37, progress=False), data)
    ref = Reference(clip)
    raw = {s: json.loads((data_root / "sugarcrepe" / f"{s}.json").read_text()) for s in subsets}
    for subset in subsets:
        expected = []
        for key, item in raw[subset].items():
            image = ref.image(data_root / "coco" / "val2017" / item["filename"])
            expected.append((key, bool(image @ ref.text(item["caption"]) > image @ ref.text(item["negative_caption"]))))
        answers = result["outcomes"]["series"][subset]
        assert list(zip(answers["keys"], map(bool, answers["values"]))) == expected  # in the file's key order
        assert answers["units"] == [f"val2017/{item['filename']}" for item in raw[subset].values()]
        assert result["metrics"][subset] == sum(f for _, f in expected) / len(expected)
        assert result["n"][subset] == len(raw[subset])


def test_sugarcrepe_ties_are_wrong_and_keys_need_not_be_contiguous(tmp_path, clip):
    (tmp_path / "img").mkdir()
    noise_image(tmp_path / "img" / "a.jpg", 1)
    items = {"0": {"filename": "a.jpg", "caption": "a dog on a sofa", "negative_caption": "a dog on a sofa"},
             "7": {"filename": "a.jpg", "caption": "a dog on a sofa", "negative_caption": "a sofa on a dog"},
             "31": {"filename": "a.jpg", "caption": "a red car", "negative_caption": "a red car"}}
    (tmp_path / "add_att.json").write_text(json.dumps(items))
    data = sugarcrepe.load(tmp_path, tmp_path / "img", subsets=("add_att",))
    result = sugarcrepe.evaluate(Encoder(clip, progress=False), data)
    answers = result["outcomes"]["series"]["add_att"]
    flags = dict(zip(answers["keys"], map(bool, answers["values"])))
    assert list(flags) == ["0", "7", "31"]
    assert flags["0"] is False and flags["31"] is False  # identical captions tie: counted wrong


def test_macro_averages():
    from concrete_jungle.outcomes import metric_values, series

    # subset k gets k of 10 items right: accuracies 0.1 ... 0.7
    answers = {s: series(range(10), range(10), [1] * (k + 1) + [0] * (9 - k)) for k, s in enumerate(sugarcrepe.SUBSETS)}
    m = metric_values({"series": answers, "metrics": sugarcrepe.recipes(list(sugarcrepe.SUBSETS))})
    assert m["ADD"] == pytest.approx(0.15) and m["REPLACE"] == pytest.approx(0.4) and m["SWAP"] == pytest.approx(0.65)
    assert m["M.Avg"] == pytest.approx(0.4)
    del answers["add_obj"]  # ADD needs both its subsets; M.Avg is over the subsets there
    m = metric_values({"series": answers, "metrics": sugarcrepe.recipes(list(answers))})
    assert "ADD" not in m and m["M.Avg"] == pytest.approx((0.1 + 0.3 + 0.4 + 0.5 + 0.6 + 0.7) / 6)
    answers["add_obj"] = series([], [], [])  # present, every item skipped: no score, no ADD
    m = metric_values({"series": answers, "metrics": sugarcrepe.recipes(list(answers))})
    assert m["add_obj"] is None and m["ADD"] is None
    assert m["M.Avg"] == pytest.approx((0.1 + 0.3 + 0.4 + 0.5 + 0.6 + 0.7) / 6)


def test_sugarcrepe_pp_equals_the_reference(data_root, clip):
    data = sugarcrepe_pp.load(data_root / "sugarcrepe_pp", data_root / "coco" / "val2017", subsets=("swap_obj",))
    metrics = sugarcrepe_pp.evaluate(Encoder(clip, progress=False), data)["metrics"]
    ref = Reference(clip)
    itt = tot = 0
    items = json.loads((data_root / "sugarcrepe_pp" / "swap_obj.json").read_text())
    for item in items:
        i = ref.image(data_root / "coco" / "val2017" / item["filename"])
        p1, p2, n = ref.text(item["caption"]), ref.text(item["caption2"]), ref.text(item["negative_caption"])
        itt += bool(i @ p1 > i @ n and i @ p2 > i @ n)
        tot += bool(p1 @ p2 > p1 @ n and p1 @ p2 > p2 @ n)
    assert metrics["swap_obj/ITT"] == itt / len(items) and metrics["swap_obj/TOT"] == tot / len(items)


def test_each_unique_image_and_caption_is_encoded_once_and_cached(data_root, clip, tmp_path):
    data = sugarcrepe.load(data_root / "sugarcrepe", data_root / "coco" / "val2017")
    enc = Encoder(clip, cache_dir=tmp_path / "cache", progress=False)
    first = sugarcrepe.evaluate(enc, data)
    items = [it for subset in data["items"].values() for it in subset]
    assert enc.encoded["images"] == len({it[1] for it in items}) < len(items)  # images shared across subsets
    assert enc.encoded["texts"] == len({it[2] for it in items} | {it[3] for it in items}) < 2 * len(items)
    again = Encoder(clip, cache_dir=tmp_path / "cache", progress=False)
    assert sugarcrepe.evaluate(again, data)["outcomes"] == first["outcomes"]
    assert again.encoded == {"images": 0, "texts": 0}  # read back from the cache


def test_nan_features_are_refused_naming_the_input_also_when_read_back_from_the_cache(tmp_path):
    """A model whose features are NaN would have every comparison decided by the tie rule; the encoder refuses
    them, naming the first input, whether computed now or read from its cache."""
    from safetensors.torch import save_file

    from concrete_jungle.evaluation.encoding import NonFiniteFeatures

    model = load_model("cj-tiny", "none", seed=0)
    with torch.no_grad():
        model.model.text_projection[0, 0] = float("nan")  # the weights were checked when loaded: broken since
        model.model.visual.proj[0, 0] = float("inf")
    noise_image(tmp_path / "a.jpg", 0)
    with pytest.raises(NonFiniteFeatures, match="text features are NaN or infinite for 2 of 2 inputs "
                                                r"\(first: 'a red cube'\).*--precision fp32"):
        Encoder(model, progress=False).texts(["a red cube", "a blue ball"])
    with pytest.raises(NonFiniteFeatures, match="image features .* for 1 of 1 inputs"):
        Encoder(model, progress=False).images([tmp_path / "a.jpg"])
    enc = Encoder(load_model("cj-tiny", "none", seed=0), cache_dir=tmp_path / "cache", progress=False)
    enc.texts(["a red cube"])
    cached = next((tmp_path / "cache").rglob("texts-*.safetensors"))
    save_file({"embeddings": torch.full((1, 4), float("nan"))}, str(cached))
    with pytest.raises(NonFiniteFeatures, match="read from the cache"):
        Encoder(model, cache_dir=tmp_path / "cache", progress=False).texts(["a red cube"])


def test_missing_images_fail_before_the_model_or_are_counted(tmp_path, capsys):
    (tmp_path / "sugarcrepe").mkdir()
    (tmp_path / "coco" / "val2017").mkdir(parents=True)
    items = {"0": {"filename": "x.jpg", "caption": "a", "negative_caption": "b"},
             "1": {"filename": "y.jpg", "caption": "c", "negative_caption": "d"}}
    for s in sugarcrepe.SUBSETS:
        (tmp_path / "sugarcrepe" / f"{s}.json").write_text(json.dumps(items))
    noise_image(tmp_path / "coco" / "val2017" / "x.jpg", 0)
    (tmp_path / "coco" / "val2017" / "y.jpg").write_bytes(b"garbage")
    args = ["eval", "--data-root", str(tmp_path), "--model", "cj-tiny", "--pretrained", "none",
            "--out", str(tmp_path / "r")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # stopped before the model, nothing written
    assert "y.jpg is unreadable" in err and "expected layout" in err
    with pytest.raises(BenchmarkDataError, match="nope holds no subset files"):
        sugarcrepe.load(tmp_path / "nope", tmp_path / "coco" / "val2017")
    data = sugarcrepe.load(tmp_path / "sugarcrepe", tmp_path / "coco" / "val2017", skip_missing=True)
    assert data["skipped"]["add_att"] == 1 and len(data["items"]["add_att"]) == 1


def test_winoground_scores(tmp_path, clip):
    rows = write_winoground(tmp_path, "a dog {} on a cat", "a cat {} on a dog")
    metrics = winoground.evaluate(Encoder(clip, progress=False), winoground.load(tmp_path))["metrics"]
    ref = Reference(clip)
    text = image = group = 0
    for r in rows:
        i0, i1 = (ref.image(tmp_path / "images" / f"{r[k]}.png") for k in ("image_0", "image_1"))
        c0, c1 = ref.text(r["caption_0"]), ref.text(r["caption_1"])
        t = bool(c0 @ i0 > c1 @ i0 and c1 @ i1 > c0 @ i1)
        m = bool(c0 @ i0 > c0 @ i1 and c1 @ i1 > c1 @ i0)
        text, image, group = text + t, image + m, group + (t and m)
    assert (metrics["text"], metrics["image"], metrics["group"]) == (text / 6, image / 6, group / 6)
    assert {"Object/text", "Relation/group"} <= set(metrics)


def test_retrieval_recall_equals_brute_force(tmp_path, clip):
    images = []
    for i in range(8):
        noise_image(tmp_path / f"{i}.jpg", i)
        images.append({"filename": f"{i}.jpg", "split": "test" if i < 6 else "train",
                       "sentences": [{"raw": f"a photo number {i}"}, {"raw": f"picture {i} of things"}]})
    (tmp_path / "dataset_flickr30k.json").write_text(json.dumps({"images": images}))
    data = retrieval.load(tmp_path / "dataset_flickr30k.json", tmp_path)
    metrics = retrieval.evaluate(Encoder(clip, progress=False), data)["metrics"]
    ref = Reference(clip)
    img = torch.stack([ref.image(tmp_path / f"{i}.jpg") for i in range(6)])
    txt = torch.stack([ref.text(s["raw"]) for im in images[:6] for s in im["sentences"]])
    sim = img @ txt.T
    for k in (1, 5):
        i2t = np.mean([bool({2 * i, 2 * i + 1} & set(sim[i].topk(k).indices.tolist())) for i in range(6)])
        t2i = np.mean([t // 2 in sim[:, t].topk(k).indices.tolist() for t in range(12)])
        assert metrics[f"text_retrieval_recall@{k}"] == pytest.approx(i2t)
        assert metrics[f"image_retrieval_recall@{k}"] == pytest.approx(t2i)
    assert metrics["text_retrieval_recall@10"] == 1.0  # 6 images: every caption is in the top 10


def test_linear_probes(tmp_path, clip):
    colours = {"red": (220, 30, 30), "blue": (30, 30, 220), "green": (30, 200, 30)}
    rng = np.random.default_rng(0)
    for split, n in (("train", 12), ("val", 4)):
        for name, rgb in colours.items():
            (tmp_path / "imagenet" / split / name).mkdir(parents=True)
            for i in range(n):
                arr = np.clip(np.array(rgb) + rng.integers(-20, 20, (32, 32, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(arr).save(tmp_path / "imagenet" / split / name / f"{i}.png")
    data = linear_probe.load_image_folder(tmp_path / "imagenet")
    metrics = linear_probe.evaluate(Encoder(clip, progress=False), data, epochs=50, lr=1e-2)["metrics"]
    assert metrics["top1"] >= 2 / 3 and metrics["top5"] == 1.0  # 3 classes: top-5 holds them all
    assert linear_probe.average_precision(torch.tensor([0.9, 0.8, 0.1]), torch.tensor([1.0, 0.0, 1.0])) == \
        pytest.approx((1 / 1 + 2 / 3) / 2)


def test_checkpoint_of_vit_b_32_with_quickgelu_is_recreated_with_quickgelu(tmp_path):
    torch.manual_seed(0)
    # what open_clip builds for ViT-B-32 with OpenAI weights
    model = open_clip.create_model("ViT-B-32", force_quick_gelu=True).eval()
    assert uses_quick_gelu(model)
    config = {"model_cfg": open_clip.get_model_config("ViT-B-32"), "preprocess_cfg": {}}
    path = save_checkpoint(tmp_path / "ckpt", model, config)
    assert json.loads((path / "open_clip_config.json").read_text())["model_cfg"]["quick_gelu"] is True
    again = load_model(checkpoint=path)
    plain, _, _ = open_clip.create_model_and_transforms(f"local-dir:{path}")  # plain open_clip opens it too
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        ref = model.encode_image(x)
        assert uses_quick_gelu(again.model) and uses_quick_gelu(plain)
        torch.testing.assert_close(again.model.encode_image(x), ref)
        torch.testing.assert_close(plain.eval().encode_image(x), ref)


def test_eval_command_writes_json_markdown_and_compares(data_root, tmp_path, capsys):
    args = ["eval", "--benchmarks", "sugarcrepe", "--data-root", str(data_root), "--model", "cj-tiny",
            "--pretrained", "none", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--seed", "1", "--out", str(tmp_path / "b")]) == 0
    a = json.loads((tmp_path / "a" / "sugarcrepe.json").read_text())
    validity = {"all items (micro)"} | {f"{s}/bow_{part}" for s in ("swap_att", "swap_obj")
                                         for part in ("identical", "differs")}  # docs/method.md §7
    assert set(sugarcrepe.SUBSETS) | {"ADD", "REPLACE", "SWAP", "M.Avg"} | validity == set(a["metrics"])
    assert a["model"] == {"name": "cj-tiny", "pretrained": "none", "seed": 0}
    assert "| M.Avg |" in (tmp_path / "a" / "results.md").read_text()
    capsys.readouterr()
    assert main(["eval", "--compare", str(tmp_path / "a" / "sugarcrepe.json"),
                 str(tmp_path / "b" / "sugarcrepe.json")]) == 0
    assert "M.Avg" in capsys.readouterr().out
    assert main(["eval", "--data-root", str(data_root), "--model", "ViT-B-32", "--pretrained", "nope"]) == 2
    assert "pretrained tag 'nope' does not exist" in capsys.readouterr().err


@pytest.mark.processes
def test_eval_compare_through_a_pipe_prints_every_metric_whole_on_a_line_and_writes_the_table(data_root, tmp_path):
    """``eval --compare a.json b.json | cat``: not a terminal, so the table is printed as Markdown, each metric's row
    whole on one line with the files' names whole (rich laid it out at 80 columns: ``r0/sugar…``, ``replace_…``,
    intervals wrapped onto second lines); with --compare-json the same table is written beside the JSON."""
    runs = [tmp_path / f"a-run-with-a-long-and-telling-name-seed-{seed}" for seed in (0, 1)]
    for seed, out in enumerate(runs):
        assert main(["eval", "--benchmarks", "sugarcrepe", "--data-root", str(data_root), "--model", "cj-tiny",
                     "--pretrained", "none", "--seed", str(seed), "--no-progress", "--out", str(out)]) == 0
    files = [str(out / "sugarcrepe.json") for out in runs]
    command = [sys.executable, "-m", "concrete_jungle.cli", "eval", "--compare", *files, "--resamples", "50",
               "--compare-json", str(tmp_path / "cmp.json")]
    piped = subprocess.run(f"{shlex.join(command)} | cat", shell=True, capture_output=True, text=True, check=True)
    lines = piped.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| metric |"))
    assert all(f" {out.name}/sugarcrepe.json " in header for out in runs)
    metrics = json.loads((runs[0] / "sugarcrepe.json").read_text())["metrics"]
    for metric in metrics:
        rows = [line for line in lines if line.startswith(f"| {metric} |")]
        assert len(rows) == 1 and rows[0].endswith("|") and rows[0].count(" | ") == len(header.split(" | ")) - 1
    assert len([line for line in lines if line.startswith("| ")]) == len(metrics) + 2  # header, rule; none wrapped
    assert (tmp_path / "cmp.md").read_text().strip() == piped.stdout.strip()
    assert json.loads((tmp_path / "cmp.json").read_text())["benchmark"] == "sugarcrepe"


def test_eval_out_of_another_model_is_refused_naming_it_and_cleared_with_overwrite(data_root, tmp_path, capsys):
    root = tmp_path / "root"  # one subset of each benchmark: a few items, encoded in well under a second
    shutil.copytree(data_root / "coco", root / "coco")
    for benchmark in ("sugarcrepe", "sugarcrepe_pp"):
        (root / benchmark).mkdir()
        shutil.copy(data_root / benchmark / "swap_obj.json", root / benchmark / "swap_obj.json")
    out = tmp_path / "results"
    args = ["eval", "--data-root", str(root), "--model", "cj-tiny", "--pretrained", "none", "--no-progress",
            "--out", str(out)]
    assert main([*args, "--benchmarks", "sugarcrepe,sugarcrepe_pp"]) == 0
    first = (out / "sugarcrepe.json").read_text()
    capsys.readouterr()
    assert main([*args, "--benchmarks", "sugarcrepe", "--seed", "1"]) == 2  # another model
    err = " ".join(capsys.readouterr().err.split())
    assert (f"--out {out} holds the results of another model, cj-tiny (random init, seed 0) (sugarcrepe.json, "
            "sugarcrepe_pp.json); pass --overwrite") in err
    assert (out / "sugarcrepe.json").read_text() == first and (out / "sugarcrepe_pp.json").is_file()
    assert main([*args, "--benchmarks", "sugarcrepe", "--seed", "1", "--overwrite"]) == 0
    assert sorted(p.name for p in out.glob("*.json")) == ["sugarcrepe.json", "summary.json"]  # seed 0's are gone
    assert json.loads((out / "sugarcrepe.json").read_text())["model"]["seed"] == 1
    # the same model again, on another benchmark: its first result stays, and the report gives both
    assert main([*args, "--benchmarks", "sugarcrepe_pp", "--seed", "1"]) == 0
    assert sorted(p.name for p in out.glob("*.json")) == ["sugarcrepe.json", "sugarcrepe_pp.json", "summary.json"]
    report = (out / "results.md").read_text()
    assert "## sugarcrepe\n" in report and "## sugarcrepe_pp\n" in report and "seed 0" not in report
    assert set(json.loads((out / "summary.json").read_text())["compositional"]["parts"]) == {
        "sugarcrepe", "sugarcrepe_pp"}
    capsys.readouterr()
    assert main([*args[:-1], str(out / "results.md"), "--benchmarks", "sugarcrepe"]) == 2
    err = capsys.readouterr().err
    assert f"--out {out / 'results.md'} is a file, not a folder" in " ".join(err.split()) and len(err.splitlines()) == 1


def test_palette_rgba_and_cmyk_images_are_preprocessed_as_the_official_loop_does(tmp_path, clip):
    rng = np.random.default_rng(3)
    rgb = Image.fromarray(rng.integers(0, 255, (37, 53, 3), dtype=np.uint8))
    paths = {"palette": tmp_path / "p.png", "rgba": tmp_path / "a.png", "cmyk": tmp_path / "c.jpg"}
    rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=16).save(paths["palette"])
    rgba = rgb.convert("RGBA")
    rgba.putalpha(Image.fromarray(rng.integers(0, 255, (37, 53), dtype=np.uint8)))
    rgba.save(paths["rgba"])
    rgb.convert("CMYK").save(paths["cmyk"])
    ours = Encoder(clip, progress=False).images(list(paths.values()))
    ref = Reference(clip)
    for row, path in zip(ours, paths.values()):
        torch.testing.assert_close(row, ref.image(path), rtol=0, atol=1e-6)
    for path in (paths["palette"], paths["rgba"]):  # for these, converting first really gives other pixels
        with Image.open(path) as im:
            assert not torch.equal(clip.preprocess(im), clip.preprocess(im.convert("RGB")))


def test_coco_probe_reads_multi_labels_and_scores_map(tmp_path, clip):
    colours = {1: (220, 30, 30), 2: (30, 30, 220), 3: (30, 200, 30)}
    rng = np.random.default_rng(0)
    truth = {}
    for split, n in (("train", 18), ("val", 6)):
        (tmp_path / "coco" / f"{split}2017").mkdir(parents=True)
        images, annotations = [], []
        for i in range(n):
            cats = sorted({1 + i % 3, 1 + (i // 3) % 3})  # one or two categories per image
            arr = np.zeros((32, 32, 3), np.uint8)
            for k, c in enumerate(cats):
                arr[:, 16 * k: 16 * (k + 1)] = colours[c]
            arr = np.clip(arr + rng.integers(-10, 10, arr.shape), 0, 255).astype(np.uint8)
            Image.fromarray(arr).save(tmp_path / "coco" / f"{split}2017" / f"{i:03d}.jpg")
            images.append({"id": 100 * (split == "val") + i, "file_name": f"{i:03d}.jpg"})
            annotations += [{"id": len(annotations), "image_id": images[-1]["id"], "category_id": c} for c in cats]
            truth[(split, f"{i:03d}.jpg")] = [1.0 if c in cats else 0.0 for c in (1, 2, 3)]
        (tmp_path / "coco" / "annotations").mkdir(exist_ok=True)
        (tmp_path / "coco" / "annotations" / f"instances_{split}2017.json").write_text(json.dumps(
            {"images": images, "annotations": annotations, "categories": [{"id": c} for c in (3, 1, 2)]}))
    data = linear_probe.load_coco(tmp_path / "coco")
    assert data["classes"] == [1, 2, 3] and data["skipped"] == 0
    for split in ("train", "val"):
        paths, labels = data["splits"][split]
        assert [truth[(split, p.name)] for p in paths] == labels.tolist()
    metrics = linear_probe.evaluate(Encoder(clip, progress=False), data, epochs=50, lr=1e-2)["metrics"]
    assert 0.0 < metrics["mAP"] <= 1.0


def test_winoground_export_from_the_hub_layout_scores_like_the_images_themselves(tmp_path, clip, monkeypatch):
    import datasets

    rng = np.random.default_rng(5)
    pictures = [Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)) for _ in range(6)]
    hub = datasets.Dataset.from_dict({  # the columns of facebook/winoground
        "id": [0, 1, 2], "image_0": pictures[0::2], "image_1": pictures[1::2],
        "caption_0": ["a dog on a cat", "a red cup", "a tree by a house"],
        "caption_1": ["a cat on a dog", "a cup, red", "a house by a tree"],
        "collapsed_tag": ["Object", "Relation", "Both"]}).cast_column("image_0", datasets.Image()).cast_column(
        "image_1", datasets.Image())
    asked = {}

    def load_dataset(name, split, token=None):  # the gated hub download is the process boundary
        asked.update(name=name, split=split)
        return hub

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    root = winoground.export_hf(tmp_path / "winoground")
    assert asked == {"name": "facebook/winoground", "split": "test"}
    data = winoground.load(root)
    assert [it["caption_1"] for it in data["items"]] == hub["caption_1"]
    metrics = winoground.evaluate(Encoder(clip, progress=False), data)["metrics"]
    ref = Reference(clip)
    text = sum(bool(ref.text(c0) @ ref.image(root / "images" / f"ex{i}_img0.png") >
                    ref.text(c1) @ ref.image(root / "images" / f"ex{i}_img0.png") and
                    ref.text(c1) @ ref.image(root / "images" / f"ex{i}_img1.png") >
                    ref.text(c0) @ ref.image(root / "images" / f"ex{i}_img1.png"))
               for i, (c0, c1) in enumerate(zip(hub["caption_0"], hub["caption_1"])))
    assert metrics["text"] == text / 3 and {"Object/group", "Both/text"} <= set(metrics)


def test_vtab_runs_on_the_cpu_with_our_probe_and_names_missing_tasks(tmp_path, capsys):
    colours = {"red": (220, 30, 30), "blue": (30, 30, 220)}
    rng = np.random.default_rng(0)
    for task in ("eurosat", "dtd"):
        for split, n in (("train", 10), ("test", 4)):
            for name, rgb in colours.items():
                folder = tmp_path / "vtab" / task / split / name
                folder.mkdir(parents=True)
                for i in range(n):
                    arr = np.clip(np.array(rgb) + rng.integers(-20, 20, (24, 24, 3)), 0, 255).astype(np.uint8)
                    Image.fromarray(arr).save(folder / f"{i}.png")
    args = ["eval", "--benchmarks", "vtab", "--data-root", str(tmp_path), "--model", "cj-tiny", "--pretrained",
            "none", "--device", "cpu", "--no-progress", "--out", str(tmp_path / "r")]
    assert main(args) == 2  # 17 of the 19 tasks are absent: said before any model loads
    assert "VTAB tasks missing" in capsys.readouterr().err and not (tmp_path / "r").exists()
    assert main([*args, "--skip-missing"]) == 0
    result = json.loads((tmp_path / "r" / "vtab.json").read_text())
    assert set(result["metrics"]) == {"eurosat", "dtd", "M.Avg"} and result["skipped"] == 17
    assert result["n"] == {"eurosat": 8, "dtd": 8} and all(0 <= v <= 1 for v in result["metrics"].values())


def copy_root(data_root, tmp_path):
    import shutil

    root = tmp_path / "root"
    shutil.copytree(data_root, root)
    return root


def test_a_duplicate_key_in_a_sugarcrepe_file_is_an_error_not_a_lost_item(data_root, tmp_path, capsys):
    root = copy_root(data_root, tmp_path)
    path = root / "sugarcrepe" / "add_att.json"
    items = json.loads(path.read_text())
    key, item = next(iter(items.items()))
    text = path.read_text().rstrip()[:-1] + f', "{key}": ' + json.dumps(item) + "}"
    path.write_text(text)
    assert main(["eval", "--data-root", str(root), "--check"]) == 2
    assert f"add_att.json: key '{key}' appears twice" in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("content, message", [
    ({"0": {"filename": "a.jpg", "caption": "x"}}, "item '0' has no text in negative_caption"),
    ({"0": "not an item"}, "item '0' has no text in filename, caption, negative_caption"),
    ({}, "holds no items"),
    ([{"filename": "a.jpg"}], "SugarCrepe files are a dict keyed by item index"),
])
def test_malformed_and_empty_subset_files_are_clear_errors(data_root, tmp_path, capsys, content, message):
    root = copy_root(data_root, tmp_path)
    (root / "sugarcrepe" / "swap_obj.json").write_text(json.dumps(content))
    assert main(["eval", "--data-root", str(root), "--check"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "swap_obj.json" in err and message in err and "Traceback" not in err


def test_a_subset_whose_every_image_is_missing_is_null_in_json_never_nan(data_root, tmp_path):
    root = copy_root(data_root, tmp_path)
    (root / "sugarcrepe" / "mine.json").write_text(json.dumps({"0": {"filename": "gone.jpg", "caption": "a dog",
                                                                     "negative_caption": "a cat"}}))
    out = tmp_path / "r"
    assert main(["eval", "--data-root", str(root), "--model", "cj-tiny", "--pretrained", "none", "--skip-missing",
                 "--out", str(out), "--no-progress"]) == 0
    text = (out / "sugarcrepe.json").read_text()
    assert "NaN" not in text
    result = json.loads(text)
    assert result["n"]["mine"] == 0 and result["skipped"]["mine"] == 1 and result["metrics"]["mine"] is None
    official = [result["metrics"][s] for s in result["n"] if s != "mine"]
    assert result["metrics"]["M.Avg"] == pytest.approx(sum(official) / len(official))


def test_eval_check_decodes_every_image_and_the_run_skips_what_it_counted(data_root, tmp_path, capsys):
    root = copy_root(data_root, tmp_path)
    victim = sorted((root / "coco" / "val2017").glob("*.jpg"))[0]
    victim.write_bytes(victim.read_bytes()[:200])  # a truncated JPEG: its header still reads
    assert main(["eval", "--data-root", str(root), "--check"]) == 2
    assert f"image {victim} is unreadable" in " ".join(capsys.readouterr().err.split())
    assert main(["eval", "--data-root", str(root), "--check", "--skip-missing"]) == 0
    assert main(["eval", "--data-root", str(root), "--model", "cj-tiny", "--pretrained", "none", "--skip-missing",
                 "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    result = json.loads((tmp_path / "r" / "sugarcrepe.json").read_text())
    assert sum(result["skipped"].values()) >= 1


def test_eval_in_bf16_on_the_cpu_runs_and_keeps_its_own_cache(data_root, tmp_path):
    runs = {}
    for precision in ("bf16", "fp32"):
        out = tmp_path / precision
        assert main(["eval", "--data-root", str(data_root), "--model", "cj-tiny", "--pretrained", "none",
                     "--precision", precision, "--cache-dir", str(tmp_path / "cache"), "--out", str(out),
                     "--no-progress"]) == 0
        runs[precision] = json.loads((out / "sugarcrepe.json").read_text())
    assert runs["bf16"]["model_hash"] != runs["fp32"]["model_hash"]
    assert len(list((tmp_path / "cache").iterdir())) == 2  # one embedding cache per precision


def test_compare_names_columns_by_file_and_lists_model_and_items(run, data_root, tmp_path, capsys):
    for side in ("a", "b"):
        assert main(["eval", "--data-root", str(data_root), "--checkpoint", str(run), "--out",
                     str(tmp_path / side), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert f"written: {tmp_path / 'a' / 'results.md'}" in " ".join(printed.split())
    result = json.loads((tmp_path / "a" / "sugarcrepe.json").read_text())
    assert result["items"] == sum(result["n"].values()) > 0
    from concrete_jungle.evaluation.report import compare, compare_markdown

    table = compare_markdown(compare([tmp_path / "a" / "sugarcrepe.json", tmp_path / "b" / "sugarcrepe.json"],
                                     resamples=50))
    header = table.splitlines()[0]
    assert "a/sugarcrepe.json" in header and "b/sugarcrepe.json" in header and result["model_hash"] not in header
    assert f"items {result['items']}" in table and str(run / "checkpoints") in table


def test_sugarcrepe_evaluates_the_subset_files_that_are_there(data_root, tmp_path, capsys):
    from concrete_jungle.evaluation.benchmarks import sugarcrepe

    root = tmp_path / "root"
    shutil.copytree(data_root / "coco", root / "coco")
    (root / "sugarcrepe").mkdir()
    for name in ("swap_obj.json", "add_att.json", "replace_rel.json"):
        shutil.copy(data_root / "sugarcrepe" / name, root / "sugarcrepe" / name)
    mine = json.loads((data_root / "sugarcrepe" / "add_obj.json").read_text())
    (root / "sugarcrepe" / "my_subset.json").write_text(json.dumps(mine))
    assert main(["eval", "--data-root", str(root), "--check", "--skip-missing"]) == 0
    data = sugarcrepe.load(root / "sugarcrepe", root / "coco" / "val2017")
    assert list(data["items"]) == ["add_att", "replace_rel", "swap_obj", "my_subset"]  # official order, then others
    from concrete_jungle.outcomes import metric_values, series

    accuracy = {"add_att": 5, "replace_rel": 7, "swap_obj": 9, "my_subset": 1}  # of 10
    answers = {s: series(range(10), range(10), [1] * k + [0] * (10 - k)) for s, k in accuracy.items()}
    scores = metric_values({"series": answers, "metrics": sugarcrepe.recipes(list(answers))})
    assert scores["M.Avg"] == pytest.approx(0.55) and "ADD" not in scores  # ADD needs both of its subsets
    with pytest.raises(ValueError, match="holds no subset files"):
        sugarcrepe.load(tmp_path / "empty", root / "coco" / "val2017")


def test_compare_refuses_results_computed_on_other_benchmark_files(data_root, tmp_path, capsys):
    root = copy_root(data_root, tmp_path)
    shutil.copytree(root, tmp_path / "elsewhere" / "root")
    other = tmp_path / "other"
    shutil.copytree(root, other)
    path = other / "sugarcrepe" / "add_att.json"
    items = json.loads(path.read_text())
    for item in items.values():  # other negatives: the same keys, the same images
        item["negative_caption"] = "a purple " + item["negative_caption"]
    path.write_text(json.dumps(items))
    for side, data in (("a", root), ("same", tmp_path / "elsewhere" / "root"), ("b", other)):
        assert main(["eval", "--data-root", str(data), "--model", "cj-tiny", "--pretrained", "none", "--no-progress",
                     "--out", str(tmp_path / side)]) == 0
    result = {side: json.loads((tmp_path / side / "sugarcrepe.json").read_text()) for side in ("a", "same", "b")}
    digest = {side: r["benchmark_files_sha256"] for side, r in result.items()}
    assert digest["a"] == digest["same"] != digest["b"]  # the files, not the data root's place
    assert result["a"]["outcomes"]["series"]["add_att"]["keys"] == result["b"]["outcomes"]["series"]["add_att"]["keys"]
    assert f"`{digest['a']}`" in (tmp_path / "a" / "results.md").read_text()
    capsys.readouterr()
    assert main(["eval", "--compare", str(tmp_path / "a" / "sugarcrepe.json"), str(tmp_path / "b" / "sugarcrepe.json"),
                 "--resamples", "20"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"b/sugarcrepe.json and a/sugarcrepe.json were computed on different sugarcrepe files (benchmark files " \
           f"sha256 {digest['b']} against {digest['a']})" in err
    assert main(["eval", "--compare", str(tmp_path / "a" / "sugarcrepe.json"),
                 str(tmp_path / "same" / "sugarcrepe.json"), "--resamples", "20"]) == 0
    # a result written before results carried the digest: compared on its keys and images, with a note
    old = result["b"]
    del old["benchmark_files_sha256"]
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "sugarcrepe.json").write_text(json.dumps(old))
    capsys.readouterr()
    assert main(["eval", "--compare", str(tmp_path / "a" / "sugarcrepe.json"),
                 str(tmp_path / "old" / "sugarcrepe.json"), "--resamples", "20"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Not confirmed on the same benchmark files: old/sugarcrepe.json (written before results carried the " \
           "digest of their benchmark files)" in out


def test_an_image_listed_twice_in_a_retrieval_split_is_one_image_with_the_captions_of_both(tmp_path, clip, capsys):
    (tmp_path / "flickr30k" / "images").mkdir(parents=True)
    images = []
    for i in range(5):
        noise_image(tmp_path / "flickr30k" / "images" / f"{i}.jpg", 700 + i)
        images.append({"filename": f"{i}.jpg", "split": "test",
                       "sentences": [{"raw": f"a photo number {i}"}, {"raw": f"picture {i} of things"}]})
    merged = json.loads(json.dumps(images))
    merged[2]["sentences"].append({"raw": "the third picture again"})
    twice = images + [{"filename": "2.jpg", "split": "test", "sentences": [{"raw": "the third picture again"}]}]
    write_karpathy(tmp_path / "flickr30k" / "dataset_flickr30k.json", twice)
    write_karpathy(tmp_path / "merged.json", merged)
    data = retrieval.load(tmp_path / "flickr30k" / "dataset_flickr30k.json", tmp_path / "flickr30k" / "images")
    assert [p.name for p, _ in data["items"]] == [f"{i}.jpg" for i in range(5)]
    assert data["notes"] == ["images/2.jpg is listed 2 times in the test split of dataset_flickr30k.json (images[2], "
                             "images[5]): one image with the captions of each listing, as clip_benchmark reads a split"]
    encoder = Encoder(clip, progress=False)
    result = retrieval.evaluate(encoder, data)
    expected = retrieval.evaluate(encoder, retrieval.load(tmp_path / "merged.json", tmp_path / "flickr30k" / "images"))
    assert result["n"] == {"images": 5, "texts": 11} and result["metrics"] == expected["metrics"]
    assert result["outcomes"] == expected["outcomes"]  # not a tied distractor of itself
    assert main(["eval", "--benchmarks", "retrieval", "--data-root", str(tmp_path), "--check"]) == 0
    assert "images/2.jpg is listed 2 times" in " ".join(capsys.readouterr().out.split())


def clip_benchmark_retrieval(model, image_dir, captions: dict[str, list[str]], tmp_path) -> dict:
    """clip_benchmark's retrieval of ``captions`` (file name -> its captions), read by its own Flickr reader (which
    converts each picture to RGB): its metrics at K = 1, 5, 10, and per caption and per picture the hits at each K by
    its ``recall_at_k`` on the scores its ``evaluate`` computes (texts x images)."""
    from clip_benchmark.datasets.builder import image_captions_collate_fn
    from clip_benchmark.datasets.flickr import Flickr
    from clip_benchmark.metrics import zeroshot_retrieval

    ann = tmp_path / "clip_benchmark_captions.txt"
    ann.write_text("image,caption\n" + "".join(f"{name},{c}\n" for name, caps in captions.items() for c in caps))
    loader = torch.utils.data.DataLoader(Flickr(str(image_dir), str(ann), transform=model.preprocess), batch_size=4,
                                         collate_fn=image_captions_collate_fn)
    metrics = zeroshot_retrieval.evaluate(model.model, loader, model.tokenizer, "cpu", amp=False,
                                          recall_k_list=[1, 5, 10])
    images, texts, owner = [], [], []
    with torch.no_grad():
        for pixels, caps in loader:
            owner += [sum(map(len, images)) + i for i, cs in enumerate(caps) for _ in cs]
            images.append(F.normalize(model.model.encode_image(pixels), dim=-1))
            texts.append(F.normalize(model.model.encode_text(model.tokenizer([c for cs in caps for c in cs])), dim=-1))
    scores = torch.cat(texts) @ torch.cat(images).t()
    positive = torch.zeros_like(scores, dtype=torch.bool)
    positive[torch.arange(len(scores)), owner] = True
    hits = {k: {"t2i": (zeroshot_retrieval.recall_at_k(scores, positive, k) > 0).tolist(),
                "i2t": (zeroshot_retrieval.recall_at_k(scores.T, positive.T, k) > 0).tolist()} for k in (1, 5, 10)}
    return {"metrics": metrics, "hits": hits}


def assert_retrieval_is_clip_benchmark_s(result, official):
    series = result["outcomes"]["series"]
    for k in (1, 5, 10):
        assert [r < k for r in series["t2i_rank"]["values"]] == official["hits"][k]["t2i"]
        assert [r < k for r in series["i2t_rank"]["values"]] == official["hits"][k]["i2t"]
        for kind in ("image", "text"):
            name = f"{kind}_retrieval_recall@{k}"
            assert result["metrics"][name] == pytest.approx(official["metrics"][name])


def write_flickr(root, pictures: dict) -> dict[str, list[str]]:
    """A Karpathy split of the given pictures (file name -> picture to copy), two captions each."""
    (root / "flickr30k" / "images").mkdir(parents=True, exist_ok=True)
    captions = {}
    for n, (name, picture) in enumerate(pictures.items()):
        shutil.copy(picture, root / "flickr30k" / "images" / name)
        captions[name] = [f"a photo number {n}", f"picture {n} of things"]
    write_karpathy(root / "flickr30k" / "dataset_flickr30k.json", [
        {"filename": name, "split": "test", "sentences": [{"raw": c} for c in caps]}
        for name, caps in captions.items()])
    return captions


def test_retrieval_converts_every_picture_to_rgb_before_the_transform_as_clip_benchmark(tmp_path):
    """clip_benchmark's readers convert each picture to RGB before the transform; the old code passed it as opened to
    a transform that converts last, which gives other pixels for palette, RGBA, LA and 16-bit pictures. With a model
    whose features are a hash of the pixels, the old code's hits agreed with clip_benchmark's on 19 of the 24
    captions at K = 1 and 6 of the 12 pictures at K = 10 (image R@1 0.1250 against its 0.1667, text R@10 0.8333
    against 0.6667); now on every caption and picture at every K."""
    from benchmark_fixtures import odd_mode_pictures, random_features

    pictures = odd_mode_pictures(tmp_path / "odd", 1) + odd_mode_pictures(tmp_path / "odd", 2)
    for n in range(2):
        noise_image(tmp_path / "odd" / f"noise{n}.jpg", 900 + n)
        pictures.append(tmp_path / "odd" / f"noise{n}.jpg")
    # clip_benchmark's Flickr reader takes file names ending in .jpg; the pictures keep their formats
    captions = write_flickr(tmp_path, {f"{p.stem.replace('.', '-')}.jpg": p for p in pictures})
    model = random_features(5, rgb_after_resize=True)
    data = retrieval.load(tmp_path / "flickr30k" / "dataset_flickr30k.json", tmp_path / "flickr30k" / "images")
    result = retrieval.evaluate(Encoder(model, batch_size=5, progress=False), data)
    assert_retrieval_is_clip_benchmark_s(result, clip_benchmark_retrieval(model, tmp_path / "flickr30k" / "images",
                                                                          captions, tmp_path))


def test_retrieval_ranks_ties_as_clip_benchmark_s_topk_a_duplicated_picture_and_caption(tmp_path):
    """A picture listed under two names (the same pixels: the same features, equal scores for every caption) and a
    caption given to two pictures. torch.topk breaks such ties otherwise than the old code's argsort: the old hits
    differed from clip_benchmark's for 2 of the 24 captions at K = 1 (one each way) and 1 of the 12 pictures at K =
    10 (text R@10 0.6667 against its 0.5833); now they agree on every caption and picture at every K."""
    from benchmark_fixtures import random_features

    for n in range(11):  # clip_benchmark's topk(10) over the pictures needs 10 of them
        noise_image(tmp_path / f"{n}.png", 950 + n)
    pictures = {"p0.jpg": tmp_path / "0.png", "p0-again.jpg": tmp_path / "0.png"} | {
        f"p{n}.jpg": tmp_path / f"{n}.png" for n in range(1, 11)}
    captions = write_flickr(tmp_path, pictures)
    path = tmp_path / "flickr30k" / "dataset_flickr30k.json"
    split = json.loads(path.read_text())
    at = [image["filename"] for image in split["images"]].index("p3.jpg")
    split["images"][at]["sentences"][1]["raw"] = captions["p3.jpg"][1] = captions["p1.jpg"][1]  # a caption twice
    path.write_text(json.dumps(split))
    model = random_features(1, rgb_after_resize=True)  # seed 1: ties that topk and argsort break apart
    result = retrieval.evaluate(Encoder(model, progress=False), retrieval.load(path, tmp_path / "flickr30k" / "images"))
    assert_retrieval_is_clip_benchmark_s(result, clip_benchmark_retrieval(model, tmp_path / "flickr30k" / "images",
                                                                          captions, tmp_path))


def edit_lines(path, change):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    change(rows)
    path.write_text("\n".join(json.dumps(r) for r in rows))


def edit_json(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


FLICKR = "flickr30k/dataset_flickr30k.json"
VAL_ANNOTATIONS = "coco/annotations/instances_val2017.json"
# benchmark, file, how it is broken, what the error says after the file's name
MALFORMED = [
    ("winoground", "winoground/examples.jsonl", lambda rows: rows[1].update(caption_0=None),
     "line 2 has caption_0 null, not text"),
    ("winoground", "winoground/examples.jsonl", lambda rows: rows.__setitem__(1, [1, 2]),
     "line 2: [1, 2] is not an object"),
    ("winoground", "winoground/examples.jsonl", lambda rows: rows[2].update(id=0), "id 0 is on lines 1 and 3"),
    ("winoground", "winoground/examples.jsonl", lambda rows: rows[0].pop("image_1"), "line 1 has image_1 null"),
    ("winoground", "winoground/examples.jsonl", lambda rows: rows.clear(), "holds no examples"),
    ("retrieval", FLICKR, lambda d: d["images"][1]["sentences"][0].update(raw=None),
     "images[1] has sentences[0].raw null, not text"),
    ("retrieval", FLICKR, lambda d: d["images"][1].update(sentences=[]), "images[1] (1.jpg) has no sentences"),
    ("retrieval", FLICKR, lambda d: [im.update(split="train") for im in d["images"]],
     "has no image in the 'test' split"),
    ("retrieval", FLICKR, lambda d: d["images"].__setitem__(0, "0.jpg"), 'images[0] is "0.jpg", not an object'),
    ("retrieval", "flickr30k/images", lambda path: [p.unlink() for p in path.glob("*.jpg")],
     "every image of the 'test' split was skipped"),
    ("linear_probe", "imagenet/val", lambda path: write_image_folders(path.parent, ("val",), ("green",)),
     "has the class folder(s) ['green'] with images"),
    ("linear_probe", "imagenet/val", lambda path: [p.unlink() for p in path.rglob("*.png")],
     "holds no image in a class folder"),
    ("coco_probe", VAL_ANNOTATIONS, lambda d: d["annotations"][0].update(category_id=99),
     "annotations[0] has the category_id 99, which no entry of categories has"),
    ("coco_probe", VAL_ANNOTATIONS, lambda d: d["images"][0].pop("file_name"), "images[0] has no file_name"),
    ("vtab", "vtab/dtd", None, "has train/ but no test/"),
]


@pytest.mark.parametrize("name, file, change, message", MALFORMED,
                         ids=[f"{b}-{m.split(',')[0][:40]}" for b, _, _, m in MALFORMED])
def test_malformed_benchmark_files_fail_the_check_naming_file_and_item(tmp_path, capsys, name, file, change, message):
    WRITERS[name](tmp_path)
    path = tmp_path / file
    if path.suffix == ".jsonl":
        edit_lines(path, change)
    elif path.suffix == ".json":
        edit_json(path, change)
    elif change is not None:
        change(path)
    # the checkpoint named does not exist: the data's error comes first, and no model is needed to find it
    assert main(["eval", "--benchmarks", name, "--data-root", str(tmp_path), "--check", "--skip-missing",
                 "--checkpoint", str(tmp_path / "no-such-run")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert str(path) in err and message in err and "Traceback" not in err
    with pytest.raises(BenchmarkDataError, match=re.escape(message)):  # load(...) alone finds it too
        load_data(name, tmp_path, skip_missing=True)


def test_a_malformed_benchmark_file_stops_the_run_before_the_model_loads(tmp_path, capsys):
    WRITERS["winoground"](tmp_path)
    edit_lines(tmp_path / "winoground" / "examples.jsonl", lambda rows: rows[1].update(caption_1=None))
    assert main(["eval", "--benchmarks", "winoground", "--data-root", str(tmp_path), "--model", "cj-tiny",
                 "--pretrained", "none", "--no-progress", "--out", str(tmp_path / "r")]) == 2
    assert "line 2 has caption_1 null, not text" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "r").exists()  # stopped before the model: its output folder is made after it loads


# ------------------------------------------------------------------------------------------------ chance levels


@pytest.fixture(scope="module")
def compositional(data_root, tmp_path_factory):
    """Five compositional benchmarks on fixtures, loaded: SugarCrepe and SugarCrepe++ (every caption differs from
    its negative), Winoground, ARO (with a tie) and What'sUp (with a four-way tie of the right caption)."""
    from test_compositional_benchmarks import write_aro, write_whatsup

    root, other = tmp_path_factory.mktemp("compositional"), tmp_path_factory.mktemp("whatsup")
    shutil.copytree(data_root, root, dirs_exist_ok=True)
    write_winoground(root / "winoground", "a dog {} on a cat", "a cat {} on a dog")
    write_aro(root / "aro")
    write_whatsup(other / "whatsup", other / "coco" / "val2017")  # its own COCO pictures
    return {n: load_data(n, other if n == "whatsup" else root, False)
            for n in ("sugarcrepe", "sugarcrepe_pp", "winoground", "aro", "whatsup")}


def test_chance_levels_follow_each_benchmarks_items_and_tie_rule(compositional, tmp_path):
    from concrete_jungle import evaluation
    from concrete_jungle.evaluation import chance
    from concrete_jungle.evaluation.benchmarks import aro_order

    # a pick among k distinct options is right 1 time in k; options that read alike to a CLIP tokenizer (case and
    # the spaces around punctuation aside) are one option, and a tie goes to the option listed first
    assert chance.pick_chance(["a cup", "a mug", "a bowl"], 1) == pytest.approx(1 / 3)
    assert chance.pick_chance(["A dog, running", "a dog , running", "a cat"], 0) == 0.5
    assert chance.pick_chance(["A dog, running", "a dog , running", "a cat"], 1) == 0
    assert chance.below_chance(["a red car", "a car that is red"], "a blue car") == pytest.approx(1 / 3)
    assert chance.below_chance(["a red car", "A red car"], "a blue car") == 0.5  # the two positives read alike
    results = evaluation.run(Encoder(random_features(0), progress=False), list(compositional), compositional)
    levels = {name: r["chance"] for name, r in results.items()}
    assert levels["sugarcrepe"] == {"M.Avg": 0.5}  # the caption or its negative: one in two
    assert levels["sugarcrepe_pp"] == {"M.Avg/ITT": pytest.approx(1 / 3)}  # the negative last of three
    assert levels["winoground"] == {"group": pytest.approx(1 / 6)}  # s00 and s11 the largest two of four
    # ARO: item 0 of "on" is a tie, and a tie is wrong (the true caption is listed second); the 6 items of the
    # second attribute pair are below the official 25 and left out, as the metric leaves them out
    assert levels["aro"] == {"VG-Relation": None, "VG-Relation (all relations)": pytest.approx((7 / 8 * 0.5 + 1) / 3),
                             "VG-Attribution": 0.5}
    # What'sUp: item 0's four captions are one, and a tie goes to the right caption, listed first
    assert levels["whatsup"]["controlled_a"] == pytest.approx((1 + 7 / 4) / 8)
    assert levels["whatsup"]["coco_qa_two"] == 0.5 and levels["whatsup"]["vg_qa_one"] is None
    # ARO's order tasks: five options, but a one-word caption's four scrambles are the caption itself
    (tmp_path / "coco" / "val2014").mkdir(parents=True)
    noise_image(tmp_path / "coco" / "val2014" / "c0.jpg", 400)
    write_karpathy(tmp_path / "coco" / "dataset_coco.json", [{"filepath": "val2014", "filename": "c0.jpg",
                                                              "split": "test", "sentences": [
        {"raw": "A small red dog sits on a wooden bench near the old tree."}, {"raw": "dog"}]}])
    data = aro_order.load(tmp_path)
    result = aro_order.evaluate(Encoder(random_features(0), progress=False), data)
    assert len(set(data["items"]["coco_order"][0][2])) == 5
    assert evaluation.chance_levels("aro_order", data, result, ["coco_order"]) == {
        "coco_order": pytest.approx((1 / 5 + 1) / 2)}


def test_recognition_chance_levels_are_a_uniform_guess_and_a_random_ranking(tmp_path):
    from concrete_jungle import evaluation

    root = tmp_path / "root"
    write_image_folders(root / "imagenet", classes=("red", "blue", "green"))
    (root / "flickr30k" / "images").mkdir(parents=True)
    images = []
    for i in range(4):  # 4 images, 1 + 1 + 1 + 3 captions
        noise_image(root / "flickr30k" / "images" / f"{i}.jpg", 800 + i)
        images.append({"filename": f"{i}.jpg", "split": "test",
                       "sentences": [{"raw": f"a photo {i} {k}"} for k in range(3 if i == 3 else 1)]})
    write_karpathy(root / "flickr30k" / "dataset_flickr30k.json", images)
    loaded = {n: load_data(n, root, False) for n in ("linear_probe", "retrieval")}
    results = evaluation.run(Encoder(random_features(0), progress=False), list(loaded), loaded)
    assert results["linear_probe"]["chance"] == {"top1": pytest.approx(1 / 3)}
    # a caption finds its one image of 4 first 1 time in 4; an image finds one of its c captions first of 6 c / 6
    assert results["retrieval"]["chance"] == {"image_retrieval_recall@1": 0.25,
                                              "text_retrieval_recall@1": pytest.approx((1 + 1 + 1 + 3) / 6 / 4)}
    # COCO's mAP: the expected average precision of a random ranking, exact against every ranking of a few images
    labels = torch.tensor([[1, 0, 1], [0, 0, 1], [1, 0, 0], [0, 0, 1], [0, 0, 1]], dtype=torch.float)
    exact = []
    for c in (0, 2):  # class 1 has no positive: it has no AP, in the metric as here
        aps = [linear_probe.average_precision(torch.tensor(order, dtype=torch.float), labels[:, c])
               for order in itertools.permutations(range(5))]
        exact.append(np.mean(aps))
    level = evaluation.chance_levels("coco_probe", {"kind": "coco", "splits": {"val": ([], labels)}},
                                     {"metrics": {"mAP": 0.5}}, ["mAP"])
    assert level == {"mAP": pytest.approx(np.mean(exact))}


def test_a_model_scoring_at_random_has_a_chance_normalised_mean_near_zero(compositional):
    from concrete_jungle import evaluation
    from concrete_jungle.evaluation.report import markdown, summary

    raw, normalised = [], []
    for seed in range(30):  # the normalised mean of one seed has a spread of about 0.1 on these few items
        results = evaluation.run(Encoder(random_features(seed), progress=False), list(compositional), compositional)
        part = summary(results)["compositional"]
        raw.append(part["mean"])
        normalised.append(part["normalised_mean"])
    # the raw mean of a random model is the mean of the chance levels (50, 33, 17, 49 and 42 here), not 0
    assert np.mean(raw) == pytest.approx(np.mean(list(part["chance"].values())), abs=0.04) and np.mean(raw) > 0.35
    assert abs(np.mean(normalised)) < 0.06
    line = markdown(results).splitlines()[2]
    assert line.startswith(f"**Compositional: raw mean {100 * part['mean']:.2f}, chance-normalised mean "
                           f"{100 * part['normalised_mean']:.2f}**")
    assert "sugarcrepe_pp " + f"{100 * part['parts']['sugarcrepe_pp']:.2f} (chance 33.33)" in line
    assert "(score - chance) / (100 - chance) × 100" in line
    # a result written before results carried their chance level leaves the normalised mean unset, and says so
    del results["aro"]["chance"]
    part = summary(results)["compositional"]
    assert part["normalised_mean"] is None and part["without_chance"] == ["aro"]
    assert "chance-normalised mean -**" in markdown(results) and "No chance level for aro" in markdown(results)


# ------------------------------------------------------------------------------------------------ the command's flags


def test_eval_compare_needs_two_files_and_names_one_it_cannot_read(tmp_path, capsys):
    out = tmp_path / "a"  # what `eval` writes, in short
    out.mkdir()
    result = out / "sugarcrepe.json"
    result.write_text(json.dumps({"benchmark": "sugarcrepe", "metrics": {"M.Avg": 0.5}}))
    (out / "summary.json").write_text(json.dumps({"compositional": {"parts": {"sugarcrepe": 0.5}, "mean": 0.5}}))
    (out / "results.md").write_text("**Compositional: raw mean 50.00**\n")
    assert main(["eval", "--compare", str(result)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no one-column table
    assert " ".join(captured.err.split()) == (f"error: --compare needs two or more result files, it got one "
                                              f"({result}): concrete-jungle eval --compare A.json B.json [C.json "
                                              "...], or --compare A.json --vs B.json")
    missing = tmp_path / "b" / "sugarcrepe.json"
    for other, why in ((missing, "does not exist"), (out, "is a folder"),
                       (out / "results.md", "cannot be read as JSON"),
                       (out / "summary.json", "holds no metrics, so it is no result of `concrete-jungle eval`")):
        assert main(["eval", "--compare", str(result), str(other)]) == 2
        err = capsys.readouterr().err
        assert " ".join(err.split()).startswith(f"error: --compare: {other} {why}") and "Errno" not in err
    assert main(["eval", "--compare", str(result), "--vs", str(missing)]) == 2
    assert f"--compare: {missing} does not exist" in " ".join(capsys.readouterr().err.split())


def test_eval_benchmarks_all_takes_the_data_root_s_benchmarks_and_names_the_others(data_root, tmp_path, capsys):
    from concrete_jungle.cli import build_parser
    from concrete_jungle.evaluation.names import BENCHMARKS

    help_text = " ".join(build_parser()._subparsers._group_actions[0].choices["eval"].format_help().split())
    assert "or all: every benchmark whose data is under --data-root" in help_text
    assert "(default sugarcrepe)" in help_text
    root = copy_root(data_root, tmp_path)
    write_winoground(root / "winoground", "a dog {} on a cat", "a cat {} on a dog", n=3)
    assert main(["eval", "--benchmarks", "all", "--data-root", str(root), "--check"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"--benchmarks all: found under {root}: sugarcrepe, sugarcrepe_pp, winoground; not found: aro (no " \
           "aro/visual_genome_relation.json or aro/visual_genome_attribution.json), aro_order (no" in out
    assert out.count(" (no ") == len(BENCHMARKS) - 3 and "vtab (no vtab/*/)" in out and "| winoground | 3 | 0 |" in out
    assert "--benchmarks all: built from sugarcrepe from sugarcrepe/*.json; sugarcrepe_pp from sugarcrepe_pp/*.json; " \
           "winoground from winoground/examples.jsonl" in out
    empty = tmp_path / "empty"
    empty.mkdir()
    capsys.readouterr()
    assert main(["eval", "--benchmarks", "all", "--data-root", str(empty), "--check"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith(f"error: --benchmarks all: no benchmark's data is under --data-root {empty} (none of "
                          "sugarcrepe/*.json or sugarcrepe/data/*.json;")
    assert main(["eval", "--benchmarks", "sugarcrepe,everything", "--data-root", str(root), "--check"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "unknown benchmark(s) ['everything']" in err and "or all (alone: every benchmark whose data is under" in err


def test_linear_probe_reads_an_image_folder_as_torchvision_does(tmp_path):
    """Every extension torchvision's ImageFolder reads and pictures in sub-folders are probe images; a file it does
    not read is named in a note, not dropped in silence."""
    from torchvision.datasets import ImageFolder

    for split in ("train", "val"):
        for name in ("cat", "dog"):
            folder = tmp_path / split / name
            (folder / "more").mkdir(parents=True)
            Image.new("RGB", (8, 8), (200, 10, 10)).save(folder / "a.tif")
            Image.new("L", (8, 8), 90).save(folder / "b.pgm")
            Image.new("RGB", (8, 8), (10, 10, 200)).save(folder / "more" / "c.png")
            (folder / "notes.txt").write_text("not a picture")
    data = linear_probe.load_image_folder(tmp_path)
    for split in ("train", "val"):
        reference = ImageFolder(str(tmp_path / split))
        paths, labels = data["splits"][split]
        assert [(str(p), int(y)) for p, y in zip(paths, labels)] == reference.samples
    assert len(data["notes"]) == 2 and all("2 file(s)" in n and "notes.txt" in n for n in data["notes"])


# ------------------------------------------------------------------------------------------------ per-item keys


def test_every_benchmark_s_series_keys_its_items_once(tmp_path, nlp):
    """`eval --compare` pairs two results' items by key: within a series each key must name one item. On every
    benchmark's fixture (zero-shot with a sub-folder named alike in two class folders). ``nlp``: ARO's order tasks
    read spaCy's pipeline, loaded once for the session."""
    from concrete_jungle import evaluation
    from concrete_jungle.evaluation.names import BENCHMARKS

    writers = every_benchmark_writer()
    assert set(writers) == set(BENCHMARKS)  # a new benchmark needs its fixture here
    encoder = Encoder(random_features(0), progress=False)
    without = []
    for name, write in writers.items():
        write(tmp_path / name)
        data = load_data(name, tmp_path / name, name == "vtab")  # one VTAB task of the nineteen
        result = evaluation.run(encoder, [name], {name: data})[name]
        if "outcomes" not in result:
            without.append(name)
            continue
        assert result["outcomes"]["series"], name
        for s, answers in result["outcomes"]["series"].items():
            keys = answers["keys"]
            assert len(set(keys)) == len(keys), (name, s, sorted(k for k in set(keys) if keys.count(k) > 1))
    assert without == ["coco_probe"]  # mAP ranks pictures per class: no per-item series
    assert "class_0/more/nested.jpg" in result["outcomes"]["series"]["mine/acc1"]["keys"]


def test_the_suite_speed_benchmark_times_every_benchmark_and_matches_clip_benchmark_s_decisions(capsys, nlp):
    """benchmarks/eval_suite_speed.py --quick: a row for every benchmark of the registry, each with items timed,
    and zero-shot's and retrieval's per-item decisions equal to clip_benchmark's loop (it exits where they differ).
    ``nlp``: ARO's order tasks read spaCy's pipeline, loaded once for the session."""
    import importlib.util

    from concrete_jungle.evaluation.names import BENCHMARKS

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "eval_suite_speed.py"
    spec = importlib.util.spec_from_file_location("eval_suite_speed", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main(["--quick"])
    out = capsys.readouterr().out
    rows = {cells[0]: cells for line in out.splitlines() if line.startswith("| ")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}
    assert set(rows) - {"benchmark", "---"} == set(BENCHMARKS)
    assert all(int(rows[name][1]) > 0 for name in BENCHMARKS)
    assert [name for name in BENCHMARKS if rows[name][6]] == ["retrieval", "zeroshot"]  # the two with a reference
    assert "zero-shot: each picture's argmax class equal: True" in out
    assert "retrieval: each caption's and picture's top-1 hit equal: True; Recall@1/5/10 equal: True" in out


# ------------------------------------------------------------------------------------------------ release layouts


@pytest.mark.parametrize("name, inner", [("eqben", "eqben_vllm"), ("colorswap", "data"), ("imagecode", "data"),
                                         ("spec", "data"), ("winoground", "data")])
def test_a_release_is_read_where_its_own_download_leaves_it(tmp_path, capsys, name, inner):
    """EqBen's eqben_vllm.zip unzipped as t2v_metrics unzips it (``eqben/eqben_vllm/``), ColorSwap's archive,
    ImageCoDe's repository folder, SPEC's data.zip and Winoground's Hugging Face download with its images.zip
    unzipped (each a ``data/``): read where they lie, the same items as the files one level up; both copies at once
    is an error."""
    from concrete_jungle import evaluation

    write = every_benchmark_writer()[name]
    write(tmp_path / "flat")
    write(tmp_path / "staged")
    release = tmp_path / "release" / name
    release.mkdir(parents=True)
    shutil.move(tmp_path / "staged" / name, release / inner)
    flat, released = (evaluation.read_benchmark(name, tmp_path / root, False) for root in ("flat", "release"))
    assert keys_of(released["items"]) == keys_of(flat["items"]) and released["items"]
    assert main(["eval", "--benchmarks", name, "--data-root", str(tmp_path / "release"), "--check"]) == 0
    assert f"| {name} | 0 |" not in capsys.readouterr().out
    shutil.copytree(tmp_path / "flat" / name, release, dirs_exist_ok=True)
    with pytest.raises(BenchmarkDataError, match=f"{name} and .*{name}/{inner} both hold .*: two copies"):
        evaluation.read_benchmark(name, tmp_path / "release", False)


def keys_of(items) -> dict | list:
    """The keys of a benchmark's items, per part where it has parts (each item's first field, Winoground's id)."""
    if isinstance(items, dict):
        return {part: keys_of(rows) for part, rows in items.items()}
    return [str(it["id"]) if isinstance(it, dict) else it[0].name if isinstance(it[0], Path) else it[0]
            for it in items]


def clone_sugarcrepe(root):
    """``git clone https://github.com/RAIVNLab/sugar-crepe sugarcrepe`` (commit 0047054): the seven files in
    ``data/``, the unrefined ones in ``data_unrefined/``; and ``git clone https://github.com/Sri-Harsha/scpp
    sugarcrepe_pp`` (commit c083bbf): the five in ``data/``, the generated ones in ``generated_data/``, a
    ``croissant_metadata.json`` at the top."""
    for name, other in (("sugarcrepe", "data_unrefined"), ("sugarcrepe_pp", "generated_data")):
        clone = root / name
        (clone / "data").mkdir()
        (clone / other).mkdir()
        for path in sorted(clone.glob("*.json")):
            shutil.copy(path, clone / other / path.name)
            path.rename(clone / "data" / path.name)
        (clone / "README.md").write_text("the repository's README")
    (root / "sugarcrepe_pp" / "croissant_metadata.json").write_text("{}")


def unpack_whatsup(root):
    """The What'sUp Drive folder in ``whatsup/`` with its archives unpacked there (``dataset_zoo/aro_datasets.py``,
    commit 7c1f255): COCO-QA's pictures in its own ``val2017/``, the archives beside."""
    shutil.move(root / "coco" / "val2017", root / "whatsup" / "val2017")
    for archive in ("controlled_images.tar.gz", "val2017.zip"):
        (root / "whatsup" / archive).write_bytes(b"the archive")


def clone_valse(root):
    """``git clone https://github.com/Heidelberg-NLP/VALSE valse`` (commit 2152d90): the pieces in ``data/``, each
    piece's pictures in the folder its ``config.py`` names (relations: ``data/relations/test_images/``), FOIL-it's
    in COCO val2014."""
    clone = root / "valse"
    (clone / "data" / "relations").mkdir(parents=True)
    shutil.move(clone / "relations.json", clone / "data" / "relations.json")
    shutil.move(clone / "images", clone / "data" / "relations" / "test_images")
    (root / "coco" / "val2014").mkdir(parents=True)
    noise_image(root / "coco" / "val2014" / "COCO_val2014_000000000001.jpg", 3)
    foil = {"f0": {"image_file": "COCO_val2014_000000000001.jpg", "caption": "a dog on a sofa", "foil": "a cat on a "
                   "sofa", "linguistic_phenomena": "noun phrases", "mturk": {"caption": 2}}}
    (clone / "data" / "foil-it.json").write_text(json.dumps(foil))
    (clone / "config.py").write_text("DATA = {}")


def clone_crepe(root):
    """``git clone https://github.com/RAIVNLab/CREPE crepe`` (commit 1fa81c4) with its
    ``data/prod_hard_negatives.zip`` unzipped in ``data/``; Visual Genome in ``crepe/vg/``."""
    clone = root / "crepe"
    (clone / "data").mkdir()
    shutil.move(clone / "prod_hard_negatives", clone / "data" / "prod_hard_negatives")
    for archive in ("prod_hard_negatives.zip", "syst_hard_negatives.zip"):
        (clone / "data" / archive).write_bytes(b"the archive")


def unpack_flickr30k(root):
    """Flickr30k's ``flickr30k-images.tar.gz`` unpacked beside Karpathy's ``dataset_flickr30k.json``."""
    shutil.move(root / "flickr30k" / "images", root / "flickr30k" / "flickr30k-images")


def write_karpathy_roots(root):
    """COCO's and Flickr30k's Karpathy files with their pictures (ARO's order tasks read both)."""
    from test_compositional_benchmarks import write_coco_karpathy

    write_coco_karpathy(root)
    write_retrieval(root)


@pytest.mark.parametrize("name, unpack", [
    ("sugarcrepe", clone_sugarcrepe), ("sugarcrepe_pp", clone_sugarcrepe), ("whatsup", unpack_whatsup),
    ("valse", clone_valse), ("crepe", clone_crepe), ("retrieval", unpack_flickr30k), ("aro_order", unpack_flickr30k)])
def test_a_release_tree_as_its_download_leaves_it_is_read_unmoved(tmp_path, capsys, nlp, name, unpack):
    """Each release as its official download leaves it (the repository cloned, the archives unpacked where its own
    code unpacks them): read where it lies, every item of the files one level up (VALSE: and FOIL-it's piece,
    whose pictures are COCO's); ``nlp``: ARO's order tasks read spaCy's pipeline."""
    from concrete_jungle import evaluation

    write = write_karpathy_roots if name == "aro_order" else every_benchmark_writer()[name]
    write(tmp_path / "flat")
    write(tmp_path / "release")
    unpack(tmp_path / "release")
    flat, released = (keys_of(evaluation.read_benchmark(name, tmp_path / root, False)["items"])
                      for root in ("flat", "release"))
    if name == "aro_order":  # its keys name the picture's folder (``images/0.jpg#0``): compare the pictures
        flat, released = ({part: [k.split("/")[-1] for k in keys] for part, keys in got.items()}
                          for got in (flat, released))
    assert released == (flat | {"foil-it": ["f0"]} if name == "valse" else flat) and released
    assert main(["eval", "--benchmarks", name, "--data-root", str(tmp_path / "release"), "--check"]) == 0
    assert f"| {name} | 0 |" not in capsys.readouterr().out


def test_two_copies_of_a_release_s_pictures_are_an_error_naming_both(tmp_path):
    """What'sUp's own val2017/ beside COCO's, Flickr30k's flickr30k-images/ beside images/, a VALSE picture in its
    piece's folder and in the one folder: which copy is meant is not guessed."""
    from concrete_jungle import evaluation

    writers = every_benchmark_writer()
    for name, unpack in (("whatsup", unpack_whatsup), ("retrieval", unpack_flickr30k), ("valse", clone_valse)):
        writers[name](tmp_path / name)
        unpack(tmp_path / name)
    writers["whatsup"](tmp_path / "again")
    shutil.move(tmp_path / "again" / "coco" / "val2017", tmp_path / "whatsup" / "coco" / "val2017")
    with pytest.raises(BenchmarkDataError, match=r"whatsup/val2017 and .*coco/val2017 both hold COCO val2017 images "
                                                 r"for What'sUp's COCO-QA: two copies; keep one"):
        evaluation.read_benchmark("whatsup", tmp_path / "whatsup", False)
    (tmp_path / "retrieval" / "flickr30k" / "images").mkdir()
    with pytest.raises(BenchmarkDataError, match=r"flickr30k-images and .*flickr30k/images both hold Flickr30k "
                                                 r"pictures: two copies; keep one"):
        evaluation.read_benchmark("retrieval", tmp_path / "retrieval", False)
    (tmp_path / "valse" / "valse" / "images").mkdir()
    shutil.copy(tmp_path / "valse" / "valse" / "data" / "relations" / "test_images" / "a.jpg",
                tmp_path / "valse" / "valse" / "images" / "a.jpg")
    with pytest.raises(BenchmarkDataError, match=r"valse/images/a\.jpg and .*relations/test_images/a\.jpg are both "
                                                 r"the VALSE picture 'a\.jpg': two copies; keep one"):
        evaluation.read_benchmark("valse", tmp_path / "valse", False)


def test_winoground_is_read_from_the_parquet_files_of_its_download(tmp_path, clip):
    """facebook/winoground downloaded with its test split as Parquet (``data/test-00000-of-00001.parquet``, the
    pictures inside as ``{bytes, path}``) and no examples.jsonl: written once into examples.jsonl + images/, the
    pictures' bytes unchanged, and scored as the same examples in the JSON-lines layout."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = write_winoground(tmp_path / "jsonl", "a dog {} on a cat", "a cat {} on a dog")
    pictures = tmp_path / "jsonl" / "images"
    table = [{"id": r["id"], "caption_0": r["caption_0"], "caption_1": r["caption_1"], "tag": "Object",
              "secondary_tag": "", "num_main_preds": 1, "collapsed_tag": r.get("collapsed_tag", "Object")}
             | {f"image_{k}": {"bytes": (pictures / f"{r[f'image_{k}']}.png").read_bytes(), "path": None}
                for k in (0, 1)} for r in rows]
    release = tmp_path / "release" / "winoground" / "data"
    release.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(table), release / "test-00000-of-00001.parquet")
    data = winoground.load_root(tmp_path / "release")
    assert [it["id"] for it in data["items"]] == [r["id"] for r in rows]
    assert "written from the downloaded dataset (data/test-00000-of-00001.parquet)" in data["notes"][0]
    assert sorted(p.read_bytes() for p in (tmp_path / "release" / "winoground" / "images").iterdir()) == sorted(
        p.read_bytes() for p in pictures.iterdir())
    encoder = Encoder(clip, progress=False)
    assert winoground.evaluate(encoder, data)["metrics"] == winoground.evaluate(
        encoder, winoground.load(tmp_path / "jsonl"))["metrics"]
    assert winoground.load_root(tmp_path / "release")["notes"] == []  # written once
