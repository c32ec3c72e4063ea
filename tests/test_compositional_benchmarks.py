"""ARO, What'sUp, VALSE and COCO retrieval on fixtures in their official formats: each rule (the tie, the macro
average, the filtered items) against the straightforward per-item loop of the official code."""

import json
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from benchmark_fixtures import noise_image
from concrete_jungle.cli import main
from concrete_jungle.evaluation import load_data
from concrete_jungle.evaluation.benchmarks import aro, valse, whatsup
from concrete_jungle.evaluation.checks import BenchmarkDataError
from concrete_jungle.evaluation.encoding import Encoder
from concrete_jungle.outcomes import metric_values


@torch.no_grad()
def official_pick(clip, path, captions, box=None):
    """The official loop for one item: the picture converted to RGB, cut to its box, scored against each caption;
    numpy's argmax."""
    with Image.open(path) as im:
        rgb = im.convert("RGB")
    if box is not None:
        x, y, w, h = box
        rgb = rgb.crop((x, y, x + w, y + h))
    image = F.normalize(clip.model.encode_image(clip.preprocess(rgb)[None]), dim=-1)
    # each caption encoded alone, and its own dot product: in a batch (or a matrix product) the rows of two equal
    # captions can round apart on some CPUs, and the official tie would then go to whichever rounded up
    texts = F.normalize(torch.cat([clip.model.encode_text(clip.tokenizer([c])) for c in captions]), dim=-1)
    return int(np.argmax((image * texts).sum(-1).numpy()))


# ------------------------------------------------------------------------------------------------ ARO


def write_aro(root):
    (root / "images").mkdir(parents=True)
    for i in range(4):
        noise_image(root / "images" / f"vg{i}.jpg", 40 + i, size=(80, 60))
    relation = []
    for n in range(24):
        rel = ["on", "next to", "under"][n % 3]
        relation.append({"image_path": f"vg{n % 4}.jpg", "bbox_x": n % 5 * 4, "bbox_y": n % 3 * 5, "bbox_w": 40 + n,
                         "bbox_h": 30, "relation_name": rel, "true_caption": f"the cup is {rel} the table {n}",
                         "false_caption": f"the table is {rel} the cup {n}"})
    relation[0]["false_caption"] = relation[0]["true_caption"]  # a tie
    attribution = []
    for n in range(31):  # 25 items of one pair of attributes, 6 of another (below the official 25: dropped)
        a = ("red", "wooden") if n < 25 else ("small", "blue")
        attribution.append({"image_path": f"vg{n % 4}.jpg", "bbox_x": 0, "bbox_y": 0, "bbox_w": 50, "bbox_h": 40 + n,
                            "attributes": list(a), "true_caption": f"the {a[0]} box and the {a[1]} door {n}",
                            "false_caption": f"the {a[1]} box and the {a[0]} door {n}"})
    (root / "visual_genome_relation.json").write_text(json.dumps(relation))
    (root / "visual_genome_attribution.json").write_text(json.dumps(attribution))
    return relation, attribution


def test_aro_follows_the_official_crops_order_ties_and_macro_averages(tmp_path, clip):
    relation, attribution = write_aro(tmp_path / "aro")
    data = aro.load(tmp_path / "aro")
    result = aro.evaluate(Encoder(clip, batch_size=7, progress=False), data)

    def right(items):
        return [official_pick(clip, tmp_path / "aro" / "images" / it["image_path"],
                              [it["false_caption"], it["true_caption"]],
                              (it["bbox_x"], it["bbox_y"], it["bbox_w"], it["bbox_h"])) == 1 for it in items]

    rel_right, att_right = right(relation), right(attribution)
    assert rel_right[0] is False  # a tie is wrong: the false caption is listed first
    assert result["outcomes"]["series"]["vg_relation"]["values"] == [float(x) for x in rel_right]
    per_relation = {r: np.mean([ok for ok, it in zip(rel_right, relation) if it["relation_name"] == r])
                    for r in ("on", "next to", "under")}
    metrics = result["metrics"]
    assert metrics["VG-Relation (all relations)"] == pytest.approx(np.mean(list(per_relation.values())))
    assert metrics["VG-Relation (micro)"] == pytest.approx(np.mean(rel_right))
    # only the attribute pair with at least 25 items counts in the macro average; the micro counts every item
    assert metrics["VG-Attribution"] == pytest.approx(np.mean(att_right[:25]))
    assert metrics["VG-Attribution (micro)"] == pytest.approx(np.mean(att_right))
    assert not any(k.startswith("vg_relation/") for k in metrics)  # per relation: in the outcomes, not listed
    # the notebook's symmetric relations, when given, leave the macro average
    (tmp_path / "aro" / "vg_relation_symmetric.txt").write_text("next to\n")
    official = aro.evaluate(Encoder(clip, progress=False), aro.load(tmp_path / "aro"))["metrics"]
    assert official["VG-Relation"] == pytest.approx((per_relation["on"] + per_relation["under"]) / 2)
    assert "VG-Relation (all relations)" not in official


def test_aro_scores_a_box_outside_its_image_on_black_as_the_official_code_and_counts_it(tmp_path, clip):
    from concrete_jungle import evaluation

    relation, _ = write_aro(tmp_path / "aro")
    relation[1].update(bbox_x=500)  # the images are 80 x 60: right of the picture
    relation[2].update(bbox_y=-100, bbox_h=30)  # above it
    relation[3].update(bbox_x=70, bbox_w=40)  # half outside: a crop with pixels, not counted
    (tmp_path / "aro" / "visual_genome_relation.json").write_text(json.dumps(relation))
    data = load_data("aro", tmp_path, skip_missing=False)
    assert data["boxes_outside_image"] == {"vg_relation": 2, "vg_attribution": 0}
    result = evaluation.run(Encoder(clip, progress=False), ["aro"], {"aro": data}, out=tmp_path / "out")["aro"]
    right = [official_pick(clip, tmp_path / "aro" / "images" / it["image_path"], [it["false_caption"],
                           it["true_caption"]], (it["bbox_x"], it["bbox_y"], it["bbox_w"], it["bbox_h"])) == 1
             for it in relation[:4]]
    assert result["outcomes"]["series"]["vg_relation"]["values"][:4] == [float(x) for x in right]  # the same rule
    written = json.loads((tmp_path / "out" / "aro.json").read_text())
    assert written["boxes_outside_image"] == {"vg_relation": 2, "vg_attribution": 0}
    note = "vg_relation: 2 item(s) have a box wholly outside their image (items 1, 2); each is scored on an " \
           "all-black crop"
    assert note in written["notes"][0] and note in (tmp_path / "out" / "results.md").read_text()


# ------------------------------------------------------------------------------------------------ What'sUp


def write_whatsup(root, coco):
    (root / "controlled_images").mkdir(parents=True)
    items, seed = [], 0
    for a, b in (("mug", "plate"), ("book", "chair")):
        for prep in ("left_of", "right_of", "on", "under"):
            name = f"{a}_{prep}_{b}.jpeg"
            seed += 1
            noise_image(root / "controlled_images" / name, 70 + seed)
            word = prep.replace("_of", "")
            options = [f"A {a} {word} of a {b}" if "of" in prep else f"A {a} {word} a {b}"]
            options += [f"A {a} {w} a {b}" for w in ("on", "under", "left", "right") if w != word][:3]
            items.append({"image_path": f"data/controlled_images/{name}", "caption_options": options})
    items[0]["caption_options"] = [items[0]["caption_options"][0]] * 4  # a four-way tie
    (root / "controlled_images_dataset.json").write_text(json.dumps(items))
    coco.mkdir(parents=True)
    qa = []
    for n in range(5):
        noise_image(coco / f"{n + 1:012d}.jpg", 90 + n)
        qa.append([n + 1, f"a dog to the left of a cat {n}", f"a dog to the right of a cat {n}"])
    (root / "coco_qa_two_obj.json").write_text(json.dumps(qa))
    return items, qa


def test_whatsup_counts_ties_right_and_scores_pairs_and_sets_as_the_official_code(tmp_path, clip):
    items, qa = write_whatsup(tmp_path / "whatsup", tmp_path / "coco" / "val2017")
    data = whatsup.load(tmp_path / "whatsup", tmp_path / "coco" / "val2017")
    result = whatsup.evaluate(Encoder(clip, batch_size=3, progress=False), data)
    right = [official_pick(clip, tmp_path / "whatsup" / "controlled_images" / it["image_path"].split("/")[-1],
                           it["caption_options"]) == 0 for it in items]
    assert right[0] is True  # a tie goes to the caption listed first: the right one
    metrics = result["metrics"]
    assert metrics["controlled_a"] == pytest.approx(np.mean(right))
    # pairs: left/right and on/under of each object pair; sets: all four (official: out of items/2 and items/4)
    pairs = [right[0] and right[1], right[2] and right[3], right[4] and right[5], right[6] and right[7]]
    assert metrics["controlled_a/pair"] == pytest.approx(sum(pairs) / (len(items) / 2))
    assert metrics["controlled_a/set"] == pytest.approx(sum([all(right[:4]), all(right[4:])]) / (len(items) / 4))
    qa_right = [official_pick(clip, tmp_path / "coco" / "val2017" / f"{q[0]:012d}.jpg", q[1:]) == 0 for q in qa]
    assert metrics["coco_qa_two"] == pytest.approx(np.mean(qa_right))
    # the four images of an object pair are one unit of resampling
    assert set(result["outcomes"]["series"]["controlled_a"]["units"]) == {"controlled_a/mug/plate",
                                                                          "controlled_a/book/chair"}


@pytest.mark.parametrize("image_id", [1.7, "1.7", True])
def test_whatsup_question_ids_must_name_one_image_exactly(tmp_path, image_id):
    _, qa = write_whatsup(tmp_path / "whatsup", tmp_path / "coco" / "val2017")
    qa[3][0] = image_id  # int(1.7) and int(True) would read image 1
    (tmp_path / "whatsup" / "coco_qa_two_obj.json").write_text(json.dumps(qa))
    with pytest.raises(BenchmarkDataError, match=r"coco_qa_two_obj.json: item 3 has the image id "
                                                 + re.escape(json.dumps(image_id)) + ", which names no COCO image"):
        whatsup.load(tmp_path / "whatsup", tmp_path / "coco" / "val2017")
    qa[3][0] = "2"  # the id as text, digits only: image 2 exactly
    (tmp_path / "whatsup" / "coco_qa_two_obj.json").write_text(json.dumps(qa))
    data = whatsup.load(tmp_path / "whatsup", tmp_path / "coco" / "val2017")
    assert data["items"]["coco_qa_two"][3][1].path.name == "000000000002.jpg"


# ------------------------------------------------------------------------------------------------ VALSE


def test_valse_keeps_validated_items_counts_ties_wrong_and_averages_pieces(tmp_path, clip):
    root = tmp_path / "valse"
    (root / "images").mkdir(parents=True)
    pieces = {"existence": "existence", "counting-hard": "counting", "counting-small-quant": "counting"}
    raw = {}
    for p, (piece, phenomenon) in enumerate(pieces.items()):
        raw[piece] = {}
        for n in range(6):
            noise_image(root / "images" / f"{piece}{n}.jpg", 200 + 10 * p + n)
            raw[piece][f"{piece}_{n}"] = {"image_file": f"{piece}{n}.jpg", "caption": f"there are {n} dogs",
                                          "foil": f"there are {n + 1} cats", "linguistic_phenomena": phenomenon,
                                          "mturk": {"caption": 3 if n != 5 else 1, "foil": 0, "other": 0}}
        raw[piece][f"{piece}_0"]["foil"] = raw[piece][f"{piece}_0"]["caption"]  # a tie
        (root / f"{piece}.json").write_text(json.dumps(raw[piece]))
    data = valse.load(root)
    assert data["filtered"] == {piece: 1 for piece in pieces}  # one annotator vote for the caption: not valid
    result = valse.evaluate(Encoder(clip, progress=False), data)
    acc = {}
    for piece in pieces:
        kept = [it for it in raw[piece].values() if it["mturk"]["caption"] >= 2]
        right = [official_pick(clip, root / "images" / it["image_file"], [it["foil"], it["caption"]]) == 1
                 for it in kept]
        assert right[0] is False  # a tie is wrong
        acc[piece] = np.mean(right)
        assert result["metrics"][piece] == pytest.approx(acc[piece])
    assert result["metrics"]["phenomenon/counting"] == pytest.approx((acc["counting-hard"]
                                                                      + acc["counting-small-quant"]) / 2)
    assert result["metrics"]["VALSE"] == pytest.approx(np.mean(list(acc.values())))
    assert metric_values(result["outcomes"])["VALSE"] == result["metrics"]["VALSE"]
    assert result["notes"] == []
    # a piece none of whose items was validated has no score, and the result says so
    for item in raw["existence"].values():
        item["mturk"]["caption"] = 1
    (root / "existence.json").write_text(json.dumps(raw["existence"]))
    data = valse.load(root)
    result = valse.evaluate(Encoder(clip, progress=False), data)
    assert result["metrics"]["VALSE"] == pytest.approx((acc["counting-hard"] + acc["counting-small-quant"]) / 2)
    assert result["notes"] == ["existence: none of its 6 item(s) was validated (at least 2 annotators choosing the "
                               "caption), so it has no score and no part in the averages"]


# ------------------------------------------------------------------------------------------------ the command


def write_coco_karpathy(root, n: int = 6):
    """``coco/dataset_coco.json`` (the Karpathy split): ``n`` test pictures in ``coco/val2014/``, two captions
    each."""
    (root / "coco" / "val2014").mkdir(parents=True)
    images = []
    for i in range(n):
        noise_image(root / "coco" / "val2014" / f"COCO_val2014_{i:012d}.jpg", 300 + i)
        images.append({"filepath": "val2014", "filename": f"COCO_val2014_{i:012d}.jpg", "split": "test",
                       "sentences": [{"raw": f"a photo {i}"}, {"raw": f"a picture {i}"}]})
    (root / "coco" / "dataset_coco.json").write_text(json.dumps({"images": images}))


def test_eval_runs_and_checks_the_new_benchmarks_and_coco_retrieval(tmp_path, capsys):
    root = tmp_path / "root"
    write_aro(root / "aro")
    write_whatsup(root / "whatsup", root / "coco" / "val2017")
    (root / "valse" / "images").mkdir(parents=True)
    noise_image(root / "valse" / "images" / "a.jpg", 1)
    (root / "valse" / "relations.json").write_text(json.dumps(
        {"r0": {"image_file": "a.jpg", "caption": "a cup on a table", "foil": "a table on a cup",
                "linguistic_phenomena": "relations", "mturk": {"caption": 2}}}))
    write_coco_karpathy(root)
    names = "aro,valse,whatsup,coco_retrieval"
    assert main(["eval", "--benchmarks", names, "--data-root", str(root), "--check"]) == 0
    printed = capsys.readouterr().out.splitlines()  # not a terminal: the layout table as Markdown, a row a line
    rows = {"| aro | 55 | 0 |", "| valse | 1 | 0 |", "| whatsup | 13 | 0 |", "| coco_retrieval | 6 | 0 |"}
    assert rows <= set(printed)
    assert main(["eval", "--benchmarks", names, "--data-root", str(root), "--model", "cj-tiny", "--pretrained",
                 "none", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    results = {}
    for name in names.split(","):
        results[name] = json.loads((tmp_path / "out" / f"{name}.json").read_text())
        assert results[name]["outcomes"] and all(v is None or 0 <= v <= 1 for v in results[name]["metrics"].values())
    # the summary line: the mean of each benchmark's headline number, compositional and recognition apart
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    aro_headline = (results["aro"]["metrics"]["VG-Relation (all relations)"]
                    + results["aro"]["metrics"]["VG-Attribution"]) / 2
    assert summary["compositional"]["parts"]["aro"] == pytest.approx(aro_headline)
    assert summary["compositional"]["mean"] == pytest.approx(np.mean(list(summary["compositional"]["parts"].values())))
    assert set(summary["compositional"]["parts"]) == {"aro", "valse", "whatsup"}
    assert set(summary["recognition"]["parts"]) == {"coco_retrieval"}
    assert "**Compositional:" in (tmp_path / "out" / "results.md").read_text()
    (root / "aro" / "images" / "vg1.jpg").unlink()
    assert main(["eval", "--benchmarks", "aro", "--data-root", str(root), "--check"]) == 2
    assert "aro/images/vg1.jpg is missing" in " ".join(capsys.readouterr().err.split())


# ------------------------------------------------------------------------------------------------ zero-shot


def test_zeroshot_equals_clip_benchmark_s_own_evaluation(tmp_path, clip):
    from clip_benchmark.metrics import zeroshot_classification
    from torchvision.datasets import ImageFolder

    from concrete_jungle.evaluation.benchmarks import zeroshot

    folder = tmp_path / "zeroshot" / "mine"
    for c in range(6):
        (folder / "test" / f"class_{c}").mkdir(parents=True)
        for n in range(4 if c else 0):  # class 0 has no image: the mean per-class recall skips it
            noise_image(folder / "test" / f"class_{c}" / f"{n}.jpg", 10 * c + n)
    names = ["dog", "cat", "red car", "tree", "old boat", "cup"]
    (folder / "classnames.txt").write_text("\n".join(names))
    templates = ["a photo of a {c}.", "a drawing of the {c}.", "{c}"]
    (folder / "templates.txt").write_text("\n".join(templates))
    data = zeroshot.load(tmp_path / "zeroshot")
    assert data["datasets"]["mine"]["sources"] == {"classnames": "classnames.txt", "templates": "templates.txt"}
    result = zeroshot.evaluate(Encoder(clip, batch_size=5, progress=False), data)
    loader = torch.utils.data.DataLoader(ImageFolder(str(folder / "test"), transform=clip.preprocess,
                                                     allow_empty=True), batch_size=7)
    # clip_benchmark's classifier and logits; its `accuracy` helper fails under numpy 2 (float() of a 1-element
    # array), so its formula is written out here: top-k by torch.topk, balanced accuracy by scikit-learn
    from sklearn.metrics import balanced_accuracy_score

    weights = zeroshot_classification.zero_shot_classifier(clip.model, clip.tokenizer, names, templates, "cpu",
                                                           amp=False)
    logits, target = zeroshot_classification.run_classification(clip.model, weights, loader, "cpu", amp=False)
    top = logits.topk(5, 1, True, True)[1].t()
    correct = top.eq(target.view(1, -1).expand_as(top))
    official = {"acc1": correct[:1].float().sum().item() / len(target),
                "acc5": correct[:5].float().sum().item() / len(target),
                "mean_per_class_recall": balanced_accuracy_score(target, logits.argmax(1))}
    metrics = result["metrics"]
    assert metrics["mine/acc1"] == pytest.approx(official["acc1"])
    assert metrics["mine/acc5"] == pytest.approx(official["acc5"])
    assert metrics["mine/mean_per_class_recall"] == pytest.approx(official["mean_per_class_recall"])
    assert metrics["acc1 (mean over datasets)"] == metrics["mine/acc1"]
    # without the two files: clip_benchmark's prompts (ImageNet's for a dataset it does not know), folder names
    for name in ("classnames.txt", "templates.txt"):
        (folder / name).unlink()
    sources = zeroshot.load(tmp_path / "zeroshot")["datasets"]["mine"]
    assert sources["classes"][1] == "class 1" and len(sources["templates"]) == 80
    assert sources["sources"]["templates"] == "clip_benchmark (imagenet1k)"


# ------------------------------------------------------------------------------------------------ ARO order


def test_aro_order_items_are_fixed_scrambles_of_the_caption_scored_with_ties_to_the_caption(tmp_path, clip):
    from concrete_jungle.evaluation.benchmarks import aro_order

    (tmp_path / "coco" / "val2014").mkdir(parents=True)
    captions = ["A small red dog sits on a wooden bench near the old tree.", "Two people ride bikes down a road!",
                "dog"]  # one word: every scramble equals the caption, a five-way tie
    images = []
    for i in range(2):
        noise_image(tmp_path / "coco" / "val2014" / f"c{i}.jpg", 400 + i)
        images.append({"filepath": "val2014", "filename": f"c{i}.jpg", "split": "test",
                       "sentences": [{"raw": c} for c in (captions if i == 0 else captions[:1])]})
    (tmp_path / "coco" / "dataset_coco.json").write_text(json.dumps({"images": images}))
    data = aro_order.load(tmp_path)
    assert list(data["items"]) == ["coco_order"] and len(data["items"]["coco_order"]) == 4
    assert aro_order.load(tmp_path)["items"] == data["items"]  # fixed: the same scrambles on every load
    first = data["items"]["coco_order"][0][2]
    assert first[0] == "a small red dog sits on a wooden bench near the old tree"  # pre_caption: lower, no "."
    assert all(sorted(o.split()) == sorted(first[0].split()) for o in first[1:])  # the same words, scrambled
    assert len(set(first)) == 5
    result = aro_order.evaluate(Encoder(clip, progress=False), data)
    right = [official_pick(clip, it[1].path, it[2]) == 0 for it in data["items"]["coco_order"]]
    assert right[2] is True  # the tie goes to the caption
    assert result["metrics"]["coco_order"] == pytest.approx(np.mean(right))
    assert result["outcomes"]["series"]["coco_order"]["units"] == ["val2014/c0.jpg"] * 3 + ["val2014/c1.jpg"]


ORDER_CAPTIONS = [
    "A man with a red helmet on a small moped on a dirt road. ", "Man riding a motor bike on a dirt road on the "
    "countryside.", "A man riding on the back of a motorcycle.", "A dirt path with a young person on a motor bike "
    "rests to the foreground of a verdant area with a bridge and a background of cloud-wreathed mountains. ",
    "A man in a red shirt and a red hat is on a motorcycle on a hill side.", "dog", "Running fast!",
    'A "red" bus, parked (badly) near the old station; two people wait.', "A dog runs. A cat sleeps on the warm mat.",
    "Two  women's bags and 3 small kids' shoes\n", "IS THIS A KITCHEN? yes, with a tall white fridge.",
    "A well-lit, half-empty room with one chair", "", "a cat", "Three brown horses and a big black dog eat green "
    "grass in a wide open field while a tall old farmer with a wooden stick and a straw hat watches them from "
    "behind a low stone wall near the red barn",
]


def official_order_options(captions, nlp, tokenize):
    """The official COCO_Order items, as ``main_aro.py`` makes them (transcribed for this test): ``seed_all(1)``,
    then per caption its five options, the shuffles drawn from the global numpy and Python generators in the order
    TextShuffler's functions draw them (nouns, then adjectives, then the other tokens, with numpy; the tokens within
    each trigram, then the trigrams, with Python's random). The generators' states are put back afterwards."""
    from concrete_jungle.evaluation.benchmarks.aro_order import pre_caption

    states = random.getstate(), np.random.get_state()
    random.seed(1)
    np.random.seed(1)

    def grouped(tokens):
        return [tokens[i: i + 3] for i in range(0, len(tokens), 3)]

    items = []
    for caption in captions:
        doc = nlp(caption)
        text = np.array([t.text for t in doc])
        for tags in (["NN", "NNS", "NNP", "NNPS"], ["JJ", "JJR", "JJS"]):
            at = [i for i, t in enumerate(doc) if t.tag_ in tags]
            text[at] = np.random.permutation(text[at])
        nouns_and_adjectives = " ".join(text)
        text = np.array([t.text for t in doc])
        rest = np.ones(text.shape[0])
        rest[[i for i, t in enumerate(doc) if t.tag_ in ["NN", "NNS", "NNP", "NNPS", "JJ", "JJR", "JJS"]]] = 0
        rest = rest.astype(bool)
        text[rest] = np.random.permutation(text[rest])
        all_but = " ".join(text)
        within = grouped(tokenize(caption))
        for group in within:
            random.shuffle(group)
        across = grouped(tokenize(caption))
        random.shuffle(across)
        scrambled = [nouns_and_adjectives, all_but, " ".join(" ".join(g) for g in within),
                     " ".join(" ".join(g) for g in across)]
        items.append([pre_caption(caption)] + [pre_caption(x) for x in scrambled])
    random.setstate(states[0])
    np.random.set_state(states[1])
    return items


def punkt_installed() -> bool:
    import nltk

    try:
        nltk.word_tokenize("A dog. A cat.")
    except LookupError:
        return False
    return True


def test_aro_order_items_are_the_official_code_s_after_seed_all_1(tmp_path, nlp):
    """The options of 15 captions (two pictures) equal those of the official loop after ``seed_all(1)``; the old
    code drew each caption's shuffles from a generator of its own (seed [0, k]) and split the trigrams with spaCy:
    2 of the 15 items were the official ones ("dog" and the empty caption, whose scrambles are the caption; 28 of the
    75 options), now all 15. A picture
    skipped as missing leaves the other items' options as they are (the draws run over every caption listed)."""
    from concrete_jungle.evaluation.benchmarks import aro_order

    (tmp_path / "coco" / "val2014").mkdir(parents=True)
    images = []
    for i, captions in enumerate((ORDER_CAPTIONS[:5], ORDER_CAPTIONS[5:])):
        noise_image(tmp_path / "coco" / "val2014" / f"o{i}.jpg", 450 + i)
        images.append({"filepath": "val2014", "filename": f"o{i}.jpg", "split": "test",
                       "sentences": [{"raw": c} for c in captions]})
    (tmp_path / "coco" / "dataset_coco.json").write_text(json.dumps({"images": images}))
    data = aro_order.load(tmp_path)
    tokenize = __import__("nltk").word_tokenize if punkt_installed() else aro_order.word_tokens
    official = official_order_options(ORDER_CAPTIONS, nlp, tokenize)
    ours = [item[2] for item in data["items"]["coco_order"]]
    assert ours == official
    assert [item[0] for item in data["items"]["coco_order"]][4:6] == ["val2014/o0.jpg#4", "val2014/o1.jpg#0"]
    assert ours[0][0] == "a man with a red helmet on a small moped on a dirt road"  # the caption, pre_caption'd
    (tmp_path / "coco" / "val2014" / "o0.jpg").unlink()
    kept = aro_order.load(tmp_path, skip_missing=True)
    assert kept["skipped"] == {"coco_order": 5}
    assert [item[2] for item in kept["items"]["coco_order"]] == official[5:]


def test_aro_order_tokens_are_nltk_s_word_tokenize(tmp_path):
    """The trigram shuffles split a caption as ``nltk.word_tokenize`` (Punkt's sentences, then the Treebank word
    tokenizer in each): with NLTK's Punkt model installed, exactly; without it (nothing is downloaded), the same on
    every caption without a period before its end, and a period that ends a sentence is split off as Punkt
    splits it."""
    import nltk

    from concrete_jungle.evaluation.benchmarks.aro_order import word_tokens

    if punkt_installed():
        assert [word_tokens(c) for c in ORDER_CAPTIONS] == [nltk.word_tokenize(c) for c in ORDER_CAPTIONS]
    for caption in ORDER_CAPTIONS:
        if not re.search(r"\.\s+\S", caption):
            assert word_tokens(caption) == nltk.word_tokenize(caption, preserve_line=True)
    assert word_tokens("A dog runs. A cat sleeps on the warm mat.") == [
        "A", "dog", "runs", ".", "A", "cat", "sleeps", "on", "the", "warm", "mat", "."]
    assert word_tokens('A "red" bus, parked.') == ["A", "``", "red", "\'\'", "bus", ",", "parked", "."]


def test_zeroshot_reads_a_dataset_root_clip_benchmark_prepared_with_its_classes_and_prompts(tmp_path, clip):
    from clip_benchmark.datasets.builder import build_dataset
    from clip_benchmark.metrics import zeroshot_classification

    from concrete_jungle.evaluation.benchmarks import zeroshot

    base = tmp_path / "zeroshot" / "renderedsst2" / "rendered-sst2"  # torchvision's RenderedSST2 layout
    for split in ("train", "valid", "test"):
        for c, label in enumerate(("negative", "positive")):
            (base / split / label).mkdir(parents=True)
            for n in range(3 if split == "test" else 1):
                noise_image(base / split / label / f"{n}.png", 500 + 10 * c + n)
    data = zeroshot.load(tmp_path / "zeroshot")
    assert data["datasets"]["renderedsst2"]["sources"]["classnames"] == "clip_benchmark's builder"
    result = zeroshot.evaluate(Encoder(clip, batch_size=4, progress=False), data)
    dataset = build_dataset("renderedsst2", root=str(tmp_path / "zeroshot" / "renderedsst2"),
                            transform=clip.preprocess, split="test", download=False)
    weights = zeroshot_classification.zero_shot_classifier(clip.model, clip.tokenizer, dataset.classes,
                                                           dataset.templates, "cpu", amp=False)
    logits, target = zeroshot_classification.run_classification(
        clip.model, weights, torch.utils.data.DataLoader(dataset, batch_size=4), "cpu", amp=False)
    assert result["metrics"]["renderedsst2/acc1"] == pytest.approx((logits.argmax(1) == target).float().mean().item())
    assert "renderedsst2/acc5" not in result["metrics"]  # two classes: no top-5, as clip_benchmark
    assert result["n"] == {"renderedsst2": 6}


def test_training_evaluates_the_new_benchmarks_as_it_goes(planted, tmp_path):
    root = tmp_path / "root"
    write_aro(root / "aro")
    write_whatsup(root / "whatsup", root / "coco" / "val2017")
    out = tmp_path / "run"
    assert main(["train", "--data", str(planted), "--out", str(out), "--steps", "2", "--batch-size", "8",
                 "--set", "model.name=cj-tiny", "--set", "model.pretrained=none", "--set", "data.workers=0",
                 "--set", "eval.every=2", "--set", "eval.benchmarks=[aro,whatsup]", "--set",
                 f"eval.data_root={root}", "--set", "eval.subset=4", "--no-progress"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    scores = next(r for r in rows if "eval/aro/VG-Attribution (micro)" in r)
    assert scores["step"] == 2 and 0 <= scores["eval/whatsup/controlled_a"] <= 1


# ------------------------------------------------------------------------------------------------ zero-shot names


def write_zeroshot(folder, names=("dog", "cat", "red car"), templates=("a photo of a {c}.", "{c}")):
    for c in range(len(names)):
        (folder / "test" / f"class_{c}").mkdir(parents=True)
        noise_image(folder / "test" / f"class_{c}" / "0.jpg", 600 + c)
    (folder / "classnames.txt").write_text("\n".join(names))
    (folder / "templates.txt").write_text("\n".join(templates))


def test_a_zeroshot_class_name_given_twice_is_an_error_naming_the_file_the_name_and_both_lines(tmp_path, capsys):
    write_zeroshot(tmp_path / "zeroshot" / "mine", names=("dog", "cat", "tree", "cat"))
    (tmp_path / "zeroshot" / "mine" / "classnames.txt").write_text("dog\ncat\n\ntree\ncat\n")  # line 3 is blank
    assert main(["eval", "--benchmarks", "zeroshot", "--data-root", str(tmp_path), "--check"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{tmp_path / 'zeroshot' / 'mine' / 'classnames.txt'}: class name 'cat' is given twice (line 2 and " \
           "line 5); each class needs a name of its own, or the second can never be predicted" in err
    (tmp_path / "zeroshot" / "mine" / "classnames.txt").unlink()  # the folders' names, two of them alike
    (tmp_path / "zeroshot" / "mine" / "test" / "class_3").rename(tmp_path / "zeroshot" / "mine" / "test" / "class 0")
    with pytest.raises(BenchmarkDataError, match="class name 'class 0' is given twice .folder class 0 and folder "
                                                 "class_0."):
        load_data("zeroshot", tmp_path, skip_missing=False)


def test_clip_benchmark_s_own_repeated_class_names_are_kept_as_its_rule_and_noted(tmp_path):
    from clip_benchmark.datasets import builder

    known = json.loads((Path(builder.__file__).parent / "en_classnames.json").read_text())["imagenet1k"]
    folder = tmp_path / "zeroshot" / "imagenet1k"
    for c in range(len(known)):  # ImageNet-1k's val split by class index: clip_benchmark's names for it
        (folder / "test" / f"n{c:04d}").mkdir(parents=True)
        noise_image(folder / "test" / f"n{c:04d}" / "0.png", c, size=(8, 8))
    data = load_data("zeroshot", tmp_path, skip_missing=False)
    assert data["datasets"]["imagenet1k"]["classes"] == known
    at = {name: [i for i, known_name in enumerate(known) if known_name == name] for name in ("missile", "sunglasses")}
    assert data["notes"] == [f"imagenet1k: clip_benchmark's class names give {name!r} to two classes (entries "
                             f"{a} and {b}); kept as clip_benchmark scores them, so the second can never be predicted"
                             for name, (a, b) in at.items()]


# ---------------------------------------------------------------------------------- zero-shot as clip_benchmark


def clip_benchmark_zeroshot(model, folder, names, templates, allow_empty=False):
    """clip_benchmark's own evaluation of an ImageFolder split (torchvision's reader and loader, its classifier and
    logits): per image its label, topk's top-1 and argmax's pick, and its three metrics (its `accuracy` helper
    fails under numpy 2, float() of a 1-element array: its formula is written out, topk then sklearn)."""
    from clip_benchmark.metrics import zeroshot_classification
    from sklearn.metrics import balanced_accuracy_score
    from torchvision.datasets import ImageFolder

    dataset = ImageFolder(str(folder), transform=model.preprocess, allow_empty=allow_empty)
    weights = zeroshot_classification.zero_shot_classifier(model.model, model.tokenizer, names, templates, "cpu",
                                                           amp=False)
    logits, target = zeroshot_classification.run_classification(
        model.model, weights, torch.utils.data.DataLoader(dataset, batch_size=7), "cpu", amp=False)
    top = logits.topk(5 if len(names) >= 5 else 1, 1, True, True)[1]
    return {"samples": dataset.samples, "top1": top[:, 0], "argmax": logits.argmax(1),
            "acc1": (top[:, 0] == target).float().mean().item(),
            "acc5": (top == target[:, None]).any(1).float().mean().item() if len(names) >= 5 else None,
            "mean_per_class_recall": balanced_accuracy_score(target, logits.argmax(1))}


def test_zeroshot_reads_the_files_torchvision_s_image_folder_reads_and_notes_the_others(tmp_path):
    """torchvision's ImageFolder reads .tif/.ppm/.pgm (any case) and sub-folders, walked in the sorted order of their
    paths. The old reader took only the files directly in a class folder ending in .jpg/.jpeg/.png/.bmp/.webp: here 4
    of the 9 pictures (0.jpg, 5.webp, b.png, c.JPG), leaving out 5 without a word."""
    from torchvision.datasets import ImageFolder

    test = tmp_path / "zeroshot" / "mine" / "test"
    files = ["cat/0.jpg", "cat/1.TIF", "cat/deep/2.ppm", "cat/deep/x/3.tiff", "cat/deep-er/4.pgm", "dog/5.webp",
             "dog/a/6.jpeg", "dog/b.png", "dog/c.JPG", "dog/notes.txt", "dog/a/moving.gif"]
    for n, name in enumerate(files):
        (test / name).parent.mkdir(parents=True, exist_ok=True)
        picture = Image.fromarray(np.full((8, 8, 3), 20 * n, dtype=np.uint8))
        picture.convert("L" if name.endswith("pgm") else "RGB").save(test / name, format="GIF" if name.endswith(
            "gif") else None) if not name.endswith("txt") else (test / name).write_text("not a picture")
    (test.parent / "templates.txt").write_text("{c}")
    data = load_data("zeroshot", tmp_path, skip_missing=False)
    ours = [(str(p), y) for p, y in data["items"]["mine"]]
    assert ours == ImageFolder(str(test)).samples and len(ours) == 9
    assert data["notes"] == [f"{test}: 2 file(s) in the class folders are not read (dog/notes.txt, dog/a/moving.gif):"
                             " their names do not end in one of torchvision's image extensions (.jpg .jpeg .png .ppm"
                             " .bmp .pgm .tif .tiff .webp), and torchvision's ImageFolder does not read them either"]


def test_zeroshot_converts_every_picture_to_rgb_before_the_transform_as_torchvision_s_loader(tmp_path):
    """Palette, RGBA, LA and 16-bit pictures give other pixels when converted to RGB after the resize (as the old
    code passed them, as opened, to a transform that converts last; CMYK gives the same here): with a model whose
    features are a hash of the pixels, the old code agreed with clip_benchmark on 13 of the 20 pictures' top-1 (acc1
    and mean per-class recall 0.40 against clip_benchmark's 0.55); each now equals clip_benchmark's."""
    from benchmark_fixtures import odd_mode_pictures, random_features
    from concrete_jungle.evaluation.benchmarks import zeroshot

    test = tmp_path / "zeroshot" / "mine" / "test"
    for c, name in enumerate(("cat", "dog")):
        for seed in range(2):
            odd_mode_pictures(test / name, 10 * c + seed)
    (test.parent / "templates.txt").write_text("a photo of a {c}.\n{c}")
    model = random_features(3, rgb_after_resize=True)
    result = zeroshot.evaluate(Encoder(model, batch_size=3, progress=False), zeroshot.load(tmp_path / "zeroshot"))
    official = clip_benchmark_zeroshot(model, test, ["cat", "dog"], ["a photo of a {c}.", "{c}"])
    labels = [y for _, y in official["samples"]]
    assert result["outcomes"]["series"]["mine/acc1"]["values"] == [
        bool(top == y) for top, y in zip(official["top1"].tolist(), labels)]
    assert result["metrics"]["mine/acc1"] == pytest.approx(official["acc1"])
    assert result["metrics"]["mine/mean_per_class_recall"] == pytest.approx(official["mean_per_class_recall"])


def test_zeroshot_gives_clip_benchmark_s_names_to_numbered_folders_by_their_numbers(tmp_path):
    """torchvision sorts the class folders 3 ... 10 as text, 10 first; clip_benchmark's names of clevr_count_all
    (three ... ten) are in the order of the counts. The old code gave them to the folders in torchvision's order:
    folder 10 was "three", 3 "four", ..., 9 "ten" (all 8 wrong); each folder now gets its count's name, and a
    classnames.txt in the same order does the same."""
    folder = tmp_path / "zeroshot" / "clevr_count_all"
    for count in range(3, 11):
        (folder / "test" / str(count)).mkdir(parents=True)
        noise_image(folder / "test" / str(count) / "0.png", count, size=(8, 8))
    (folder / "templates.txt").write_text("a photo of {c} objects.")
    words = ["three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    data = load_data("zeroshot", tmp_path, skip_missing=False)
    named = dict(zip(["10", "3", "4", "5", "6", "7", "8", "9"], data["datasets"]["clevr_count_all"]["classes"]))
    assert named == {str(count): word for count, word in zip(range(3, 11), words)}
    assert data["datasets"]["clevr_count_all"]["sources"]["classnames"] == "clip_benchmark (clevr_count_all)"
    assert "named by numbers (3, 4, 5, ...)" in data["notes"][0]
    assert [y for p, y in data["items"]["clevr_count_all"] if p.parent.name == "10"] == [0]  # torchvision's index
    (folder / "classnames.txt").write_text("\n".join(w.upper() for w in words))
    again = load_data("zeroshot", tmp_path, skip_missing=False)["datasets"]["clevr_count_all"]["classes"]
    assert again == [w.upper() for w in ["ten", *words[:-1]]]


class WordPictures(torch.nn.Module):
    """A model that sees a solid picture as one word: a red picture as "missile", a green one as "sunglasses", a
    blue one as "tench" (its feature is that word's); each distinct text a random vector of its own."""

    WORDS = ("missile", "sunglasses", "tench")

    def __init__(self, tokenizer, seed: int):
        super().__init__()
        from benchmark_fixtures import RandomFeatures

        self.text, self.visual = RandomFeatures(seed), torch.nn.Linear(1, 1)
        self.words = tokenizer(list(self.WORDS))

    def encode_image(self, pixels):
        return torch.stack([self.text.vector("text", self.words[int(p.mean(dim=(0, 1)).argmax())]) for p in pixels])

    def encode_text(self, tokens, normalize=False):
        return self.text.encode_text(tokens)


@pytest.mark.filterwarnings("ignore:y_pred contains classes not in y_true")
def test_zeroshot_per_class_recall_takes_argmax_s_first_class_under_a_tie_as_clip_benchmark(tmp_path):
    """clip_benchmark's ImageNet-1k names give "missile" (entries 657 and 744) and "sunglasses" (836 and 837) to two
    classes each: their weights are equal and so their logits. Pictures of the second of each, and of "tench"
    (entry 0), two each: argmax takes the first of the tie (wrong), torch.topk here the second (right). The old code
    took topk's pick for the per-class recall too: 1.0 where clip_benchmark's is 1/3 (the tench class alone); acc1
    stays topk's (1.0), as clip_benchmark's."""
    from clip_benchmark.datasets import builder

    from benchmark_fixtures import CLIP_TOKENS
    from concrete_jungle.evaluation.benchmarks import zeroshot
    from concrete_jungle.models import ClipModel

    known = json.loads((Path(builder.__file__).parent / "en_classnames.json").read_text())["imagenet1k"]
    test = tmp_path / "zeroshot" / "imagenet1k" / "test"
    colours = {"missile": (200, 0, 0), "sunglasses": (0, 200, 0), "tench": (0, 0, 200)}
    for c, name in enumerate(known):
        (test / f"n{c:04d}").mkdir(parents=True)
        if c in (0, 744, 837):  # tench, the second missile, the second sunglasses
            for n in range(2):
                Image.fromarray(np.full((8, 8, 3), colours[name], dtype=np.uint8)).save(test / f"n{c:04d}/{n}.png")
    (test.parent / "templates.txt").write_text("{c}")
    # seed 1: text vectors with which torch.topk (2.14, CPU) breaks both ties to the second class
    model = ClipModel(WordPictures(CLIP_TOKENS, seed=1), lambda im: torch.from_numpy(np.asarray(im, dtype=np.float32)),
                      CLIP_TOKENS, {}, {"name": "word pictures"})
    data = zeroshot.load(tmp_path / "zeroshot")
    assert data["notes"][0].startswith(f"{test}: 997 class folder(s) hold no picture (n0001, n0002, n0003, ...)")
    result = zeroshot.evaluate(Encoder(model, progress=False), data)
    official = clip_benchmark_zeroshot(model, test, known, ["{c}"], allow_empty=True)
    assert official["argmax"].tolist() == [0, 0, 657, 657, 836, 836]  # the first of each tie
    assert official["top1"].tolist() == [0, 0, 744, 744, 837, 837], "topk breaks these ties as argmax now: " \
        "the fixture no longer tells the two apart"
    metrics = result["metrics"]
    assert metrics["imagenet1k/mean_per_class_recall"] == pytest.approx(official["mean_per_class_recall"]) == 1 / 3
    assert metrics["imagenet1k/acc1"] == official["acc1"] == 1.0
    assert metrics["imagenet1k/acc5"] == official["acc5"] == 1.0


# ------------------------------------------------------------------------------------------------ the digest


def swap_aro_captions(root):
    path = root / "aro" / "visual_genome_relation.json"
    items = json.loads(path.read_text())
    for it in items[:3]:
        it["true_caption"], it["false_caption"] = it["false_caption"], it["true_caption"]
    path.write_text(json.dumps(items))


def reorder_class_names(root):
    path = root / "zeroshot" / "mine" / "classnames.txt"
    path.write_text("\n".join(reversed(path.read_text().splitlines())))


@pytest.mark.parametrize("name, write, change", [
    ("aro", lambda root: write_aro(root / "aro"), swap_aro_captions),
    ("zeroshot", lambda root: write_zeroshot(root / "zeroshot" / "mine"), reorder_class_names),
])
def test_the_benchmark_digest_follows_the_files_content_not_their_place(tmp_path, name, write, change):
    write(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "elsewhere" / "b")
    first = load_data(name, tmp_path / "a", skip_missing=False)
    same = load_data(name, tmp_path / "elsewhere" / "b", skip_missing=False)
    assert len(first["benchmark_files_sha256"]) == 64
    assert same["benchmark_files_sha256"] == first["benchmark_files_sha256"]  # another data root, the same files
    change(tmp_path / "elsewhere" / "b")
    other = load_data(name, tmp_path / "elsewhere" / "b", skip_missing=False)
    keys = {side: [[it[0].name if isinstance(it[0], Path) else it[0] for it in rows] for rows in data["items"].values()]
            for side, data in (("first", first), ("other", other))}
    assert keys["first"] == keys["other"]  # the same item keys and images: only the digest tells them apart
    assert other["benchmark_files_sha256"] != first["benchmark_files_sha256"]


# ------------------------------------------------------------------------------------------------ malformed files


def write_valse(root):
    (root / "images").mkdir(parents=True)
    noise_image(root / "images" / "a.jpg", 1)
    items = {f"r{n}": {"image_file": "a.jpg", "caption": f"a cup on a table {n}", "foil": f"a table on a cup {n}",
                       "linguistic_phenomena": "relations", "mturk": {"caption": 3}} for n in range(3)}
    (root / "relations.json").write_text(json.dumps(items))


def edit_json(path, change):
    data = json.loads(path.read_text())
    changed = change(data)  # a new value, or None where the value was changed in place
    path.write_text(json.dumps(data if changed is None else changed))


def set_item(key, **fields):
    def change(items):
        items[key].update(fields)
    return change


def replace_item(key, value):
    def change(items):
        items[key] = value
    return change


ARO_FILE = "aro/visual_genome_relation.json"
CONTROLLED_FILE = "whatsup/controlled_images_dataset.json"
WRITERS = {"aro": lambda root: write_aro(root / "aro"),
           "valse": lambda root: write_valse(root / "valse"),
           "whatsup": lambda root: write_whatsup(root / "whatsup", root / "coco" / "val2017"),
           "zeroshot": lambda root: write_zeroshot(root / "zeroshot" / "mine")}
# benchmark, file, how it is broken, what the error says after the file's name
MALFORMED = [
    ("aro", ARO_FILE, set_item(3, true_caption=None), "item 3 has true_caption null, not text"),
    ("aro", ARO_FILE, set_item(4, bbox_w=0), "item 4 has a box of zero or negative size"),
    ("aro", ARO_FILE, set_item(4, bbox_h=-5), "item 4 has a box of zero or negative size"),
    ("aro", ARO_FILE, set_item(4, bbox_w=0.4), "item 4 has a box of zero or negative size"),
    ("aro", ARO_FILE, set_item(5, bbox_x="ten"), 'item 5 has bbox_x "ten", not a number'),
    ("aro", ARO_FILE, replace_item(2, 7), "item 2 is 7, not an object"),
    ("aro", ARO_FILE, lambda items: [], "holds no items"),
    ("valse", "valse/relations.json", set_item("r1", foil=None), "item 'r1' has foil null, not text"),
    ("valse", "valse/relations.json", set_item("r1", mturk="yes"), "item 'r1' has mturk \"yes\""),
    ("valse", "valse/relations.json", lambda items: {}, "holds no items"),
    ("whatsup", CONTROLLED_FILE, lambda items: items[2]["caption_options"].__setitem__(1, None),
     "item 2 has caption_options[1] null, not text"),
    ("whatsup", CONTROLLED_FILE, set_item(1, image_path="data/controlled_images/mug.jpeg"),
     "item 1's image 'mug.jpeg' is not named <object>_<preposition>_<object>"),
    ("whatsup", CONTROLLED_FILE, lambda items: [], "holds no items"),
    ("whatsup", "whatsup/coco_qa_two_obj.json", lambda items: items[1].__setitem__(2, None),
     "item 1 has wrong caption [2] null, not text"),
    ("zeroshot", "zeroshot/mine/templates.txt", "a {style} photo of a {c}.\n{c}",
     "line 1: prompt 'a {style} photo of a {c}.' has the placeholder(s) {style}"),
    ("zeroshot", "zeroshot/mine/templates.txt", "{c}\na {c} with a brace {", "line 2: prompt 'a {c} with a brace {' "
     "is not a format string"),
    ("zeroshot", "zeroshot/mine/templates.txt", "\n\n", "holds no prompt"),
    ("zeroshot", "zeroshot/mine/test", "no test split", "put its test split in"),
    ("zeroshot", "zeroshot/mine/test", "no class folder", "holds no class folder"),
]


@pytest.mark.parametrize("name, file, change, message", MALFORMED,
                         ids=[f"{b}-{m.split(',')[0][:40]}" for b, _, _, m in MALFORMED])
def test_malformed_benchmark_files_fail_the_check_before_any_model_naming_file_and_item(tmp_path, capsys, name, file,
                                                                                       change, message):
    WRITERS[name](tmp_path)
    path = tmp_path / file
    if change == "no test split":
        path.rename(path.parent / "train")
    elif change == "no class folder":
        shutil.rmtree(path)
        path.mkdir()
    elif isinstance(change, str):
        path.write_text(change)
    else:
        edit_json(path, change)
    # the model named does not exist: the data's error comes first, and no model is needed to find it
    assert main(["eval", "--benchmarks", name, "--data-root", str(tmp_path), "--check", "--checkpoint",
                 str(tmp_path / "no-such-run")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert str(path) in err and message in err and "Traceback" not in err
    with pytest.raises(BenchmarkDataError, match=re.escape(message)):  # load(...) alone finds it too
        load_data(name, tmp_path, skip_missing=True)
