"""MMVP-VLM, EqBen and ColorSwap on fixtures in their released formats: each result against the official rule applied
item by item to similarities computed here (each picture read as the official loader reads it, each caption encoded
alone), their ties, their averages, skipped images and malformed files."""

import csv
import json
import random
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from benchmark_fixtures import VARIED_CAPTIONS as CAPTIONS
from benchmark_fixtures import as_opened, image_feature, noise_image, text_feature
from benchmark_fixtures import varied_picture as picture
from concrete_jungle.cli import main
from concrete_jungle.evaluation.benchmarks import colorswap, eqben, mmvp_vlm
from concrete_jungle.evaluation.checks import BenchmarkDataError
from concrete_jungle.evaluation.encoding import Encoder


def caption_pair(n: int) -> tuple[str, str]:
    return CAPTIONS[n % 16], CAPTIONS[(5 * n + 3) % 16]


def wino_scores(s: dict[tuple[int, int], float]) -> dict[str, bool]:
    """Winoground's scores of one item from s[(caption, image)], strict as EqBen's ``cal_wino_score``."""
    text = s[0, 0] > s[1, 0] and s[1, 1] > s[0, 1]
    image = s[0, 0] > s[0, 1] and s[1, 1] > s[1, 0]
    return {"text": text, "image": image, "group": text and image}


# ------------------------------------------------------------------------------------------------ MMVP-VLM

# Type -> statement pairs; the patterns are of unequal size, so the mean over patterns and over pairs differ
MMVP = {"Orientation": [("the car faces left", "the car faces right"), ("the arrow points up", "the arrow points down"),
                        ("the dog looks at the camera", "the dog looks away"), ("x", "zzzz qqqq"),
                        ("a red wall", "a dark night sky"), ("two", "seven horses running in the snow")],
        "Color": [("the flower is red", "the flower is white"), ("blue", "a yellow and green striped shirt"),
                  ("zzzz qqqq", "x")],
        "Quantity": [("there are two cups", "there are three cups"), ("one bird", "one bird")]}  # a tie of texts


def write_mmvp(root):
    folder = root / "mmvp_vlm"
    rows, qid = [], 1
    for pattern, pairs in MMVP.items():
        (folder / "MLLM_VLM Images" / pattern).mkdir(parents=True)
        for first, second in pairs:
            for text in (first, second):
                noise_image(folder / "MLLM_VLM Images" / pattern / f"{qid}.jpg", 500 + qid)
                rows.append([qid, pattern, text])
                qid += 1
    # two copies of one picture: each statement scores the two images alike
    same = folder / "MLLM_VLM Images" / "Orientation"
    (same / "2.jpg").write_bytes((same / "1.jpg").read_bytes())
    with open(folder / "Questions.csv", "w", newline="") as f:
        csv.writer(f).writerows([["Question ID", "Type", "Statement"], *rows])
    return rows


@torch.no_grad()
def official_mmvp(clip, folder, rows) -> list[dict]:
    """``evaluate_vlm.py``'s loop: per pair of rows, both images from the first row's Type, ``"a photo of "`` +
    statement, the softmax of the logits over the two images, image 1 when its probability > 0.5, the right image by
    the id's parity; a pair right when both statements pick theirs."""
    out = []
    for (qid1, type1, text1), (qid2, _, text2) in zip(rows[0::2], rows[1::2]):
        images = torch.stack([image_feature(clip, as_opened(folder / "MLLM_VLM Images" / type1 / f"{q}.jpg"))
                              for q in (qid1, qid2)])
        preds, probs = [], []
        for qid, text in ((qid1, text1), (qid2, text2)):
            # each logit its own dot product: a matrix product can round two equal images' logits apart
            feature = text_feature(clip, "a photo of " + text)
            logits = clip.model.logit_scale.exp() * torch.stack([feature @ image for image in images])
            prob = logits.softmax(dim=-1)[0].item()
            probs.append(prob)
            preds.append(("img1" if prob > 0.5 else "img2") == ("img1" if qid % 2 == 1 else "img2"))
        out.append({"key": f"{qid1}-{qid2}", "pattern": type1, "right": all(preds), "probs": probs})
    return out


def test_mmvp_vlm_scores_each_statement_s_choice_of_image_as_the_official_script(tmp_path, clip):
    rows = write_mmvp(tmp_path)
    data = mmvp_vlm.load_root(tmp_path)
    result = mmvp_vlm.evaluate(Encoder(clip, batch_size=3, progress=False), data)
    official = official_mmvp(clip, tmp_path / "mmvp_vlm", rows)
    series = result["outcomes"]["series"]
    assert series["pairs"]["keys"] == [o["key"] for o in official]
    assert series["pairs"]["values"] == [float(o["right"]) for o in official]
    # the pair of one picture twice: a probability of exactly 0.5, which the script sends to image 2 for both
    # statements, so statement 1 (odd id, image 1) is wrong and the pair with it
    assert official[0]["probs"] == [0.5, 0.5] and official[0]["right"] is False
    # one statement twice cannot pick each image in turn
    assert official[-1]["right"] is False
    per_pattern = {p: np.mean([o["right"] for o in official if o["pattern"] == p]) for p in MMVP}
    metrics = result["metrics"]
    for pattern, accuracy in per_pattern.items():
        assert metrics[pattern] == pytest.approx(accuracy)
    macro, micro = np.mean(list(per_pattern.values())), np.mean([o["right"] for o in official])
    assert macro != pytest.approx(micro)  # the fixture tells the two averages apart
    assert metrics["macro"] == pytest.approx(macro) and metrics["micro"] == pytest.approx(micro)
    chances = mmvp_vlm.item_chances(data)
    assert [c for _, c in chances["pairs"]] == [0.0] + [0.25] * 9 + [0.0]


def test_mmvp_vlm_skips_a_pair_whose_image_is_missing_and_names_a_malformed_row(tmp_path):
    rows = write_mmvp(tmp_path)
    folder = tmp_path / "mmvp_vlm"
    (folder / "MLLM_VLM Images" / "Color" / "14.jpg").unlink()
    with pytest.raises(BenchmarkDataError, match=r"Color/14\.jpg is missing"):
        mmvp_vlm.load_root(tmp_path)
    data = mmvp_vlm.load_root(tmp_path, skip_missing=True)
    assert data["skipped"] == {"Orientation": 0, "Color": 1, "Quantity": 0}
    assert [it.key for it in data["items"]["Color"]] == ["15-16", "17-18"]

    def write(lines):
        with open(folder / "Questions.csv", "w", newline="") as f:
            csv.writer(f).writerows([["Question ID", "Type", "Statement"], *lines])

    write([*rows[:3], [4, "Orientation"], *rows[4:]])
    with pytest.raises(BenchmarkDataError, match=r"Questions\.csv, line 5: .* is not Question ID"):
        mmvp_vlm.load_root(tmp_path)
    write([rows[1], rows[0], *rows[2:]])  # an even id first: the script would give its statement image 2
    with pytest.raises(BenchmarkDataError, match=r"Questions\.csv, lines 2 and 3: a pair is two consecutive rows"):
        mmvp_vlm.load_root(tmp_path)
    write(rows[:-1])
    with pytest.raises(BenchmarkDataError, match=r"21 statements, an odd number; the last \(line 22\)"):
        mmvp_vlm.load_root(tmp_path)


# ------------------------------------------------------------------------------------------------ EqBen

def write_eqben(root):
    """``all_select.json`` and ``images/``: pictures of four sources and YouCook2 frames as BGR ``.npy`` arrays."""
    images = root / "eqben" / "images"
    items, n = [], 0
    for source, count in (("eqbenag", 12), ("eqbenkubric_cnt", 3), ("eqbenkubric_loc", 5), ("eqbenyoucook2", 6),
                          ("eqbensd", 6)):
        (images / source / "clip").mkdir(parents=True)
        for k in range(count):
            suffix = ".npy" if source == "eqbenyoucook2" else ".png"
            names = [f"{source}/clip/{k}_{side}{suffix}" for side in (0, 1)]
            for side, name in enumerate(names):
                picture(images / name, 2 * n + side)
            caption0, caption1 = caption_pair(n + 5)  # from the sixth: the test model gets each score right
            items.append({"image0": names[0], "caption0": caption0, "image1": names[1], "caption1": caption1})
            n += 1
    items[1]["caption1"] = items[1]["caption0"]  # one caption twice
    items[2]["image1"] = items[2]["image0"]  # one picture twice
    (root / "eqben" / "all_select.json").write_text(json.dumps(items))
    return items


def eqben_picture(path) -> Image.Image:
    """EqBen's official loaders: ``process_img_npy`` for a YouCook2 frame, ``process_img_pixel`` for the rest."""
    if path.suffix == ".npy":
        return Image.fromarray(np.load(path)[:, :, [2, 1, 0]], "RGB")
    with Image.open(path) as im:
        return im.convert("RGB")


def official_wino(clip, folder, items, image_keys, caption_keys, read) -> list[dict[str, bool]]:
    out = []
    for it in items:
        images = [image_feature(clip, read(folder / it[k])) for k in image_keys]
        texts = [text_feature(clip, it[k]) for k in caption_keys]
        out.append(wino_scores({(c, i): float(texts[c] @ images[i]) for c in (0, 1) for i in (0, 1)}))
    return out


def test_eqben_scores_text_image_and_group_strictly_per_source_group_and_averages_both_ways(tmp_path, clip):
    items = write_eqben(tmp_path)
    data = eqben.load_root(tmp_path)
    assert {g: len(v) for g, v in data["items"].items()} == {"eqbenag": 12, "eqbenk": 8, "eqbeny": 6, "eqbensd": 6}
    result = eqben.evaluate(Encoder(clip, batch_size=4, progress=False), data)
    official = official_wino(clip, tmp_path / "eqben" / "images", items, ("image0", "image1"),
                             ("caption0", "caption1"), eqben_picture)
    groups = {"eqbenag": "eqbenag", "eqbenkubric_cnt": "eqbenk", "eqbenkubric_loc": "eqbenk",
              "eqbenyoucook2": "eqbeny", "eqbensd": "eqbensd"}
    group_of = [groups[it["image0"].split("/")[0]] for it in items]
    series, metrics = result["outcomes"]["series"], result["metrics"]
    order = [int(k) for k in series["group"]["keys"]]  # the items, grouped by source
    for score in ("text", "image", "group"):
        assert series[score]["values"] == [float(official[n][score]) for n in order]
        assert metrics[f"micro/{score}"] == pytest.approx(np.mean([o[score] for o in official]))
        per_group = {g: np.mean([o[score] for o, h in zip(official, group_of) if h == g]) for g in set(group_of)}
        for group, value in per_group.items():
            assert metrics[f"{group}/{score}"] == pytest.approx(value)
        assert metrics[f"macro/{score}"] == pytest.approx(np.mean(list(per_group.values())))
    assert all(any(o[score] for o in official) for score in ("text", "image", "group"))  # the fixture tests each
    assert metrics["macro/image"] != pytest.approx(metrics["micro/image"])  # and tells the two averages apart
    # a tie is wrong: one caption twice (item 1) or one picture twice (item 2) scores nothing
    assert not any(official[1].values()) and not any(official[2].values())
    assert series["text"]["values"][order.index(1)] == 0.0 and series["image"]["values"][order.index(2)] == 0.0
    chances = eqben.item_chances(data)
    assert dict(chances["group"])["1"] == 0.0 and dict(chances["group"])["0"] == pytest.approx(1 / 6)


def test_eqben_skips_an_item_whose_frame_is_missing_and_names_a_malformed_item_or_frame(tmp_path):
    items = write_eqben(tmp_path)
    images = tmp_path / "eqben" / "images"
    (images / items[20]["image1"]).unlink()  # a YouCook2 frame
    with pytest.raises(BenchmarkDataError, match=r"frame .*eqbenyoucook2/clip/0_1\.npy is missing"):
        eqben.load_root(tmp_path)
    data = eqben.load_root(tmp_path, skip_missing=True)
    assert data["skipped"] == {"eqbenag": 0, "eqbenk": 0, "eqbeny": 1, "eqbensd": 0}
    np.save(images / items[20]["image1"], np.zeros((4, 5), dtype=np.uint8))
    with pytest.raises(BenchmarkDataError, match=r"clip/0_1\.npy is unreadable frame: .* not a height x width x 3"):
        eqben.load_root(tmp_path)
    path = tmp_path / "eqben" / "all_select.json"
    path.write_text(json.dumps([*items[:3], {k: v for k, v in items[3].items() if k != "caption1"}]))
    with pytest.raises(BenchmarkDataError, match=r"all_select\.json: item 3 has caption1 null, not text"):
        eqben.load_root(tmp_path)


def test_eqben_counts_an_item_outside_its_source_folders_over_all_items_and_in_no_group(tmp_path, clip):
    """t2v_metrics' EqBen_Mini scores every item for 'all' and each of its five groups over the items whose image0
    starts with one of the group's folders: an item in another folder is in 'all' only (an error before)."""
    items = write_eqben(tmp_path)
    images = tmp_path / "eqben" / "images"
    (images / "elsewhere").mkdir()
    for side in (0, 1):
        (images / items[7][f"image{side}"]).rename(images / "elsewhere" / f"7_{side}.png")
        items[7][f"image{side}"] = f"elsewhere/7_{side}.png"
    (tmp_path / "eqben" / "all_select.json").write_text(json.dumps(items))
    data = eqben.load_root(tmp_path)
    result = eqben.evaluate(Encoder(clip, batch_size=4, progress=False), data)
    official = official_wino(clip, images, items, ("image0", "image1"), ("caption0", "caption1"), eqben_picture)
    series, metrics = result["outcomes"]["series"], result["metrics"]
    assert "7" in series["group"]["keys"] and len(series["group"]["keys"]) == 32
    assert all("7" not in s["keys"] for name, s in series.items() if "/" in name)
    assert metrics["micro/image"] == pytest.approx(np.mean([o["image"] for o in official]))
    assert metrics["eqbenag/image"] == pytest.approx(np.mean([o["image"] for n, o in enumerate(official[:12])
                                                              if n != 7]))
    assert result["n"]["other"] == 1 and "1 item(s) have an image0 in no EqBen source folder" in result["notes"][0]
    assert set(metrics) >= {"macro/group"} and "other/group" not in metrics
    assert len(eqben.item_chances(data)["group"]) == 32


def write_eqben_full(root):
    """The full test set as released: its pairs of one caption and one image in random order
    (``ann_json_finegrained_random.json``), the repository's ``src_file/`` that restores the order, and ``images/``,
    items of all seven sources (YouCook2's frames ``.npy``). Returns each item's source, images and captions."""
    folder = root / "eqben_full"
    items, n = [], 0
    for source, count in (("eqbenag", 5), ("eqbenyoucook2", 3), ("eqbengebc", 2), ("eqbenkubric_loc", 3),
                          ("eqbenkubric_attr", 2), ("eqbenkubric_cnt", 2), ("eqbensd", 4)):
        for k in range(count):
            suffix = ".npy" if source == "eqbenyoucook2" else ".png"
            names = [f"{source}/v{k}/{side}{suffix}" for side in (0, 1)]
            for side, name in enumerate(names):
                picture(folder / "images" / name, 300 + 2 * n + side)
            items.append((source, names, caption_pair(n + 5)))
            n += 1
    entries, info = [], []
    for number, (source, names, captions) in enumerate(items):
        for c in (0, 1):
            for i in (0, 1):
                entries.append({"image": names[i], "caption": captions[c]})
                info.append({"dataset": source, "name": f"c{c}i{i}", "sample_cnt": number})
    order = list(range(len(entries)))
    random.Random(0).shuffle(order)  # order[p]: the original place of the pair released at place p
    (folder / "src_file").mkdir()
    (folder / "ann_json_finegrained_random.json").write_text(json.dumps([entries[j] for j in order]))
    (folder / "src_file" / "private_random_idx.json").write_text(json.dumps(order))
    (folder / "src_file" / "private_info.json").write_text(json.dumps(info))
    return items


def test_eqben_full_test_set_restores_the_released_order_and_scores_each_source_as_the_local_script(tmp_path, clip):
    """evaluate_eqben_locally.py: each released pair's score put back by argsort(private_random_idx), items by
    private_info, Winoground's scores per source; beside them t2v_metrics' five groups and their mean."""
    items = write_eqben_full(tmp_path)
    data = eqben.load_full_root(tmp_path)
    assert {d: len(v) for d, v in data["items"].items()} == {
        "eqbenag": 5, "eqbenyoucook2": 3, "eqbengebc": 2, "eqbenkubric_cnt": 2, "eqbenkubric_loc": 3,
        "eqbenkubric_attr": 2, "eqbensd": 4}
    result = eqben.evaluate(Encoder(clip, batch_size=4, progress=False), data)
    folder = tmp_path / "eqben_full"
    released = json.loads((folder / "ann_json_finegrained_random.json").read_text())
    order = json.loads((folder / "src_file" / "private_random_idx.json").read_text())
    info = json.loads((folder / "src_file" / "private_info.json").read_text())
    # one similarity per released pair, in the released order
    score = [float(text_feature(clip, r["caption"]) @ image_feature(clip, eqben_picture(folder / "images" /
                                                                                        r["image"])))
             for r in released]
    recovered = np.asarray(score)[np.argsort(order)]
    per_item = {}
    for value, where in zip(recovered, info):
        per_item.setdefault(where["sample_cnt"], {})[where["name"]] = value
    official = [wino_scores({(c, i): per_item[n][f"c{c}i{i}"] for c in (0, 1) for i in (0, 1)})
                for n in range(len(items))]
    metrics = result["metrics"]
    for score_name in ("text", "image", "group"):
        by_source = {}
        for (source, _, _), o in zip(items, official):
            by_source.setdefault(source, []).append(o[score_name])
        for source, values in by_source.items():
            assert metrics[f"{source}/{score_name}"] == pytest.approx(np.mean(values))
        kubric = sum((by_source[s] for s in ("eqbenkubric_loc", "eqbenkubric_attr", "eqbenkubric_cnt")), [])
        assert metrics[f"eqbenk/{score_name}"] == pytest.approx(np.mean(kubric))
        groups = [np.mean(by_source[s]) for s in ("eqbenag", "eqbenyoucook2", "eqbengebc", "eqbensd")] + [
            np.mean(kubric)]
        assert metrics[f"groups/{score_name}"] == pytest.approx(np.mean(groups))
        assert metrics[f"micro/{score_name}"] == pytest.approx(np.mean([o[score_name] for o in official]))
    assert any(o["image"] for o in official) and any(not o["image"] for o in official)
    (folder / "src_file" / "private_random_idx.json").write_text(json.dumps(order[:-1] + order[-1:] * 1 + [0]))
    with pytest.raises(BenchmarkDataError, match=r"do not fit together"):
        eqben.load_full_root(tmp_path)


# ------------------------------------------------------------------------------------------------ ColorSwap

def write_colorswap(root):
    folder = root / "colorswap"
    (folder / "images").mkdir(parents=True)
    items = []
    for n in range(24):
        for k in (1, 2):
            picture(folder / "images" / f"img_{n}_{k}.png", 100 + 2 * n + k)
        caption_1, caption_2 = caption_pair(n)
        items.append({"id": n, "caption_1": caption_1, "caption_2": caption_2, "image_1": f"images/img_{n}_1.png",
                      "image_2": f"images/img_{n}_2.png", "image_source": "midjourney", "caption_source": "human"})
    items[1]["caption_2"] = items[1]["caption_1"].upper()  # reads alike to the tokenizer: a tie
    items[2]["image_2"] = items[2]["image_1"]
    (folder / "test.json").write_text(json.dumps(items))
    (folder / "train.json").write_text(json.dumps(items[:2]))  # training data: not evaluated
    return items


def test_colorswap_scores_the_test_split_as_winoground_strictly_and_over_its_examples(tmp_path, clip):
    items = write_colorswap(tmp_path)
    data = colorswap.load_root(tmp_path)
    result = colorswap.evaluate(Encoder(clip, batch_size=3, progress=False), data)
    official = official_wino(clip, tmp_path / "colorswap", items, ("image_1", "image_2"), ("caption_1", "caption_2"),
                             eqben_picture)  # converted to RGB, as every module reads pictures
    series = result["outcomes"]["series"]
    assert set(series) == {"text", "image", "group"} and series["group"]["keys"] == [str(n) for n in range(24)]
    for score in ("text", "image", "group"):
        assert series[score]["values"] == [float(o[score]) for o in official]
        assert result["metrics"][score] == pytest.approx(np.mean([o[score] for o in official]))
    assert all(any(o[score] for o in official) for score in ("text", "image", "group"))  # the fixture tests each
    assert not any(official[1].values()) and not any(official[2].values())  # the two ties are wrong
    assert result["n"] == {"test": 24}
    assert [c for _, c in colorswap.item_chances(data)["group"]][:4] == pytest.approx([1 / 6, 0, 0, 1 / 6])


def test_colorswap_converts_each_image_to_rgb_before_the_transform(tmp_path):
    """RGBA and palette PNGs give other pixels when converted after the resize, as open_clip's transform converts:
    with a model whose features are a hash of the pixels, each image's feature is that of the picture converted
    first (passed as opened, none of the odd-mode pictures was)."""
    from benchmark_fixtures import odd_mode_pictures, random_features

    folder = tmp_path / "colorswap"
    pictures = odd_mode_pictures(folder / "images", 3)[:2] + odd_mode_pictures(folder / "images", 4)[:2]
    items = [{"id": n, "caption_1": "a red cup", "caption_2": "a blue cup", "image_1": str(pictures[2 * n].relative_to(
        folder)), "image_2": str(pictures[2 * n + 1].relative_to(folder))} for n in range(2)]
    (folder / "test.json").write_text(json.dumps(items))
    model = random_features(5, rgb_after_resize=True)
    encoder = Encoder(model, progress=False)
    data = colorswap.load_root(tmp_path)
    features = encoder.images([image for it in data["items"]["test"] for image in it.images])
    for path, feature in zip(pictures, features):
        with Image.open(path) as im:
            converted, opened = (F.normalize(model.model.encode_image(model.preprocess(p)[None]), dim=-1)[0]
                                 for p in (im.convert("RGB"), im))
        assert torch.allclose(feature, converted) and not torch.allclose(feature, opened)


def test_colorswap_skips_a_missing_image_and_names_a_malformed_example(tmp_path):
    items = write_colorswap(tmp_path)
    (tmp_path / "colorswap" / "images" / "img_3_2.png").unlink()
    with pytest.raises(BenchmarkDataError, match=r"img_3_2\.png is missing"):
        colorswap.load_root(tmp_path)
    assert colorswap.load_root(tmp_path, skip_missing=True)["skipped"] == {"test": 1}
    path = tmp_path / "colorswap" / "test.json"
    path.write_text(json.dumps([items[0], {**items[3], "id": 0}]))
    with pytest.raises(BenchmarkDataError, match=r"test\.json: id 0 is given to items 0 and 1"):
        colorswap.load_root(tmp_path)
    path.write_text(json.dumps([{**items[0], "caption_2": ["a", "b"]}]))
    with pytest.raises(BenchmarkDataError, match=re.escape('item 0 has caption_2 ["a", "b"], not text')):
        colorswap.load_root(tmp_path)
    path.write_text("[{")
    with pytest.raises(BenchmarkDataError, match=r"test\.json: malformed JSON"):
        colorswap.load_root(tmp_path)


# ------------------------------------------------------------------------------------------------ the command

def test_eval_checks_and_runs_mmvp_vlm_eqben_and_colorswap(tmp_path, capsys):
    root = tmp_path / "root"
    write_mmvp(root)
    write_eqben(root)
    write_colorswap(root)
    names = "mmvp_vlm,eqben,colorswap"
    assert main(["eval", "--benchmarks", names, "--data-root", str(root), "--check"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert {"| mmvp_vlm | 11 | 0 |", "| eqben | 32 | 0 |", "| colorswap | 24 | 0 |"} <= set(printed)
    assert main(["eval", "--benchmarks", names, "--data-root", str(root), "--model", "cj-tiny", "--pretrained",
                 "none", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    headline = {"mmvp_vlm": "macro", "eqben": "micro/group", "colorswap": "group"}
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    for name, metric in headline.items():
        result = json.loads((tmp_path / "out" / f"{name}.json").read_text())
        assert result["benchmark"] == name and result["outcomes"]["series"]
        assert all(v is None or 0 <= v <= 1 for v in result["metrics"].values())
        assert summary["compositional"]["parts"][name] == pytest.approx(result["metrics"][metric])
        assert result["chance"][metric] is not None
    (root / "eqben" / "all_select.json").write_text("{}")
    assert main(["eval", "--benchmarks", "eqben", "--data-root", str(root), "--check"]) == 2
    assert "all_select.json: EqBen's all_select.json is a list of items" in " ".join(capsys.readouterr().err.split())
