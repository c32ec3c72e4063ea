"""CountBench and sDCI on fixtures in their released layouts: each result against an independent per-item transcription
of the rule its field scores it by (each picture and text encoded alone), with the ties, the items the official loader
leaves out, a missing picture and a malformed file."""

import io
import json
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from benchmark_fixtures import CLIP_TOKENS, RandomFeatures, noise_image
from concrete_jungle.cli import main
from concrete_jungle.evaluation import chance_levels, load_data
from concrete_jungle.evaluation.benchmarks import countbench, sdci
from concrete_jungle.evaluation.checks import BenchmarkDataError
from concrete_jungle.evaluation.encoding import Encoder
from concrete_jungle.models import ClipModel


@torch.no_grad()
def picture(clip, image: Image.Image):
    return F.normalize(clip.model.encode_image(clip.preprocess(image)[None]), dim=-1)[0]


@torch.no_grad()
def text(clip, caption):
    return F.normalize(clip.model.encode_text(clip.tokenizer([caption])), dim=-1)[0]


def rgb(path) -> Image.Image:
    with Image.open(path) as im:
        return im.convert("RGB")


def series_of(result, name) -> dict[str, float]:
    answers = result["outcomes"]["series"][name]
    assert len(set(answers["keys"])) == len(answers["keys"])  # each item once: `eval --compare` pairs by key
    return dict(zip(answers["keys"], answers["values"]))


# ------------------------------------------------------------------------------------------------ CountBench

WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}
COUNTBENCH = [  # (text, number): a capital, the word twice, a word holding "ten", another count named too
    ("Two red pingpong rackets on a white table", 2), ("Three little pigs - three pigs paper plate", 3),
    ("Four colorful parrots", 4), ("The five founders of the club", 5),
    ("dining set with three leaves and six chairs", 6),
    ("The seven bags, filled with artworks", 7), ("World time zones, eight different cities", 8),
    ("Set of colorful nine buttons", 9), ("Collection of ten stencils to create text", 10),
    ("two cute little girls blowing bubbles", 2), ("a set of 3 candles", 3), ("Silhouette of ten young women.", 10)]


def write_countbench(folder, rows=COUNTBENCH):
    """The release's CountBench.json and the pictures fetched into images/<position>.jpg."""
    (folder / "images").mkdir(parents=True)
    for n in range(len(rows)):
        noise_image(folder / "images" / f"{n}.jpg", 700 + n)
    (folder / "CountBench.json").write_text(json.dumps([{"image_url": f"http://example.com/{n}.jpg", "text": t,
                                                         "number": k} for n, (t, k) in enumerate(rows)], indent=4))


def official_options(caption, number):
    """The caption lower-cased, each whole word of the count's word replaced by two ... ten (split at non-word
    runs, so "stencils" keeps its "ten")."""
    pieces = re.split(r"(\W+)", caption.lower())
    return [''.join(w if p == WORDS[number] else p for p in pieces) for w in WORDS.values()]


def official_countbench(clip, folder, rows):
    """Per item key: the predicted count, the argmax over the nine options by ``list.index(max)``."""
    out = {}
    for n, (caption, number) in enumerate(rows):
        if WORDS[number] not in re.split(r"\W+", caption.lower()):
            continue
        feature = picture(clip, rgb(folder / "images" / f"{n}.jpg"))
        sims = [float((text(clip, o) * feature).sum()) for o in official_options(caption, number)]
        out[str(n)] = sims.index(max(sims)) + 2
    return out


def test_countbench_picks_the_count_among_two_to_ten_by_whole_words_per_item(tmp_path, clip):
    write_countbench(tmp_path / "countbench")
    data = countbench.load_root(tmp_path)
    assert data["filtered"] == 1 and "item 10" in data["notes"][0]  # "3" is no number word
    by_key = {it.key: it for it in data["items"]}
    assert by_key["8"].options[3] == "collection of five stencils to create text"  # not "sfivecils"
    assert by_key["1"].options[0] == "two little pigs - two pigs paper plate"
    result = countbench.evaluate(Encoder(clip, batch_size=5, progress=False), data)
    predicted = official_countbench(clip, tmp_path / "countbench", COUNTBENCH)
    truth = {str(n): k for n, (_, k) in enumerate(COUNTBENCH)}
    assert series_of(result, "accuracy") == {k: float(p == truth[k]) for k, p in predicted.items()}
    assert result["metrics"]["accuracy"] == pytest.approx(np.mean([p == truth[k] for k, p in predicted.items()]))
    assert result["metrics"]["number/10"] == pytest.approx(np.mean([predicted[k] == 10 for k in ("8", "11")]))
    matrix = np.zeros((9, 9), dtype=int)
    for k, p in predicted.items():
        matrix[truth[k] - 2, p - 2] += 1
    assert result["confusion"]["counts"] == matrix.tolist() and result["confusion"]["labels"] == list(range(2, 11))
    assert result["confusion"]["mean_absolute_error"] == pytest.approx(
        np.mean([abs(p - truth[k]) for k, p in predicted.items()]))
    assert chance_levels("countbench", data, result, ["accuracy"]) == {"accuracy": pytest.approx(1 / 9)}
    assert set(result["blind"]["metrics"]) == set(result["metrics"])


class SameTexts(RandomFeatures):
    """Every text one vector: the nine options tie, and the first of equals, "two", is picked."""

    def encode_text(self, tokens, normalize=False):
        return torch.ones(len(tokens), self.dim)


def test_countbench_gives_a_tie_to_the_first_option_two(tmp_path):
    write_countbench(tmp_path / "countbench")
    model = ClipModel(SameTexts(0), lambda im: torch.from_numpy(np.asarray(im.resize((6, 6)), dtype=np.float32)),
                      CLIP_TOKENS, {}, {"name": "same texts"})
    result = countbench.evaluate(Encoder(model, progress=False), countbench.load_root(tmp_path))
    assert result["metrics"]["number/2"] == 1.0 and result["metrics"]["accuracy"] == pytest.approx(2 / 11)
    assert {k: v for k, v in result["metrics"].items() if k.startswith("number/") and v} == {"number/2": 1.0}


def png_bytes(seed: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (30, 40, 3), dtype=np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def test_countbench_reads_the_hugging_face_download_offline_and_skips_a_row_without_its_picture(tmp_path):
    """``huggingface-cli download nielsr/countbench`` leaves ``data/train-*.parquet`` (image_url, text, number, image
    as ``{bytes, path}``): read with pyarrow, each picture's bytes kept; a row without one is an error unless
    skipping, then counted."""
    from datasets import Dataset, Features, Value
    from datasets import Image as ImageFeature

    rows = [{"image_url": f"http://example.com/{n}.jpg", "text": t, "number": k,
             "image": None if n == 2 else {"bytes": png_bytes(n), "path": None}} for n, (t, k) in enumerate(COUNTBENCH)]
    features = Features({"image_url": Value("string"), "text": Value("string"), "number": Value("int64"),
                         "image": ImageFeature()})
    folder = tmp_path / "countbench"
    (folder / "data").mkdir(parents=True)
    Dataset.from_list(rows, features=features).to_parquet(folder / "data" / "train-00000-of-00001-cf54c241.parquet")
    data = countbench.load_root(tmp_path, skip_missing=True)
    assert "were written from the downloaded dataset (data/train-00000-of-00001-cf54c241.parquet)" in data["notes"][0]
    assert data["skipped"] == 1 and data["filtered"] == 1
    with pytest.raises(BenchmarkDataError, match="item 2 has no picture .*pass --skip-missing"):
        countbench.load_root(tmp_path)
    assert [it.key for it in data["items"]] == [str(n) for n in range(12) if n not in (2, 10)]
    assert all(it.image.path.read_bytes() == rows[int(it.key)]["image"]["bytes"] for it in data["items"])
    write_countbench(tmp_path / "release" / "countbench")
    released = countbench.load_root(tmp_path / "release")
    assert [it.options for it in data["items"]] == [it.options for it in released["items"] if it.key != "2"]
    (folder / "CountBench.json").write_text("[]")
    with pytest.raises(BenchmarkDataError, match="both examples.jsonl and CountBench.json: two copies"):
        countbench.load_root(tmp_path)


@pytest.mark.parametrize("row, message", [({"text": "two dogs", "number": 11}, "item 0 has number 11, not a count"),
                                          ({"text": "two dogs", "number": 2.0}, "item 0 has number 2.0"),
                                          ({"text": None, "number": 2}, "item 0 has text null, not text")])
def test_countbench_names_a_malformed_item(tmp_path, row, message):
    (tmp_path / "countbench").mkdir()
    (tmp_path / "countbench" / "CountBench.json").write_text(json.dumps([row]))
    with pytest.raises(BenchmarkDataError, match=message):
        countbench.load_root(tmp_path)


# ------------------------------------------------------------------------------------------------ sDCI


def mask(idx, left, top, right, bottom):
    return {"idx": idx, "bounds": {"topLeft": {"x": left, "y": top}, "bottomRight": {"x": right, "y": bottom}},
            "label": f"part {idx}", "caption": f"a part {idx}", "mask_quality": 0, "parent": -1, "requirements": []}


def negatives(name):
    return {"basic": [f"{name} basic a", f"{name} basic b"], "layout": [f"{name} layout"],
            "swaps": [f"{name} swapped", f"{name} swapped again"]}


def scores(name, tied=False):
    """CLIP scores of the negatives: layout_0 highest, or tied with swaps_1 (the last of equals wins)."""
    return {"sum": 30.0, "basic_0": 20.0, "basic_1": 21.0, "layout_0": 25.0, "swaps_0": 22.0,
            "swaps_1": 25.0 if tied else 23.0}


def photo_record(n, masks, summaries, negs=None, clip_scores=None):
    keys = list(summaries)
    return {"image": f"sa_{n}.jpg", "short_caption": f"photo {n}", "extra_caption": "", "mask_keys": [],
            "mask_data": {str(m["idx"]): m for m in masks}, "summaries": summaries,
            "negatives": negs if negs is not None else {k: negatives(f"{n} {k}") for k in keys},
            "clip_scores": clip_scores if clip_scores is not None else {k: scores(k, tied=n == 1) for k in keys}}


def write_sdci(root):
    """Seven test photos (and one of train): sub-crops at the edges and too small ones, summaries as lists of 6, 5
    or 3 and as a text, a negative equal to its caption (a Neg tie), two items of one batch with one caption (an
    SCM tie), and photos the official loader leaves out: without summaries, with negatives for the base alone (kept
    in base_swaps), and with a sub-crop lacking its CLIP scores (kept in base_swaps)."""
    base = root / "sdci" / "densely_captioned_images"
    (base / "complete").mkdir(parents=True)
    (base / "photos").mkdir()
    many = [f"summary {k}" for k in range(6)]
    records = {
        1: photo_record(1, [mask(0, 10, 5, 250, 240), mask(1, 0, 0, 100, 100), mask(2, 60, 30, 300, 260)],
                        {"base": many, "m-0-sc": [f"crop zero {k}" for k in range(5)], "m-2-sc": ["c", "d", "e"]}),
        2: photo_record(2, [mask(4, 0, 0, 224, 224), mask(7, 70, 40, 296, 264)],
                        {"base": "one summary", "m-4-sc": ["the same caption", "x", "y", "z", "w"],
                         "m-7-sc": ["the same caption"]}),
        3: photo_record(3, [mask(0, 0, 0, 230, 230)], {"base": ["photo three"], "m-0-sc": ["three crop"]}),
        4: photo_record(4, [], {"base": ["photo four"]}),  # negatives for the base alone
        5: photo_record(5, [mask(0, 1, 1, 240, 250)], {"base": ["photo five"], "m-0-sc": ["five crop"]}),
        6: photo_record(6, [mask(3, 20, 10, 280, 255), mask(5, 40, 5, 271, 250), mask(6, 5, 15, 270, 245)],
                        {"base": [f"six {k}" for k in range(5)], "m-3-sc": ["six three"], "m-5-sc": ["six five"],
                         "m-6-sc": [f"six six {k}" for k in range(7)]}),
        7: photo_record(7, [mask(0, 0, 0, 250, 250)], {"base": ["photo seven"], "m-0-sc": ["seven crop"]}),
        8: photo_record(8, [], {"base": ["train photo"]}),
    }
    records[3]["negatives"]["m-0-sc"]["swaps"][0] = "three crop"  # the negative is the caption: a tie, wrong
    del records[5]["summaries"]
    del records[7]["clip_scores"]["m-0-sc"]
    for n, record in records.items():
        (base / "complete" / f"sa_{n}.json").write_text(json.dumps(record))
        noise_image(base / "photos" / f"sa_{n}.jpg", 900 + n, size=(300 + 4 * n, 260 + 3 * n))
    (base / "splits.json").write_text(json.dumps({"train": ["sa_8.json"], "valid": [],
                                                  "test": [f"sa_{n}.json" for n in range(1, 8)]}))
    return base


def official_items(base, subcrops, source, strategy, bag):
    """The official loader, transcribed: per test photo its entries (key, picture, captions, negative), a photo left
    out whole where a lookup fails, an item left out when its bag lacks captions."""
    entries = []
    for name in json.loads((base / "splits.json").read_text())["test"]:
        d = json.loads((base / "complete" / name).read_text())
        photo = np.array(rgb(base / "photos" / d["image"]))
        try:
            if d.get("summaries") is None or d.get("negatives") is None or (len(d["negatives"]) == 1 and subcrops):
                continue
            mine = [("base", photo)]
            for m in d["mask_data"].values() if subcrops else []:
                b = m["bounds"]
                w, h = b["bottomRight"]["x"] - b["topLeft"]["x"], b["bottomRight"]["y"] - b["topLeft"]["y"]
                if w >= 224 and h >= 224:
                    x1, y1 = max(b["topLeft"]["x"] - int(w * 0.15), 0), max(b["topLeft"]["y"] - int(h * 0.15), 0)
                    x2 = min(b["bottomRight"]["x"] + int(w * 0.15), photo.shape[1])
                    y2 = min(b["bottomRight"]["y"] + int(h * 0.15), photo.shape[0])
                    mine.append((f"m-{m['idx']}-sc", photo[y1:y2, x1:x2]))
            rows = []
            for key, pixels in mine:
                summary = d["summaries"][key]
                captions = [summary] if isinstance(summary, str) else summary
                negs, clip_scores = d["negatives"][key], d["clip_scores"][key]
                if strategy == "first":
                    negative = negs[source][0]
                else:
                    pool = sorted(((t, f"{kind}_{i}") for kind, ts in negs.items() for i, t in enumerate(ts)),
                                  key=lambda x: clip_scores[x[1]])
                    negative = pool[-1][0]
                rows.append((f"{name}/{key}", pixels, captions, negative, isinstance(summary, list)))
        except KeyError:
            continue
        entries += [(k, p, c[:bag] if bag else c[:1], neg) for k, p, c, neg, listed in rows
                    if not bag or (listed and len(c) >= bag)]
    return entries


def official_scores(clip, entries):
    """CLIP Correct and neg_correct per item key: batches of 8, logits picture x (item, caption), pooled max per
    item, its own min on the diagonal, torch.max's index; the own min strictly above the negative."""
    out = {}
    for at in range(0, len(entries), 8):
        batch = entries[at: at + 8]
        pictures = torch.stack([picture(clip, Image.fromarray(p)) for _, p, _, _ in batch])
        bags = torch.stack([torch.stack([text(clip, c) for c in caps]) for _, _, caps, _ in batch])  # B x N x d
        logits = torch.tensor([[[float((pictures[i] * bags[j, m]).sum()) for m in range(bags.shape[1])]
                                for j in range(len(batch))] for i in range(len(batch))])
        similarity = logits.max(dim=2).values
        own = torch.stack([logits[i, i].min() for i in range(len(batch))])
        similarity[range(len(batch)), range(len(batch))] = own
        picks = torch.max(similarity, dim=1).indices
        for i, (key, _, _, negative) in enumerate(batch):
            out[key] = (int(picks[i]) == i, float(own[i]) > float((pictures[i] * text(clip, negative)).sum()))
    return out


OFFICIAL_TESTS = {"all_swaps": (True, "swaps", "first", 0), "all_swaps_pick5": (True, "swaps", "first", 5),
                  "base_swaps": (False, "swaps", "first", 0), "all_hardest": (True, "any", "hardest", 0)}


def test_sdci_scores_the_four_tests_per_item_as_the_official_clip_evaluation(tmp_path, clip):
    base = write_sdci(tmp_path)
    data = sdci.load_root(tmp_path)
    result = sdci.evaluate(Encoder(clip, batch_size=4, progress=False), data)
    for test, (subcrops, source, strategy, bag) in OFFICIAL_TESTS.items():
        entries = official_items(base, subcrops, source, strategy, bag)
        official = official_scores(clip, entries)
        assert [e.key for e in data["items"][test]] == list(official), test
        for e, (_, pixels, captions, negative) in zip(data["items"][test], entries):
            box = e.image.box or (0, 0, *rgb(e.image.path).size)
            crop = rgb(e.image.path).crop((box[0], box[1], box[0] + box[2], box[1] + box[3]))
            assert np.array_equal(np.array(crop), pixels) and (list(e.captions), e.negative) == (captions, negative)
        assert series_of(result, f"{test}/SCM") == {k: float(scm) for k, (scm, _) in official.items()}, test
        assert series_of(result, f"{test}/Neg") == {k: float(neg) for k, (_, neg) in official.items()}, test
        assert result["metrics"][f"{test}/Neg"] == pytest.approx(np.mean([n for _, n in official.values()]))
    assert len(data["items"]["all_swaps"]) == 12  # two batches, of 8 and 4
    assert [e.key for e in data["items"]["all_swaps_pick5"]] == [
        "sa_1.json/base", "sa_1.json/m-0-sc", "sa_2.json/m-4-sc", "sa_6.json/base", "sa_6.json/m-6-sc"]
    assert [e.key for e in data["items"]["base_swaps"]] == [f"sa_{n}.json/base" for n in (1, 2, 3, 4, 6, 7)]
    hardest = {e.key: e.negative for e in data["items"]["all_hardest"]}
    assert hardest["sa_1.json/base"] == "1 base swapped again" and hardest["sa_2.json/base"] == "2 base layout"
    assert series_of(result, "all_swaps/Neg")["sa_3.json/m-0-sc"] == 0.0  # its negative is its caption: a tie
    assert series_of(result, "all_swaps/SCM")["sa_2.json/m-7-sc"] == 0.0  # its caption is m-4-sc's, listed first
    assert data["filtered"] == {"all_swaps": 3, "all_swaps_pick5": 3, "base_swaps": 1, "all_hardest": 3}
    assert "sa_5.json: no summaries" in data["notes"][0] and "sa_7.json: no clip_scores for m-0-sc" in data["notes"][0]
    chance = chance_levels("sdci", data, result, ["all_swaps/SCM", "all_swaps/Neg", "all_swaps_pick5/Neg"])
    # SCM: the first batch holds 7 distinct captions (m-7-sc, reading as m-4-sc before it, can never be picked), the
    # second 4; Neg: 1 in 2, but 0 for the tie; of five captions, 1 in 6
    assert chance == {"all_swaps/SCM": pytest.approx((7 * 1 / 7 + 0 + 4 * 1 / 4) / 12),
                      "all_swaps/Neg": pytest.approx(11 / 24), "all_swaps_pick5/Neg": pytest.approx(1 / 6)}


def test_sdci_gives_a_tie_to_the_earlier_item_of_its_batch_and_counts_a_tied_negative_wrong(tmp_path):
    """Every text one vector: each picture ties every item of its batch, so SCM picks the batch's first item (right
    for it alone), and every negative ties its caption (Neg wrong)."""
    write_sdci(tmp_path)
    model = ClipModel(SameTexts(0), lambda im: torch.from_numpy(np.asarray(im.resize((6, 6)), dtype=np.float32)),
                      CLIP_TOKENS, {}, {"name": "same texts"})
    result = sdci.evaluate(Encoder(model, progress=False), sdci.load_root(tmp_path))
    assert result["outcomes"]["series"]["all_swaps/SCM"]["values"] == [1.0] + [0.0] * 7 + [1.0] + [0.0] * 3
    assert result["metrics"]["all_swaps_pick5/SCM"] == 1 / 5 and result["metrics"]["base_swaps/SCM"] == 1 / 6
    assert not any(result["metrics"][f"{test}/Neg"] for test in sdci.TESTS)


def test_sdci_skips_a_missing_photo_only_when_asked_and_names_a_malformed_mask(tmp_path):
    base = write_sdci(tmp_path)
    (base / "photos" / "sa_6.jpg").unlink()
    with pytest.raises(BenchmarkDataError, match="sa_6.jpg is missing"):
        sdci.load_root(tmp_path)
    data = sdci.load_root(tmp_path, skip_missing=True)
    assert data["skipped"] == {"all_swaps": 4, "all_swaps_pick5": 2, "base_swaps": 1, "all_hardest": 4}
    record = json.loads((base / "complete" / "sa_1.json").read_text())
    record["mask_data"]["0"]["bounds"]["topLeft"]["x"] = 10.5
    (base / "complete" / "sa_1.json").write_text(json.dumps(record))
    with pytest.raises(BenchmarkDataError, match="sa_1.json: mask '0' has bounds .* not whole pixels"):
        sdci.load_root(tmp_path, skip_missing=True)
    (base / "splits.json").write_text(json.dumps({"test": ["sa_1.json", "sa_1.json"]}))
    with pytest.raises(BenchmarkDataError, match="'sa_1.json' is in the test split twice"):
        sdci.load_root(tmp_path)


# ------------------------------------------------------------------------------------------------ the command


def test_eval_benchmarks_all_finds_countbench_and_sdci_and_runs_them(tmp_path, capsys, clip):
    root = tmp_path / "root"
    write_countbench(root / "countbench")
    write_sdci(root)
    assert main(["eval", "--benchmarks", "all", "--data-root", str(root), "--check"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"--benchmarks all: found under {root}: countbench, sdci; not found:" in out
    assert "| countbench | 11 | 0 |" in out and "| sdci | 35 | 0 |" in out
    assert main(["eval", "--benchmarks", "all", "--data-root", str(root), "--model", "cj-tiny", "--pretrained", "none",
                 "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert set(summary["compositional"]["parts"]) == {"countbench", "sdci"}
    assert None not in summary["compositional"]["chance"].values()
    for name, module in (("countbench", countbench), ("sdci", sdci)):
        written = json.loads((tmp_path / "out" / f"{name}.json").read_text())
        direct = module.evaluate(Encoder(clip, progress=False), load_data(name, root, False))
        assert written["metrics"] == pytest.approx(direct["metrics"])
