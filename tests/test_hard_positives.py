"""Hard Positives on fixtures in the release's format (pairs of JSON lists in data/ and swapped_data/, REPLACE pictures
at the path the files name, SWAP pictures in data/images/ cut to their box): the result against run_eval.py's rule
applied item by item to similarities computed here (each picture read as the release's loaders read it, each text
encoded alone), its ties, its averages, a missing picture, malformed files and one `concrete-jungle eval` run."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from benchmark_fixtures import VARIED_CAPTIONS as CAPTIONS
from benchmark_fixtures import varied_picture as picture
from concrete_jungle.cli import main
from concrete_jungle.evaluation import chance_levels, load_data
from concrete_jungle.evaluation.benchmarks import hard_positives
from concrete_jungle.evaluation.checks import BenchmarkDataError
from concrete_jungle.evaluation.encoding import Encoder

# captions of many lengths and kinds (VARIED_CAPTIONS): with random weights a caption's score is mostly its own, so
# items built from different captions come out right and wrong in every measure
SIZES = {"swap": 6, "replace_att": 9, "replace_rel": 5}  # unequal: the macro and micro averages differ


def write_release(root) -> dict[str, tuple[list[dict], list[dict]]]:
    """``<root>/hard_positives/{data,swapped_data}/`` with the three files, their pictures, and these special items:
    SWAP item 1 whose two files give the negative differently; REPLACE-att item 2 whose hard positive is its negative
    (a tie) and item 3 whose caption is its negative (a tie); REPLACE-rel item 0 whose hard positive reads as its
    caption (another case), items 3 and 4 of one picture."""
    folder = root / "hard_positives"
    out, n = {}, 0
    for subset, count in SIZES.items():
        original, swapped = [], []
        for k in range(count):
            caption, negative, positive = CAPTIONS[n % 16], CAPTIONS[(5 * n + 3) % 16], CAPTIONS[(7 * n + 2) % 16]
            image_id = str(2300000 + n)
            if subset == "swap":
                name, box = f"{image_id}.jpg", {"bbox_x": 3 + k, "bbox_y": 2 * k, "bbox_w": 30, "bbox_h": 26}
                picture(folder / "data" / "images" / name, n)
            else:
                name, box = f"data/VG_100K{'_2' if k % 2 else ''}/{image_id}.jpg", {}
                picture(folder / name, n)
            base = {"image_id": image_id, "image_path": name} | box
            if subset == "swap":
                base["attributes"] = ["red", "blue"]
            original.append(base | {"true_caption": caption, "false_caption": negative})
            swapped.append(base | {"true_caption": positive, "false_caption": negative})
            n += 1
        out[subset] = (original, swapped)
    out["swap"][1][1]["false_caption"] = "a red wall"
    att, rel = out["replace_att"], out["replace_rel"]
    att[1][2]["true_caption"] = att[1][2]["false_caption"]
    att[0][3]["true_caption"] = att[0][3]["false_caption"]
    rel[1][0]["true_caption"] = rel[0][0]["true_caption"].upper()
    for files in rel:
        files[4]["image_path"] = files[3]["image_path"]
    for subset, files in out.items():
        for part, items in zip(("data", "swapped_data"), files):
            (folder / part).mkdir(parents=True, exist_ok=True)
            (folder / part / hard_positives.FILES[subset]).write_text(json.dumps(items))
    return out


@torch.no_grad()
def image(clip, path, box=None) -> torch.Tensor:
    """A picture as the release's loaders read it: ``Image.open(path).convert('RGB')``, cut to its box (SWAP)."""
    with Image.open(path) as im:
        rgb = im.convert("RGB")
    if box is not None:
        x, y, w, h = box
        rgb = rgb.crop((x, y, x + w, y + h))
    return F.normalize(clip.model.encode_image(clip.preprocess(rgb)[None]), dim=-1)[0]


@torch.no_grad()
def text(clip, caption) -> torch.Tensor:
    # each text alone: in a batch the rows of two equal texts can round apart on some CPUs
    return F.normalize(clip.model.encode_text(clip.tokenizer([caption])), dim=-1)[0]


def official(clip, root, files) -> dict[str, dict[str, list[bool]]]:
    """run_eval.py's lines, per subset: each file's scores [s(false), s(true)] per item (``orig_scores``,
    ``mod_scores``), then ``orig_acc``, ``mod_acc``, the first printed count ("(c, c'') > c'") and the second
    ("c > c' > c''"), item by item; with the raw similarities."""
    folder = root / "hard_positives"
    out = {}
    for subset, (original, swapped) in files.items():
        answers = {m: [] for m in hard_positives.MEASURES}
        raw = []
        for first, second in zip(original, swapped):
            if subset == "swap":
                box = tuple(first[f"bbox_{k}"] for k in "xywh")
                feature = image(clip, folder / "data" / "images" / first["image_path"], box)
            else:
                feature = image(clip, folder / first["image_path"])
            orig = [float(feature @ text(clip, first[k])) for k in ("false_caption", "true_caption")]
            mod = [float(feature @ text(clip, second[k])) for k in ("false_caption", "true_caption")]
            answers["original"].append(orig[0] < orig[1])
            answers["hard_positive"].append(mod[0] < mod[1])
            answers["augmented"].append(mod[0] < mod[1] and mod[0] < orig[1])
            answers["brittle"].append(orig[1] > mod[0] and mod[0] > mod[1])
            raw.append((orig, mod))
        out[subset] = answers | {"raw": raw}
    return out


def test_hard_positives_follows_run_eval_item_by_item_with_its_ties_and_averages(tmp_path, clip):
    files = write_release(tmp_path)
    data = hard_positives.load_root(tmp_path)
    assert data["negatives_differ"] == {"swap": 1, "replace_att": 0, "replace_rel": 0}
    result = hard_positives.evaluate(Encoder(clip, batch_size=4, progress=False), data)
    expected = official(clip, tmp_path, files)
    series, metrics = result["outcomes"]["series"], result["metrics"]
    for subset, answers in expected.items():
        for measure in hard_positives.MEASURES:
            got = series[f"{subset}/{measure}"]
            assert got["keys"] == [str(k) for k in range(SIZES[subset])]
            assert got["values"] == [float(a) for a in answers[measure]], (subset, measure)
            assert metrics[f"{subset}/{measure}"] == pytest.approx(np.mean(answers[measure]))
    # the fixture is not one the rule gets trivially right: every measure has right and wrong items
    for measure in hard_positives.MEASURES:
        pooled = [a for answers in expected.values() for a in answers[measure]]
        assert 0 < sum(pooled) < len(pooled), measure
    # the ties: equal texts score exactly alike, and a strict comparison makes each tie wrong
    (orig, mod) = expected["replace_att"]["raw"][2]
    assert mod[0] == mod[1] and series["replace_att/hard_positive"]["values"][2] == 0.0
    assert series["replace_att/augmented"]["values"][2] == 0.0 and series["replace_att/brittle"]["values"][2] == 0.0
    (orig, mod) = expected["replace_att"]["raw"][3]
    assert orig[0] == orig[1] and series["replace_att/original"]["values"][3] == 0.0
    # SWAP item 1: the augmented answer compares with the negative of swapped_data/, as run_eval.py does
    # (the caption is below its own negative there, above the other: right only against the latter)
    (orig, mod) = expected["swap"]["raw"][1]
    assert orig[0] > orig[1] > mod[0] and series["swap/augmented"]["values"][1] == 1.0
    # the averages: REPLACE the mean of its two files, the headline the mean of SWAP and REPLACE, the micro over items
    for measure in hard_positives.MEASURES:
        replace = np.mean([np.mean(expected[s][measure]) for s in hard_positives.REPLACE])
        assert metrics[f"REPLACE/{measure}"] == pytest.approx(replace)
        assert metrics[measure] == pytest.approx(np.mean([np.mean(expected["swap"][measure]), replace]))
        pooled = [a for answers in expected.values() for a in answers[measure]]
        assert metrics[f"all items (micro)/{measure}"] == pytest.approx(np.mean(pooled))
    assert metrics["augmented"] != pytest.approx(metrics["all items (micro)/augmented"])
    assert result["averages"]["augmented"].startswith("macro")
    assert result["averages"]["all items (micro)/augmented"].startswith("micro")
    # items 3 and 4 of replace_rel share their picture, their unit
    units = series["replace_rel/original"]["units"]
    assert units[3] == units[4] and len(set(units)) == 4
    assert set(result["blind"]["metrics"]) == set(metrics) and result["blind"]["pictures"] == 19


def test_hard_positives_chance_of_augmented_is_one_in_the_distinct_texts_zero_on_a_tie(tmp_path):
    write_release(tmp_path)
    data = hard_positives.load_root(tmp_path)
    chances = hard_positives.item_chances(data)
    att = dict(chances["replace_att/augmented"])
    assert att["2"] == 0.0 and att["3"] == 0.0 and att["0"] == pytest.approx(1 / 3)  # c_n' reads as c_p, as c
    assert dict(chances["replace_rel/augmented"])["0"] == pytest.approx(1 / 2)  # c_p reads as c: two texts
    assert dict(chances["replace_att/original"])["3"] == 0.0
    outcomes = hard_positives.outcomes_of(data, {m: [True] * 20 for m in hard_positives.MEASURES})
    result = {"metrics": {"augmented": 1.0}, "outcomes": outcomes}
    level = chance_levels("hard_positives", data, result, ["augmented"])["augmented"]
    per_subset = {s: np.mean([c for _, c in chances[f"{s}/augmented"]]) for s in SIZES}
    replace = np.mean([per_subset[s] for s in hard_positives.REPLACE])
    assert level == pytest.approx(np.mean([per_subset["swap"], replace]))


def test_hard_positives_scores_a_swap_box_outside_its_picture_on_black_and_counts_it(tmp_path, clip):
    """The release's loader cuts a box wholly outside its picture to black pixels (PIL) and scores the item on it:
    so do we, counted and noted as ARO's (the pictures are 48 x 40)."""
    files = write_release(tmp_path)
    for items in files["swap"]:
        items[1].update(bbox_x=300)  # right of the picture
        items[2].update(bbox_x=40, bbox_w=30)  # half outside: a crop with pixels, not counted
    for part, items in zip(("data", "swapped_data"), files["swap"]):
        (tmp_path / "hard_positives" / part / hard_positives.FILES["swap"]).write_text(json.dumps(items))
    data = hard_positives.load_root(tmp_path)
    assert data["boxes_outside_image"] == {"swap": 1, "replace_att": 0, "replace_rel": 0}
    assert data["notes"] == ["swap: 1 item(s) have a box wholly outside their image (items 1); each is scored on an "
                             "all-black crop, as the official code scores it"]
    result = hard_positives.evaluate(Encoder(clip, batch_size=4, progress=False), data)
    expected = official(clip, tmp_path, {"swap": files["swap"]})["swap"]
    for measure in hard_positives.MEASURES:
        assert result["outcomes"]["series"][f"swap/{measure}"]["values"] == [float(x) for x in expected[measure]]
    assert result["notes"] == data["notes"] and result["boxes_outside_image"]["swap"] == 1


def test_hard_positives_skips_a_missing_picture_and_names_malformed_files(tmp_path):
    files = write_release(tmp_path)
    folder = tmp_path / "hard_positives"
    (folder / files["replace_rel"][0][3]["image_path"]).unlink()  # the picture of items 3 and 4
    with pytest.raises(BenchmarkDataError, match=r"2300018\.jpg is missing"):
        hard_positives.load_root(tmp_path)
    data = hard_positives.load_root(tmp_path, skip_missing=True)
    assert data["skipped"] == {"swap": 0, "replace_att": 0, "replace_rel": 2}
    assert [it.key for it in data["items"]["replace_rel"]] == ["0", "1", "2"]

    def rewrite(part, subset, items):
        (folder / part / hard_positives.FILES[subset]).write_text(json.dumps(items))

    original, swapped = files["replace_att"]
    rewrite("swapped_data", "replace_att", {"0": swapped[0]})
    with pytest.raises(BenchmarkDataError, match=r"swapped_data/vl_checklist_attributes\.json: the release's files "
                                                 r"are a list"):
        hard_positives.load_root(tmp_path, skip_missing=True)
    rewrite("swapped_data", "replace_att", swapped[:-1])
    with pytest.raises(BenchmarkDataError, match=r"holds 9 items and .*swapped_data/vl_checklist_attributes\.json 8"):
        hard_positives.load_root(tmp_path, skip_missing=True)
    rewrite("swapped_data", "replace_att", [swapped[0] | {"true_caption": 3}, *swapped[1:]])
    with pytest.raises(BenchmarkDataError, match=r"vl_checklist_attributes\.json: item 0 has true_caption 3, not "
                                                 r"text"):
        hard_positives.load_root(tmp_path, skip_missing=True)
    rewrite("swapped_data", "replace_att", [swapped[1], swapped[0], *swapped[2:]])
    with pytest.raises(BenchmarkDataError, match=r"item 0 names another picture than item 0 of"):
        hard_positives.load_root(tmp_path, skip_missing=True)
    rewrite("swapped_data", "replace_att", swapped)
    box = [dict(item) for item in files["swap"][1]]
    box[2]["bbox_w"] = 12
    rewrite("swapped_data", "swap", box)
    with pytest.raises(BenchmarkDataError, match=r"item 2 names another picture and box than item 2"):
        hard_positives.load_root(tmp_path, skip_missing=True)
    del box[2]["bbox_w"]
    rewrite("swapped_data", "swap", box)
    with pytest.raises(BenchmarkDataError, match=r"visual_genome_attribution\.json: item 2 lacks bbox_w"):
        hard_positives.load_root(tmp_path, skip_missing=True)
    (folder / "data" / "visual_genome_attribution.json").write_text("[{")
    with pytest.raises(BenchmarkDataError, match=r"data/visual_genome_attribution\.json: malformed JSON"):
        hard_positives.load_root(tmp_path, skip_missing=True)
    (folder / "swapped_data" / "visual_genome_attribution.json").unlink()
    with pytest.raises(BenchmarkDataError, match=r"swapped_data/visual_genome_attribution\.json not found"):
        hard_positives.load_root(tmp_path, skip_missing=True)


def test_eval_checks_and_runs_hard_positives(tmp_path, capsys):
    root = tmp_path / "root"
    write_release(root)
    assert main(["eval", "--benchmarks", "hard_positives", "--data-root", str(root), "--check"]) == 0
    assert "| hard_positives | 20 | 0 |" in capsys.readouterr().out.splitlines()
    assert main(["eval", "--benchmarks", "hard_positives", "--data-root", str(root), "--model", "cj-tiny",
                 "--pretrained", "none", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    result = json.loads((tmp_path / "out" / "hard_positives.json").read_text())
    assert result["benchmark"] == "hard_positives" and result["items"] == 20
    assert all(v is None or 0 <= v <= 1 for v in result["metrics"].values())
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["compositional"]["parts"]["hard_positives"] == pytest.approx(result["metrics"]["augmented"])
    assert result["chance"]["augmented"] is not None
    loaded = load_data("hard_positives", root, skip_missing=False)
    assert loaded["benchmark_files_sha256"] == result["benchmark_files_sha256"]
