"""The evaluation suite on fixtures in the official formats, scored by a tiny random-init open_clip model: the
scores, the checks of the benchmark files and images, the embedding cache, and comparing results."""

import json
import shutil

import numpy as np
import open_clip
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from benchmark_fixtures import noise_image, write_winoground
from concrete_jungle.cli import main
from concrete_jungle.evaluation import linear_probe, retrieval, sugarcrepe, sugarcrepe_pp, winoground
from concrete_jungle.evaluation.encoding import BenchmarkDataError, Encoder
from concrete_jungle.models import load_model, save_checkpoint, uses_quick_gelu


@pytest.fixture(scope="module")
def clip():
    return load_model("cj-tiny", "none", seed=0)


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
    from concrete_jungle.stats import metric_values, series

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
    assert set(sugarcrepe.SUBSETS) | {"ADD", "REPLACE", "SWAP", "M.Avg"} == set(a["metrics"])
    assert a["model"] == {"name": "cj-tiny", "pretrained": "none", "seed": 0}
    assert "| M.Avg |" in (tmp_path / "a" / "results.md").read_text()
    capsys.readouterr()
    assert main(["eval", "--compare", str(tmp_path / "a" / "sugarcrepe.json"),
                 str(tmp_path / "b" / "sugarcrepe.json")]) == 0
    assert "M.Avg" in capsys.readouterr().out
    assert main(["eval", "--data-root", str(data_root), "--model", "ViT-B-32", "--pretrained", "nope"]) == 2
    assert "pretrained tag 'nope' does not exist" in capsys.readouterr().err


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
    from concrete_jungle.evaluation import sugarcrepe

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
    from concrete_jungle.stats import metric_values, series

    accuracy = {"add_att": 5, "replace_rel": 7, "swap_obj": 9, "my_subset": 1}  # of 10
    answers = {s: series(range(10), range(10), [1] * k + [0] * (10 - k)) for s, k in accuracy.items()}
    scores = metric_values({"series": answers, "metrics": sugarcrepe.recipes(list(answers))})
    assert scores["M.Avg"] == pytest.approx(0.55) and "ADD" not in scores  # ADD needs both of its subsets
    with pytest.raises(ValueError, match="holds no subset files"):
        sugarcrepe.load(tmp_path / "empty", root / "coco" / "val2017")
