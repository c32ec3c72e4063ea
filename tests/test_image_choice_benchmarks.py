"""BiVLC, VisMin-bench and NaturalBench-Retrieval on fixtures in their released formats: each result against the
official rule applied item by item to similarities computed here, one image and one caption at a time (the ties,
the averages, both directions), and the layout's checks."""

import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from benchmark_fixtures import noise_image
from concrete_jungle.cli import main
from concrete_jungle.evaluation import chance_levels
from concrete_jungle.evaluation.benchmarks import bivlc, naturalbench, vismin
from concrete_jungle.evaluation.checks import BenchmarkDataError
from concrete_jungle.evaluation.encoding import Encoder

PAIRS = [("a dog chasing a cat on the grass", "a cat chasing a dog on the grass"),
         ("a red cup left of a blue plate", "a blue cup left of a red plate"),
         ("two birds on a wire", "three birds on a wire"),
         ("a man riding a horse", "a horse beside a man"),
         ("a small boat on a lake", "a large boat on a lake"),
         ("a child under a tree", "a child on top of a tree"),
         ("a wooden chair and a metal table", "a metal chair and a wooden table"),
         ("a clock above the door", "a clock below the door"),
         ("one apple in a bowl", "four apples in a bowl"),
         ("a woman holding an umbrella", "a woman holding a bag"),
         ("a bus in front of a building", "a bus behind a building"),
         ("a pizza on a stove", "a pie on a stove"),
         ("a cat asleep on a sofa", "a dog asleep on a sofa"),
         ("a bike leaning on a wall", "a bike lying on the ground")]


@torch.no_grad()
def official_similarities(clip, paths, captions, rgb: bool) -> list[list[float]]:
    """s[c][i] as the official loops compute them: each image opened (converted to RGB first where the official code
    does), transformed and encoded alone, each caption encoded alone, the dot product of the normalised features."""
    features = []
    for path in paths:
        with Image.open(path) as im:
            picture = im.convert("RGB") if rgb else im.copy()
        features.append(F.normalize(clip.model.encode_image(clip.preprocess(picture)[None]), dim=-1)[0])
    texts = [F.normalize(clip.model.encode_text(clip.tokenizer([c])), dim=-1)[0] for c in captions]
    return [[float((texts[c] * features[i]).sum()) for i in (0, 1)] for c in (0, 1)]


def winoground_rule(s) -> dict[str, bool]:
    """Winoground's text, image and group scores, strict (BiVLC's I2T, T2I, group; VisMin's and NaturalBench's
    text, image, group)."""
    text = s[0][0] > s[1][0] and s[1][1] > s[0][1]
    image = s[0][0] > s[0][1] and s[1][1] > s[1][0]
    return {"text": text, "image": image, "group": text and image}


def mean(flags) -> float:
    return float(np.mean([float(f) for f in flags]))


# ------------------------------------------------------------------------------------------------ BiVLC

BIVLC_TYPES = ["replace"] * 6 + ["swap"] * 2 + ["add"] * 4  # unequal: the micro and macro averages differ


def write_bivlc(folder: Path) -> list[dict]:
    (folder / "images").mkdir(parents=True)
    rows = []
    for n, kind in enumerate(BIVLC_TYPES):
        caption, negative = PAIRS[n]
        image = f"pos{n % 9}.png"  # items 0 and 9, 1 and 10, 2 and 11 share their COCO image
        noise_image(folder / "images" / image, n % 9)
        noise_image(folder / "images" / f"neg{n}.png", 100 + n)
        rows.append({"id": n, "caption": caption, "negative_caption": negative, "image": image,
                     "negative_image": f"neg{n}.png", "type": kind, "subtype": "obj"})
    rows[3]["negative_caption"] = rows[3]["caption"]  # a caption tie
    rows[5]["negative_image"] = rows[5]["image"]  # an image tie: the same picture both ways
    (folder / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def bivlc_official(clip, folder: Path, rows) -> list[dict]:
    """`evaluate_BiVLC`'s per-item flags (RGB first, strict)."""
    out = []
    for r in rows:
        s = official_similarities(clip, [folder / "images" / r["image"], folder / "images" / r["negative_image"]],
                                  [r["caption"], r["negative_caption"]], rgb=True)
        score = winoground_rule(s)
        out.append({"Ipos_2T": s[0][0] > s[1][0], "Ineg_2T": s[1][1] > s[0][1], "Tpos_2I": s[0][0] > s[0][1],
                    "Tneg_2I": s[1][1] > s[1][0], "I2T": score["text"], "T2I": score["image"], "group": score["group"],
                    "s": s})
    return out


def test_bivlc_scores_both_directions_per_item_with_ties_wrong_and_micro_and_macro_averages(tmp_path, clip):
    rows = write_bivlc(tmp_path / "bivlc")
    official = bivlc_official(clip, tmp_path / "bivlc", rows)
    data = bivlc.load_root(tmp_path)
    result = bivlc.evaluate(Encoder(clip, batch_size=5, progress=False), data)
    series = result["outcomes"]["series"]
    for name in ("I2T", "T2I", "group", "Ipos_2T", "Ineg_2T", "Tpos_2I", "Tneg_2I"):
        by_key = dict(zip(series[name]["keys"], series[name]["values"]))
        assert [by_key[str(r["id"])] for r in rows] == [float(o[name]) for o in official], name
        assert result["metrics"][name] == pytest.approx(mean(o[name] for o in official))
        for kind in ("replace", "swap", "add"):
            assert result["metrics"][f"{kind}/{name}"] == pytest.approx(
                mean(o[name] for o, r in zip(official, rows) if r["type"] == kind))
        assert result["metrics"][f"macro/{name}"] == pytest.approx(
            np.mean([result["metrics"][f"{kind}/{name}"] for kind in ("replace", "swap", "add")]))
    # the ties happened and went the official way: wrong
    assert official[3]["s"][0] == official[3]["s"][1] and official[5]["s"][0][0] == official[5]["s"][0][1]
    answer = {name: dict(zip(series[name]["keys"], series[name]["values"])) for name in series}
    assert answer["Ipos_2T"]["3"] == answer["Ineg_2T"]["3"] == answer["I2T"]["3"] == answer["group"]["3"] == 0
    assert answer["Tpos_2I"]["5"] == answer["Tneg_2I"]["5"] == answer["T2I"]["5"] == answer["group"]["5"] == 0
    # items sharing a picture are one unit of resampling
    units = dict(zip(series["group"]["keys"], series["group"]["units"]))
    assert units["0"] == units["9"] and units["1"] == units["10"] and units["0"] != units["1"]
    # the chance of a tie item is 0, of any other 1/6 (group) and 1/4 (each direction)
    chances = dict(bivlc.item_chances(data)["group"])
    assert chances["3"] == chances["5"] == 0 and chances["0"] == pytest.approx(1 / 6)
    assert chance_levels("bivlc", data, result, ["group"])["group"] == pytest.approx(10 / 12 / 6)


def test_bivlc_skips_an_item_whose_image_is_missing_only_when_asked(tmp_path, clip):
    write_bivlc(tmp_path / "bivlc")
    (tmp_path / "bivlc" / "images" / "neg7.png").unlink()
    with pytest.raises(BenchmarkDataError, match="neg7.png is missing"):
        bivlc.load_root(tmp_path)
    data = bivlc.load_root(tmp_path, skip_missing=True)
    assert data["skipped"] == {"replace": 0, "swap": 1, "add": 0}
    assert [it.key for it in data["items"]["swap"]] == ["6"]
    result = bivlc.evaluate(Encoder(clip, progress=False), data)
    assert result["outcomes"]["series"]["swap/group"]["keys"] == ["6"] and result["n"]["swap"] == 1


def test_bivlc_names_the_file_line_and_field_of_a_malformed_item(tmp_path):
    rows = write_bivlc(tmp_path / "bivlc")
    path = tmp_path / "bivlc" / "examples.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n{not json\n")
    with pytest.raises(BenchmarkDataError, match=r"examples.jsonl, line 2: not valid JSON"):
        bivlc.load_root(tmp_path)
    path.write_text(json.dumps(rows[0] | {"negative_caption": None}) + "\n")
    with pytest.raises(BenchmarkDataError, match=r"examples.jsonl: line 1 has negative_caption null, not text"):
        bivlc.load_root(tmp_path)
    path.write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[1] | {"id": 0}) + "\n")
    with pytest.raises(BenchmarkDataError, match="id 0 is on lines 1 and 2"):
        bivlc.load_root(tmp_path)
    (tmp_path / "bivlc" / "examples.jsonl").unlink()
    with pytest.raises(BenchmarkDataError, match="bivlc.export_hf"):
        bivlc.load_root(tmp_path)


def png_bytes(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_bivlc_export_writes_the_dataset_s_image_bytes_unchanged_and_a_shared_image_once(tmp_path):
    rows = [{"image": {"bytes": png_bytes(n % 2), "path": None}, "negative_image": {"bytes": png_bytes(10 + n),
             "path": None}, "caption": PAIRS[n][0], "negative_caption": PAIRS[n][1], "type": "swap", "subtype": "att"}
            for n in range(3)]
    bivlc.write_layout(rows, tmp_path / "bivlc")
    data = bivlc.load_root(tmp_path)
    items = data["items"]["swap"]
    assert [it.key for it in items] == ["0", "1", "2"] and items[0].images[0] == items[2].images[0]
    assert len(list((tmp_path / "bivlc" / "images").iterdir())) == 5
    for it, row in zip(items, rows):
        assert it.images[1].path.read_bytes() == row["negative_image"]["bytes"]
        assert it.images[1].path.name.startswith(hashlib.sha256(row["negative_image"]["bytes"]).hexdigest()[:20])


def test_bivlc_reads_its_parquet_download_offline_with_each_image_s_bytes_unchanged(tmp_path, clip):
    """``huggingface-cli download imirandam/BiVLC --local-dir bivlc`` leaves Parquet files (``data/test-*.parquet``,
    the images as ``{bytes, path}``): read where they lie with pyarrow, the items and image files those of
    `write_layout`, written once."""
    from datasets import Dataset, Features, Value
    from datasets import Image as ImageFeature

    rows = [{"image": {"bytes": png_bytes(n % 2), "path": None}, "negative_image": {"bytes": png_bytes(10 + n),
             "path": None}, "caption": PAIRS[n][0], "negative_caption": PAIRS[n][1],
             "type": ["swap", "add"][n % 2], "subtype": "att"} for n in range(4)]
    features = Features({"image": ImageFeature(), "caption": Value("string"), "negative_caption": Value("string"),
                         "negative_image": ImageFeature(), "type": Value("string"), "subtype": Value("string")})
    (tmp_path / "bivlc" / "data").mkdir(parents=True)
    Dataset.from_list(rows, features=features).to_parquet(tmp_path / "bivlc" / "data" / "test-00000-of-00001.parquet")
    data = bivlc.load_root(tmp_path)
    assert data["notes"][0].endswith("were written from the downloaded dataset (data/test-00000-of-00001.parquet), "
                                     "each image as its bytes are there; delete them to write them again")
    assert {t: [it.key for it in items] for t, items in data["items"].items()} == {"swap": ["0", "2"],
                                                                                  "add": ["1", "3"]}
    for it in data["items"]["swap"] + data["items"]["add"]:
        row = rows[int(it.key)]
        assert [crop.path.read_bytes() for crop in it.images] == [row["image"]["bytes"],
                                                                  row["negative_image"]["bytes"]]
        assert it.captions == (row["caption"], row["negative_caption"])
    again = bivlc.load_root(tmp_path)
    assert again["notes"] == [] and again["items"] == data["items"]
    assert main(["eval", "--benchmarks", "bivlc", "--data-root", str(tmp_path), "--check"]) == 0


# ------------------------------------------------------------------------------------------------ VisMin-bench

VISMIN_CATEGORIES = ["object"] * 5 + ["attribute"] * 2 + ["counting"] * 3 + ["relation"] * 4


def write_vismin(folder: Path) -> list[dict]:
    (folder / "images").mkdir(parents=True)
    rows = []
    for n, category in enumerate(VISMIN_CATEGORIES):
        noise_image(folder / "images" / f"{n}_0.png", 200 + n)
        noise_image(folder / "images" / f"{n}_1.png", 300 + n)
        rows.append({"id": 1000 + n, "text_0": PAIRS[n][0], "text_1": PAIRS[n][1], "image_0": f"{n}_0.png",
                     "image_1": f"{n}_1.png", "category": category})
    rows[8]["text_1"] = rows[8]["text_0"]  # a caption tie
    (folder / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def test_vismin_rounds_each_category_as_the_official_metric_before_the_macro_mean_and_gives_both(tmp_path, clip):
    rows = write_vismin(tmp_path / "vismin")
    official = [winoground_rule(official_similarities(
        clip, [tmp_path / "vismin" / "images" / r[f"image_{k}"] for k in (0, 1)], [r["text_0"], r["text_1"]],
        rgb=False)) for r in rows]
    data = vismin.load_root(tmp_path)
    result = vismin.evaluate(Encoder(clip, batch_size=4, progress=False), data)
    metrics = result["metrics"]
    for name in ("text", "image", "group"):
        per_category = {c: mean(o[name] for o, r in zip(official, rows) if r["category"] == c)
                        for c in vismin.CATEGORIES}
        # metric.py: round(count * 100 / n, 2) per category, the number its output gives
        rounded = {c: round(sum(o[name] for o, r in zip(official, rows) if r["category"] == c) * 100 /
                            sum(r["category"] == c for r in rows), 2) / 100 for c in vismin.CATEGORIES}
        for category, value in rounded.items():
            assert metrics[f"{category}/{name}"] == value
        assert metrics[f"micro/{name}"] == pytest.approx(mean(o[name] for o in official))
        assert metrics[f"macro/{name}"] == pytest.approx(np.mean(list(rounded.values())), abs=1e-12)
        assert metrics[f"macro/{name} (unrounded)"] == pytest.approx(np.mean(list(per_category.values())), abs=1e-12)
        assert name not in metrics  # every overall number says which mean it is
    tie = {name: dict(zip(s["keys"], s["values"]))["1008"] for name, s in result["outcomes"]["series"].items()
           if "/" not in name}
    assert tie == {"text": 0, "image": 0, "group": 0}
    assert dict(vismin.item_chances(data)["counting/group"])["1008"] == 0
    assert result["n"] == {"object": 5, "attribute": 2, "counting": 3, "relation": 4}


def test_vismin_s_headline_is_the_mean_of_the_rounded_categories_with_the_unrounded_mean_beside_it(tmp_path):
    """A model of random features (seed 4) gets one of counting's 3 items right: metric.py gives 33.33 %, and the
    mean over the four categories moves by 0.0008 points from the mean of the unrounded scores."""
    from benchmark_fixtures import random_features

    write_vismin(tmp_path / "vismin")
    result = vismin.evaluate(Encoder(random_features(4), progress=False), vismin.load_root(tmp_path))
    series, metrics = result["outcomes"]["series"], result["metrics"]
    shares = {c: series[f"{c}/group"]["values"] for c in vismin.CATEGORIES}
    rounded = [round(sum(v) * 100 / len(v), 2) / 100 for v in shares.values()]
    assert metrics["counting/group"] == 0.3333
    assert metrics["macro/group"] == pytest.approx(np.mean(rounded), abs=1e-12)
    assert metrics["macro/group (unrounded)"] == pytest.approx(np.mean([np.mean(v) for v in shares.values()]),
                                                               abs=1e-12)
    assert metrics["macro/group"] == pytest.approx(metrics["macro/group (unrounded)"] - 0.25 * (1 / 3 - 0.3333),
                                                   abs=1e-12)


def test_vismin_skips_a_missing_image_when_asked_and_names_a_missing_field(tmp_path, clip):
    rows = write_vismin(tmp_path / "vismin")
    (tmp_path / "vismin" / "images" / "6_1.png").unlink()
    with pytest.raises(BenchmarkDataError, match="6_1.png is missing"):
        vismin.load_root(tmp_path)
    data = vismin.load_root(tmp_path, skip_missing=True)
    assert data["skipped"]["attribute"] == 1 and [it.key for it in data["items"]["attribute"]] == ["1005"]
    assert vismin.evaluate(Encoder(clip, progress=False), data)["n"]["attribute"] == 1
    (tmp_path / "vismin" / "examples.jsonl").write_text(json.dumps({k: v for k, v in rows[0].items()
                                                                    if k != "category"}) + "\n")
    with pytest.raises(BenchmarkDataError, match="examples.jsonl: line 1 has category null, not text"):
        vismin.load_root(tmp_path)


def test_vismin_reads_its_save_to_disk_download_offline_as_the_official_eval_opens_it(tmp_path, clip):
    """``huggingface-cli download mair-lab/vismin-bench --local-dir vismin`` leaves the ``save_to_disk`` folder
    ``data/`` (``dataset_dict.json``, ``test/``) that ``eval.py`` opens with ``load_from_disk``: read where it lies
    with pyarrow's Arrow reader (no `datasets`), the items those of the rows, each image's bytes unchanged."""
    from datasets import Dataset, DatasetDict, Features, Value
    from datasets import Image as ImageFeature

    rows = [{"id": str(500 + n), "text_0": PAIRS[n][0], "text_1": PAIRS[n][1],
             "image_0": {"bytes": png_bytes(20 + n), "path": None},
             "image_1": {"bytes": png_bytes(40 + n), "path": None}, "category": VISMIN_CATEGORIES[n * 3]}
            for n in range(5)]
    features = Features({k: Value("string") for k in ("id", "text_0", "text_1", "category")}
                        | {"image_0": ImageFeature(), "image_1": ImageFeature()})
    DatasetDict({"test": Dataset.from_list(rows, features=features)}).save_to_disk(str(tmp_path / "vismin" / "data"))
    data = vismin.load_root(tmp_path)
    assert "were written from the downloaded dataset (data/test/data-00000-of-00001.arrow)" in data["notes"][0]
    items = {it.key: it for part in data["items"].values() for it in part}
    assert sorted(items) == [r["id"] for r in rows]
    for row in rows:
        item = items[row["id"]]
        assert [p.read_bytes() for p in item.images] == [row["image_0"]["bytes"], row["image_1"]["bytes"]]
        assert item.captions == (row["text_0"], row["text_1"]) and item.category == row["category"]
    assert vismin.load_root(tmp_path)["notes"] == []


def test_vismin_export_keeps_the_official_fields_and_image_bytes(tmp_path):
    rows = [{"id": 7, "text_0": "two cups", "text_1": "three cups", "image_0": {"bytes": png_bytes(1), "path": None},
             "image_1": {"bytes": png_bytes(2), "path": None}, "category": "counting", "question_1": "?"}]
    vismin.write_layout(rows, tmp_path / "vismin")
    [item] = vismin.load_root(tmp_path)["items"]["counting"]
    assert item.key == "7" and item.captions == ("two cups", "three cups")
    assert [p.read_bytes() for p in item.images] == [png_bytes(1), png_bytes(2)]


# ------------------------------------------------------------------------------------------------ NaturalBench


def write_naturalbench(folder: Path, n: int = 7) -> list[dict]:
    images = folder / "NaturalBench-Retrieval" / "images"
    images.mkdir(parents=True)
    metadata = []
    for i in range(n):
        noise_image(images / f"{i}a.jpg", 400 + i)
        noise_image(images / f"{i}b.jpg", 500 + i)
        metadata.append({"index": i, "image_0": f"{i}a.jpg", "image_1": f"{i}b.jpg", "caption_0": PAIRS[i][0],
                         "caption_1": PAIRS[i][1]})
    metadata[2]["image_1"] = metadata[2]["image_0"]  # an image tie
    metadata[4]["image_1"] = metadata[1]["image_0"]  # items 1 and 4 share a picture
    (folder / "NaturalBench-Retrieval" / "metadata.json").write_text(json.dumps(metadata))
    return metadata


def test_naturalbench_retrieval_scores_text_image_and_group_as_t2v_metrics_does(tmp_path, clip):
    metadata = write_naturalbench(tmp_path / "naturalbench")
    images = tmp_path / "naturalbench" / "NaturalBench-Retrieval" / "images"
    official = [winoground_rule(official_similarities(clip, [images / m["image_0"], images / m["image_1"]],
                                                      [m["caption_0"], m["caption_1"]], rgb=True)) for m in metadata]
    data = naturalbench.load_root(tmp_path)
    result = naturalbench.evaluate(Encoder(clip, batch_size=3, progress=False), data)
    for name in ("text", "image", "group"):
        assert result["outcomes"]["series"][name]["values"] == [float(o[name]) for o in official]
        assert result["metrics"][name] == pytest.approx(mean(o[name] for o in official))
    assert set(result["metrics"]) == {"text", "image", "group"}
    assert [result["outcomes"]["series"][name]["values"][2] for name in ("text", "image", "group")] == [0, 0, 0]
    units = result["outcomes"]["series"]["group"]["units"]
    assert units[1] == units[4] and len(set(units)) == 6
    assert chance_levels("naturalbench", data, result, ["group"])["group"] == pytest.approx(6 / 7 / 6)


def test_naturalbench_checks_the_index_the_official_reader_asserts_and_skips_missing_images(tmp_path, clip):
    metadata = write_naturalbench(tmp_path / "naturalbench")
    path = tmp_path / "naturalbench" / "NaturalBench-Retrieval" / "metadata.json"
    (path.parent / "images" / "5b.jpg").unlink()
    with pytest.raises(BenchmarkDataError, match="5b.jpg is missing"):
        naturalbench.load_root(tmp_path)
    data = naturalbench.load_root(tmp_path, skip_missing=True)
    assert data["skipped"] == {"all": 1} and "5" not in [it.key for it in data["items"]["all"]]
    assert naturalbench.evaluate(Encoder(clip, progress=False), data)["n"] == {"all": 6}
    path.write_text(json.dumps(metadata[1:]))
    with pytest.raises(BenchmarkDataError, match="item 0 has index 1; the official reader requires item n"):
        naturalbench.load_root(tmp_path)
    path.write_text(json.dumps({"0": metadata[0]}))
    with pytest.raises(BenchmarkDataError, match="metadata.json: NaturalBench-Retrieval's metadata is a list"):
        naturalbench.load_root(tmp_path)
    path.write_text(json.dumps([metadata[0] | {"caption_1": 3}]))
    with pytest.raises(BenchmarkDataError, match="item 0 has caption_1 3, not text"):
        naturalbench.load_root(tmp_path)


# ------------------------------------------------------------------------------------------------ the command


def test_eval_checks_and_runs_the_image_choice_benchmarks_from_the_data_root(tmp_path, capsys):
    root = tmp_path / "root"
    write_bivlc(root / "bivlc")
    write_vismin(root / "vismin")
    write_naturalbench(root / "naturalbench")
    names = "bivlc,vismin,naturalbench"
    assert main(["eval", "--benchmarks", names, "--data-root", str(root), "--check"]) == 0
    printed = set(capsys.readouterr().out.splitlines())
    assert {"| bivlc | 12 | 0 |", "| vismin | 14 | 0 |", "| naturalbench | 7 | 0 |"} <= printed
    assert main(["eval", "--benchmarks", names, "--data-root", str(root), "--model", "cj-tiny", "--pretrained",
                 "none", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    results = {name: json.loads((tmp_path / "out" / f"{name}.json").read_text()) for name in names.split(",")}
    assert results["bivlc"]["outcomes"]["series"]["T2I"]["keys"] == [str(n) for n in range(12)]
    assert {"I2T", "T2I", "group", "macro/group", "swap/T2I"} <= set(results["bivlc"]["metrics"])
    assert {"micro/group", "macro/group", "relation/image"} <= set(results["vismin"]["metrics"])
    # chance levels from the items: ties have none
    assert results["bivlc"]["chance"]["group"] == pytest.approx(10 / 12 / 6)
    assert results["vismin"]["chance"]["macro/group"] == pytest.approx(np.mean([1 / 6, 1 / 6, 2 / 3 / 6, 1 / 6]))
    assert results["naturalbench"]["chance"]["group"] == pytest.approx(6 / 7 / 6)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert set(summary["compositional"]["parts"]) == {"bivlc", "vismin", "naturalbench"}
    assert summary["compositional"]["parts"]["vismin"] == pytest.approx(results["vismin"]["metrics"]["macro/group"])
