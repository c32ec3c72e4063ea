"""The validity checks (docs/method.md §7): SugarCrepe's bag-of-words split, the blind baseline of each choice
benchmark and the labelled micro and macro averages, each against a computation of its own from the raw features."""

import json
import re
from collections import Counter

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from benchmark_fixtures import noise_image, random_features, write_winoground
from concrete_jungle.evaluation import report
from concrete_jungle.evaluation.benchmarks import aro, sugarcrepe, sugarcrepe_pp, valse, whatsup, winoground
from concrete_jungle.evaluation.encoding import Encoder
from concrete_jungle.evaluation.validity import MACRO, MICRO
from test_compositional_benchmarks import write_aro, write_valse, write_whatsup

# swap_obj: same words (case, a trailing period and the spaces around a comma aside), and words that differ
SWAPS = [("A dog chasing a cat", "A cat chasing a dog."), ("a cup, on a saucer", "A saucer on a cup"),
         ("a young woman with an old man", "an old woman with a young man"),
         ("a horse pulling a cart", "a cart pulling the horse"), ("two birds on a wire", "a wire on two birds")]


@pytest.fixture(scope="module")
def sugar(tmp_path_factory):
    """A SugarCrepe folder: swap_obj (above) and an add_att subset of another size, so micro and macro differ."""
    root = tmp_path_factory.mktemp("sugar")
    (root / "img").mkdir()
    files = {"swap_obj": SWAPS, "add_att": [(f"a dog {n}", f"a red dog {n}") for n in range(9)]}
    for k, (s, pairs) in enumerate(files.items()):
        items = {}
        for n, (caption, negative) in enumerate(pairs):
            noise_image(root / "img" / f"{s}{n % 3}.jpg", 10 * k + n % 3)  # three items a picture
            items[str(2 * n)] = {"filename": f"{s}{n % 3}.jpg", "caption": caption, "negative_caption": negative}
        (root / f"{s}.json").write_text(json.dumps(items))
    return sugarcrepe.load(root, root / "img")


def words(text):  # a bag of words read apart from the tokenizer's pattern: letters or digits, lower case
    return Counter(re.findall(r"[a-z]+|[0-9]", text.lower()))


@torch.no_grad()
def features(clip, images, texts):
    """Each distinct picture and text encoded alone."""
    pictures = {p: F.normalize(clip.model.encode_image(clip.preprocess(_rgb(p))[None]), dim=-1)[0] for p in images}
    return pictures, {t: F.normalize(clip.model.encode_text(clip.tokenizer([t])), dim=-1)[0] for t in texts}


def _rgb(path):
    from PIL import Image

    with Image.open(getattr(path, "path", path)) as im:
        rgb = im.convert("RGB")
    box = getattr(path, "box", None)
    return rgb if box is None else rgb.crop((box[0], box[1], box[0] + box[2], box[1] + box[3]))


def mean_of(pictures: dict) -> torch.Tensor:
    return F.normalize(torch.stack(list(pictures.values())).mean(0), dim=-1)


def test_sugarcrepe_s_bag_of_words_split_counts_and_scores_its_items_apart(sugar):
    result = sugarcrepe.evaluate(Encoder(random_features(0), progress=False), sugar)
    same = [str(2 * n) for n, (c, neg) in enumerate(SWAPS) if words(c) == words(neg)]
    assert same == ["0", "2", "4", "8"]  # the period, the comma and "A"/"a" aside; "a"/"the" differs
    assert result["bag_of_words"] == {"swap_obj": {"bow_identical": 4, "bow_differs": 1}}  # add_att: none alike
    answers = result["outcomes"]["series"]["swap_obj"]
    flags = dict(zip(answers["keys"], answers["values"]))
    assert result["metrics"]["swap_obj/bow_identical"] == pytest.approx(np.mean([flags[k] for k in same]))
    assert result["metrics"]["swap_obj/bow_differs"] == flags["6"]
    assert "add_att/bow_identical" not in result["metrics"]
    text = report.markdown({"sugarcrepe": result})
    assert "swap_obj 4 of the same words (swap_obj/bow_identical), 1 not (swap_obj/bow_differs)" in text


def test_the_split_and_the_averages_leave_the_official_numbers_as_the_per_item_loop_gives_them(sugar, clip):
    result = sugarcrepe.evaluate(Encoder(clip, progress=False), sugar)
    rows = [it for s in sugar["items"].values() for it in s]
    pictures, texts = features(clip, {it[1] for it in rows}, {t for it in rows for t in it[2:4]})
    accuracy = {}
    for s, items in sugar["items"].items():
        right = [bool(pictures[p] @ texts[c] > pictures[p] @ texts[n]) for _, p, c, n in items]  # a tie is wrong
        assert result["outcomes"]["series"][s]["values"] == [float(r) for r in right]
        accuracy[s] = np.mean(right)
        assert result["metrics"][s] == pytest.approx(accuracy[s])
    # M.Avg: the mean of the subsets; the micro average: of all items (5 and 9 items: they differ)
    assert result["metrics"]["M.Avg"] == pytest.approx(np.mean(list(accuracy.values())))
    all_items = [v for s in sugar["items"] for v in result["outcomes"]["series"][s]["values"]]
    assert result["metrics"]["all items (micro)"] == pytest.approx(np.mean(all_items))
    assert result["averages"] == {"M.Avg": MACRO, "all items (micro)": MICRO}
    table = report.markdown({"sugarcrepe": result})
    assert f"| M.Avg | {100 * result['metrics']['M.Avg']:.2f} |" in table and "| macro (mean of subsets) |" in table


def test_sugarcrepe_s_blind_baseline_scores_the_captions_against_the_mean_picture(sugar, clip):
    result = sugarcrepe.evaluate(Encoder(clip, progress=False), sugar)
    rows = [it for s in sugar["items"].values() for it in s]
    pictures, texts = features(clip, {it[1] for it in rows}, {t for it in rows for t in it[2:4]})
    mean = mean_of(pictures)  # each of the 6 pictures once, though three items show each
    assert result["blind"]["pictures"] == 6
    for s, items in sugar["items"].items():
        right = [float(mean @ texts[c] > mean @ texts[n]) for _, _, c, n in items]
        assert result["blind"]["metrics"][s] == pytest.approx(np.mean(right), abs=1e-9)
    assert set(result["blind"]["metrics"]) == set(result["metrics"])
    assert f"| {100 * result['blind']['metrics']['M.Avg']:.2f} |" in report.markdown({"sugarcrepe": result})


def test_a_tie_against_the_mean_picture_follows_the_benchmark_s_own_tie_rule(tmp_path):
    # identical captions score alike against any picture: wrong in SugarCrepe (strict), as the model's own tie
    (tmp_path / "img").mkdir()
    noise_image(tmp_path / "img" / "a.jpg", 1)
    items = {"0": {"filename": "a.jpg", "caption": "a dog on a sofa", "negative_caption": "A dog on a sofa"}}
    (tmp_path / "swap_att.json").write_text(json.dumps(items))
    data = sugarcrepe.load(tmp_path, tmp_path / "img")
    result = sugarcrepe.evaluate(Encoder(random_features(0), progress=False), data)
    assert result["metrics"]["swap_att"] == 0 and result["blind"]["metrics"]["swap_att"] == 0
    assert result["metrics"]["swap_att/bow_identical"] == 0


@pytest.mark.parametrize("name", ["aro", "valse", "whatsup"])
def test_choice_benchmarks_blind_pick_is_the_official_argmax_against_the_mean_picture(tmp_path, clip, name):
    if name == "aro":
        write_aro(tmp_path / "aro")
        data, module, right_at = aro.load(tmp_path / "aro"), aro, 1  # [false, true]: a tie is wrong
        options = {s: [[it[2], it[3]] for it in items] for s, items in data["items"].items()}
    elif name == "valse":
        write_valse(tmp_path / "valse")
        data, module, right_at = valse.load(tmp_path / "valse"), valse, 1
        options = {s: [[it[2], it[3]] for it in items] for s, items in data["items"].items()}
    else:
        write_whatsup(tmp_path / "whatsup", tmp_path / "coco")
        data, module, right_at = whatsup.load(tmp_path / "whatsup", tmp_path / "coco"), whatsup, 0  # a tie is right
        options = {s: [it[2] for it in items] for s, items in data["items"].items()}
    result = module.evaluate(Encoder(clip, progress=False), data)
    crops = {it[1] for items in data["items"].values() for it in items}
    pictures, texts = features(clip, crops, {t for rows in options.values() for row in rows for t in row})
    mean = mean_of(pictures)
    assert result["blind"]["pictures"] == len(crops)
    for s, rows in options.items():
        picks = [int(np.argmax([float(mean @ texts[t]) for t in row])) for row in rows]
        expected = np.mean([p == right_at for p in picks])
        key = {"vg_relation": "VG-Relation (micro)", "vg_attribution": "VG-Attribution (micro)"}.get(s, s)
        assert result["blind"]["metrics"][key] == pytest.approx(expected, abs=1e-9)


def test_micro_and_macro_averages_of_aro_valse_and_whatsup_are_labelled(tmp_path, clip):
    write_whatsup(tmp_path / "whatsup", tmp_path / "coco")
    result = whatsup.evaluate(Encoder(clip, progress=False), whatsup.load(tmp_path / "whatsup", tmp_path / "coco"))
    subsets = ["controlled_a", "coco_qa_two"]
    assert result["metrics"]["all subsets (macro)"] == pytest.approx(np.mean([result["metrics"][s] for s in subsets]))
    items = [v for s in subsets for v in result["outcomes"]["series"][s]["values"]]
    assert result["metrics"]["all items (micro)"] == pytest.approx(np.mean(items))
    assert result["averages"] == {"all subsets (macro)": MACRO, "all items (micro)": MICRO}
    write_aro(tmp_path / "aro")
    labels = aro.evaluate(Encoder(clip, progress=False), aro.load(tmp_path / "aro"))["averages"]
    assert labels == {"VG-Relation (all relations)": MACRO, "VG-Relation (micro)": MICRO,
                      "VG-Attribution": MACRO, "VG-Attribution (micro)": MICRO}


def test_sugarcrepe_pp_blind_itt_and_winoground_s_blind_text_score(data_root, tmp_path, clip):
    data = sugarcrepe_pp.load(data_root / "sugarcrepe_pp", data_root / "coco" / "val2017")
    result = sugarcrepe_pp.evaluate(Encoder(clip, progress=False), data)
    rows = [it for s in data["items"].values() for it in s]
    pictures, texts = features(clip, {it[1] for it in rows}, {t for it in rows for t in it[2:5]})
    mean = mean_of(pictures)
    for s, items in data["items"].items():
        itt = [float(mean @ texts[p1] > mean @ texts[n] and mean @ texts[p2] > mean @ texts[n])
               for _, _, p1, p2, n in items]
        assert result["blind"]["metrics"][f"{s}/ITT"] == pytest.approx(np.mean(itt), abs=1e-9)
    assert not any(k.endswith("/TOT") for k in result["blind"]["metrics"])  # TOT reads no picture
    # Winoground's text score needs each image to prefer its own caption: one picture for both can't
    write_winoground(tmp_path / "wino", "a dog {} on a cat", "a cat {} on a dog")
    result = winoground.evaluate(Encoder(clip, progress=False), winoground.load(tmp_path / "wino"))
    assert result["blind"]["metrics"]["text"] == 0 and result["blind"]["pictures"] == 12
    assert set(result["blind"]["metrics"]) == {"text", "Object/text", "Relation/text"}
