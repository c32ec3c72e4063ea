"""NegBench (MCQ and retrieval with negated queries) and COLA (multi-object attribute binding) on fixtures in their
released layouts: each result against the official rule transcribed here and applied item by item to similarities
computed here (each picture read as the official code reads it, each caption encoded alone), with the ties decided
as the official code decides them, unique per-item keys, missing pictures and malformed files."""

import csv
import json

import numpy as np
import pytest
import torch
from PIL import Image

from benchmark_fixtures import VARIED_CAPTIONS as CAPTIONS
from benchmark_fixtures import as_opened, image_feature, image_name, text_feature
from benchmark_fixtures import varied_picture as picture
from concrete_jungle.cli import main
from concrete_jungle.evaluation.benchmarks import cola, negbench
from concrete_jungle.evaluation.checks import BenchmarkDataError
from concrete_jungle.evaluation.encoding import Encoder


def rgb(path) -> Image.Image:
    with Image.open(path) as im:
        return im.convert("RGB")


def unique_keys(result: dict) -> None:
    for name, s in result["outcomes"]["series"].items():
        assert len(set(s["keys"])) == len(s["keys"]), name


# ------------------------------------------------------------------------------------------------ NegBench

AUTHORS = "/data/healthy-ml/scratch/negbench/data"  # the authors' own paths, as the released CSVs name pictures
SAME = "This image features a dog"  # four equal captions: every score ties


def write_csv(path, header, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def write_negbench(root, folder="images"):
    """The release's MCQ and retrieval CSVs in ``negbench/<folder>``, pictures in ``coco/val2017/`` and VOC2007's
    ``JPEGImages/`` (one greyscale JPEG, handed to the transform as opened). Returns each file's rows."""
    coco, voc = root / "coco" / "val2017", root / "voc2007" / "VOCdevkit" / "VOC2007" / "JPEGImages"
    for n in range(8):
        picture(coco / image_name(n), n)
    Image.fromarray(np.arange(40 * 48, dtype=np.uint8).reshape(40, 48)).save(coco / image_name(8))
    for n in range(4):
        picture(voc / f"{n:06d}.jpg", 50 + n)
    kinds = ("positive", "negative", "hybrid")
    mcq = {"coco": [], "voc": []}
    for r in range(15):  # up to three questions a picture, as create_mcq.py writes them
        options = [CAPTIONS[(r + 3 * k) % 16] for k in range(4)]
        mcq["coco"].append([r % 3 if r % 4 == 1 else 0, *options, kinds[r % 3], f"{AUTHORS}/coco/val2017/"
                            f"{image_name(r // 2 % 9)}"])
    mcq["coco"].append([0, SAME, SAME, SAME, SAME, "negative", f"{AUTHORS}/coco/val2017/{image_name(1)}"])  # right
    mcq["coco"].append([2, SAME, SAME, SAME, SAME, "hybrid", f"{AUTHORS}/coco/val2017/{image_name(2)}"])  # wrong
    for r in range(6):
        options = [CAPTIONS[(2 * r + 5 * k) % 16] for k in range(4)]
        mcq["voc"].append([0, *options, kinds[r % 3], f"/VOCdevkit/VOC2007/JPEGImages/{r % 4:06d}.jpg"])
    header = ["correct_answer", "caption_0", "caption_1", "caption_2", "caption_3", "correct_answer_template",
              "image_path"]
    place = root / "negbench" / folder if folder else root / "negbench"
    write_csv(place / "COCO_val_mcq_llama3.1_rephrased.csv", header, mcq["coco"])
    write_csv(place / "VOC2007_mcq_llama3.1_rephrased.csv", header, mcq["voc"])
    retrieval = {"coco": [], "coco_negated": []}
    for n in range(9):
        retrieval["coco"].append([f"{AUTHORS}/coco/val2017/{image_name(n)}",
                                  str([CAPTIONS[(n + k) % 16] for k in range(2)])])
        retrieval["coco_negated"].append([f"{AUTHORS}/coco/val2017/{image_name(n)}",
                                          str([f"{CAPTIONS[n % 16]} with no {CAPTIONS[(n + 7) % 16]}"])])
    retrieval["coco_negated"].append([f"{AUTHORS}/coco/val2017/{image_name(3)}", str(["a picture on two rows"])])
    write_csv(place / "COCO_val_retrieval.csv", ["filepath", "captions"], retrieval["coco"])
    write_csv(place / "COCO_val_negated_retrieval_llama3.1_rephrased_affneg_true.csv", ["filepath", "captions"],
              retrieval["coco_negated"])
    return mcq, retrieval


def official_mcq(clip, root, rows, folder) -> list[bool]:
    """mcq.py's evaluate_model, per row: torch.argmax over the picture's cosines with its four captions (the first of
    equal scores), right when it is correct_answer."""
    out = []
    for right, *options, _, path in rows:
        image = image_feature(clip, as_opened(folder / path.rsplit("/", 1)[-1]))
        scores = torch.stack([text_feature(clip, o) @ image for o in options])
        out.append(int(torch.argmax(scores)) == int(right))
    return out


def test_negbench_mcq_picks_the_first_best_caption_per_row_as_the_official_evaluation(tmp_path, clip):
    mcq, _ = write_negbench(tmp_path)
    data = negbench.load_root(tmp_path)
    assert {s: len(v) for s, v in data["items"].items()} == {"coco_mcq": 17, "voc2007_mcq": 6} and not data["notes"]
    result = negbench.evaluate(Encoder(clip, batch_size=4, progress=False), data)
    folders = {"coco_mcq": ("coco", tmp_path / "coco" / "val2017"),
               "voc2007_mcq": ("voc", tmp_path / "voc2007" / "VOCdevkit" / "VOC2007" / "JPEGImages")}
    series, metrics = result["outcomes"]["series"], result["metrics"]
    for s, (name, folder) in folders.items():
        official = official_mcq(clip, tmp_path, mcq[name], folder)
        assert series[s]["keys"] == [str(r) for r in range(len(official))]
        assert series[s]["values"] == [float(o) for o in official]
        assert metrics[s] == pytest.approx(np.mean(official))
        for kind in ("positive", "negative", "hybrid"):
            of_kind = [o for o, row in zip(official, mcq[name]) if row[5] == kind]
            assert metrics[f"{s}/{kind}"] == pytest.approx(np.mean(of_kind))
    coco = official_mcq(clip, tmp_path, mcq["coco"], folders["coco_mcq"][1])
    assert any(coco) and not all(coco)  # the fixture tells right from wrong
    assert coco[15] and not coco[16]  # four equal captions: the first wins, right when it is the right one
    assert series["coco_mcq"]["units"][:3] == ["val2017/000000000000.jpg"] * 2 + ["val2017/000000000001.jpg"]
    chances = dict(negbench.item_chances(data)["coco_mcq"])
    assert chances["15"] == 1.0 and chances["16"] == 0.0 and chances["0"] == pytest.approx(1 / 4)
    assert set(result["blind"]["metrics"]) >= {"coco_mcq", "voc2007_mcq/hybrid"}
    unique_keys(result)


def official_retrieval(clip, folder, rows, k) -> list[bool]:
    """retrieval.py's evaluate_model: scores = texts @ images.T, every row an image column, a query's positive its
    row's image, a hit at K when torch.topk's K columns hold it."""
    images = [image_feature(clip, as_opened(folder / path.rsplit("/", 1)[-1])) for path, _ in rows]
    queries = [(n, q) for n, (_, cell) in enumerate(rows) for q in eval(cell)]  # the official loader evals the cell
    texts = [text_feature(clip, q) for _, q in queries]
    # each score its own dot product: one picture's two columns tie exactly, and torch.topk orders the tie
    scores = torch.tensor([[float(t @ i) for i in images] for t in texts])
    top = torch.topk(scores, k, dim=1).indices
    return [n in top[i].tolist() for i, (n, _) in enumerate(queries)]


def test_negbench_retrieval_ranks_each_query_over_every_row_s_image_as_the_official_recall(tmp_path, clip):
    _, rows = write_negbench(tmp_path)
    folder = tmp_path / "coco" / "val2017"
    # the last row names again the picture its query scores highest: its two columns tie at the top, and torch.topk's
    # choice between them decides the hit at 1, as the official recall has it
    query = text_feature(clip, "a picture on two rows")
    best = max(range(9), key=lambda n: float(query @ image_feature(clip, as_opened(folder / image_name(n)))))
    rows["coco_negated"][9][0] = f"{AUTHORS}/coco/val2017/{image_name(best)}"
    write_csv(tmp_path / "negbench" / "images" / "COCO_val_negated_retrieval_llama3.1_rephrased_affneg_true.csv",
              ["filepath", "captions"], rows["coco_negated"])
    data = negbench.load_retrieval_root(tmp_path)
    result = negbench.evaluate(Encoder(clip, batch_size=4, progress=False), data)
    series, metrics = result["outcomes"]["series"], result["metrics"]
    assert result["n"] == {"coco": {"images": 9, "queries": 18}, "coco_negated": {"images": 10, "queries": 10}}
    assert series["coco/t2i_rank"]["keys"][:3] == ["0#0", "0#1", "1#0"]
    for s in ("coco", "coco_negated"):
        for k in (1, 5):
            official = official_retrieval(clip, folder, rows[s], k)
            assert [r < k for r in series[f"{s}/t2i_rank"]["values"]] == official
            assert metrics[f"{s}/image_retrieval_recall@{k}"] == pytest.approx(np.mean(official))
    assert series["coco_negated/t2i_rank"]["values"][9] in (0.0, 1.0)  # first or second: one of the tied two
    assert negbench.item_chances(data)["coco_negated/t2i_rank"] == pytest.approx(1 / 10)
    assert set(metrics) == {f"{s}/image_retrieval_recall@{k}" for s in ("coco", "coco_negated") for k in (1, 5)}
    unique_keys(result)


def test_negbench_reads_the_csvs_beside_images_or_alone_and_names_a_malformed_row(tmp_path):
    write_negbench(tmp_path, folder="")  # the CSVs directly in negbench/
    assert len(negbench.load_root(tmp_path)["items"]["coco_mcq"]) == 17
    folder = tmp_path / "negbench"
    (folder / "VOC2007_mcq_llama3.1_rephrased.csv").unlink()
    data = negbench.load_root(tmp_path)
    assert list(data["items"]) == ["coco_mcq"] and "VOC2007_mcq_llama3.1_rephrased.csv is not there" in data["notes"][0]
    (tmp_path / "coco" / "val2017" / image_name(0)).unlink()
    with pytest.raises(BenchmarkDataError, match=r"image .*val2017/000000000000\.jpg is missing"):
        negbench.load_root(tmp_path)
    assert negbench.load_root(tmp_path, skip_missing=True)["skipped"] == {"coco_mcq": 2}
    path = folder / "COCO_val_mcq_llama3.1_rephrased.csv"
    text = path.read_text().splitlines()
    path.write_text("\n".join([text[0], text[1].replace(",positive,", ",negated,"), *text[2:]]))
    with pytest.raises(BenchmarkDataError, match=r"mcq_llama3\.1_rephrased\.csv, line 2: correct_answer_template is "
                                                 r"'negated', not one of positive, negative, hybrid"):
        negbench.load_root(tmp_path, skip_missing=True)
    path.write_text("\n".join([text[0], "4" + text[1][1:]]))
    with pytest.raises(BenchmarkDataError, match=r"line 2: correct_answer is '4', not the index of a caption"):
        negbench.load_root(tmp_path, skip_missing=True)
    retrieval = folder / "COCO_val_retrieval.csv"
    retrieval.write_text('filepath,captions\n/x/000000000001.jpg,"a dog, no cat"\n')
    with pytest.raises(BenchmarkDataError, match=r"COCO_val_retrieval\.csv, line 2: captions is not a list of texts"):
        negbench.load_retrieval_root(tmp_path)
    for p in folder.glob("*.csv"):
        p.unlink()
    with pytest.raises(BenchmarkDataError, match=r"holds none of COCO_val_mcq_llama3\.1_rephrased\.csv"):
        negbench.load_root(tmp_path)


# ------------------------------------------------------------------------------------------------ COLA

LINK = "https://cs-people.bu.edu/array/data/vg_gqa_images/{}.jpg"


def write_cola(root, clone=True):
    """COLA's multi-object file as the repository holds it (``data/`` of a clone) and ``images/`` its links
    downloaded; pictures shared between pairs, and one pair of one picture twice."""
    folder = root / "cola" / ("data" if clone else "")
    folder.mkdir(parents=True, exist_ok=True)
    ids = [2390970 + 7 * n for n in range(14)]
    for n, vg in enumerate(ids):
        picture(root / "cola" / "images" / f"{vg}.jpg", 100 + n)
    items = []
    for n in range(20):
        a, b = ids[n % 14], ids[(3 * n + 5) % 14]
        items.append([LINK.format(a), CAPTIONS[n % 16], LINK.format(b), CAPTIONS[(7 * n + 2) % 16]])
    items[4][2] = items[4][0]  # one picture twice: a tie, wrong
    (folder / "COLA_multiobjects_matching_benchmark.json").write_text(json.dumps(items, indent=2))
    return items


def official_cola(clip, root, items) -> list[bool]:
    """scripts/eval.py's ColaMultiObjAcc of preds[image, caption]: im0_c0 > im1_c0 and im1_c1 > im0_c1."""
    out = []
    for link0, caption0, link1, caption1 in items:
        images = [image_feature(clip, rgb(root / "cola" / "images" / link.rsplit("/", 1)[-1])) for link in
                  (link0, link1)]
        texts = [text_feature(clip, c) for c in (caption0, caption1)]
        preds = [[float(images[i] @ texts[c]) for c in (0, 1)] for i in (0, 1)]
        out.append(preds[0][0] > preds[1][0] and preds[1][1] > preds[0][1])
    return out


def test_cola_scores_each_pair_as_the_official_multi_object_accuracy(tmp_path, clip):
    items = write_cola(tmp_path)
    data = cola.load_root(tmp_path)
    result = cola.evaluate(Encoder(clip, batch_size=4, progress=False), data)
    official = official_cola(clip, tmp_path, items)
    series = result["outcomes"]["series"]
    assert list(series) == ["multi_object"] and series["multi_object"]["keys"] == [str(n) for n in range(20)]
    assert series["multi_object"]["values"] == [float(o) for o in official]
    assert result["metrics"] == {"multi_object": pytest.approx(np.mean(official))}
    assert any(official) and not all(official) and not official[4]  # one picture twice ties: wrong
    assert result["blind"]["not_applicable"] == ["multi_object"]
    chances = dict(cola.item_chances(data)["multi_object"])
    assert chances["4"] == 0.0 and chances["0"] == pytest.approx(1 / 4)
    unique_keys(result)


def test_cola_reads_the_file_with_or_without_data_and_names_a_malformed_item(tmp_path):
    items = write_cola(tmp_path, clone=False)
    assert len(cola.load_root(tmp_path)["items"]["multi_object"]) == 20
    (tmp_path / "cola" / "images" / "2390970.jpg").unlink()
    with pytest.raises(BenchmarkDataError, match=r"image .*cola/images/2390970\.jpg is missing"):
        cola.load_root(tmp_path)
    assert cola.load_root(tmp_path, skip_missing=True)["skipped"] == {"multi_object": 4}
    path = tmp_path / "cola" / "COLA_multiobjects_matching_benchmark.json"
    path.write_text(json.dumps([items[1], items[2][:3]]))
    with pytest.raises(BenchmarkDataError, match=r"benchmark\.json: item 1 has 3 entries, not 4"):
        cola.load_root(tmp_path, skip_missing=True)
    path.write_text(json.dumps([[items[1][0], 3, items[1][2], items[1][3]]]))
    with pytest.raises(BenchmarkDataError, match=r"item 0 has caption 1 3, not text"):
        cola.load_root(tmp_path, skip_missing=True)


# ------------------------------------------------------------------------------------------------ the command

def test_eval_benchmarks_all_finds_and_runs_negbench_and_cola(tmp_path, capsys):
    root = tmp_path / "root"
    write_negbench(root)
    write_cola(root)
    assert main(["eval", "--benchmarks", "all", "--data-root", str(root), "--check"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"--benchmarks all: found under {root}: negbench, negbench_retrieval, cola;" in out
    assert all(row in out for row in ("| negbench | 23 | 0 |", "| negbench_retrieval | 19 | 0 |", "| cola | 20 | 0 |"))
    assert main(["eval", "--benchmarks", "negbench,negbench_retrieval,cola", "--data-root", str(root), "--model",
                 "cj-tiny", "--pretrained", "none", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    headline = {"negbench": ("coco_mcq", "voc2007_mcq"),
                "negbench_retrieval": ("coco_negated/image_retrieval_recall@1",), "cola": ("multi_object",)}
    for name, metrics in headline.items():
        result = json.loads((tmp_path / "out" / f"{name}.json").read_text())
        assert result["benchmark"] == name and all(result["chance"][m] is not None for m in metrics)
        assert summary["compositional"]["parts"][name] == pytest.approx(np.mean([result["metrics"][m]
                                                                                 for m in metrics]))
        unique_keys(result)
    assert summary["compositional"]["normalised_mean"] is not None
