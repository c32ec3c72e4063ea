"""ConcretePlant end to end: ConcreteBatch records, resumption after kill -9 or Ctrl-C, sharding, bad input, its
summary."""

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from concrete_jungle.cli import main
from concrete_jungle.concretebatch import iter_quintuples, iter_records, read_manifest, read_member
from plant_fixtures import SUBJECTS, dataset_fingerprint, make_dataset, plant_args, wait_for
from plugin_example import PurpleCaptioner


def test_plant_writes_a_concretebatch(tmp_path):
    captions, images = make_dataset(tmp_path, 40)
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out, "--samples-per-shard", 16, "--batch-size", 5)) == 0
    manifest = read_manifest(out)
    assert len(manifest) == 40 and len({r["id"] for r in manifest}) == 40
    ok = [r for r in manifest if r["status"] == "ok"]
    assert ok and sorted(p.name for p in out.glob("shard-*.tar")) == sorted({r["shard"] for r in ok})
    records = list(iter_records(out))
    assert [r["meta"]["id"] for r in records] == [r["id"] for r in ok]
    for rec in records:
        meta = rec["meta"]
        for key in ("keyword", "category", "concreteness", "mode", "scale", "source", "seed", "captioner", "editor",
                    "candidates"):
            assert key in meta, key
        assert meta["mode"] == "hc" and meta["editor"] == "none" and meta["neg_image_is_anchor"]
        assert rec["caption"] != rec["neg_caption"]
        assert rec["caption"][meta["span"][0]:meta["span"][1]] == meta["keyword"]
    quint = next(iter_quintuples(out))
    assert len(quint) == 5 and isinstance(quint[0], Image.Image) and isinstance(quint[4], float)
    config = (out / "config.yaml").read_text()
    assert "**Task**: You are an expert data engineer." in config and "versions:" in config
    summary = json.loads((out / "summary.json").read_text())
    assert summary["samples"] == 40 and summary["ok"] == len(ok)
    assert 0 < summary["seconds_to_first_batch"] <= summary["seconds"]
    # a re-run with everything committed writes no batch: it has no start-up to report
    assert main(plant_args(captions, images, out, "--samples-per-shard", 16, "--batch-size", 5)) == 0
    assert json.loads((out / "summary.json").read_text())["seconds_to_first_batch"] is None


def test_plant_with_the_diffusers_editor(tmp_path):
    from concrete_jungle.models.tiny import build_tiny_sdxl_img2img

    model = build_tiny_sdxl_img2img(tmp_path / "sdxl")
    captions, images = make_dataset(tmp_path, 6)
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out, "--editor", "diffusers", "--editor-model", model,
                           "--size", 64, "--batch-size", 3)) == 0
    records = list(iter_records(out))
    assert records and all(r["neg_image"].size == (64, 64) and not r["meta"]["neg_image_is_anchor"] for r in records)
    assert all(r["image"].size == (32, 32) for r in records)  # the anchor is kept as it was


def run_until(args, condition, timeout=120):
    """Start `concrete-jungle plant` as a real process and kill -9 it once ``condition()`` holds."""
    proc = subprocess.Popen([sys.executable, "-m", "concrete_jungle.cli", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if condition():
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.002)
    return False


@pytest.mark.processes
def test_kill_9_and_restart_give_the_uninterrupted_dataset(tmp_path):
    captions, images = make_dataset(tmp_path, 1500, image_size=16)
    extra = ["--samples-per-shard", 25, "--batch-size", 8]
    reference = tmp_path / "reference"
    assert main(plant_args(captions, images, reference, *extra)) == 0

    out = tmp_path / "killed"
    args = plant_args(captions, images, out, *extra)
    keywords = out / "keywords-00000-of-00001.jsonl"
    # killed while sampling keywords, then again while writing shards
    assert run_until(args, lambda: keywords.exists() and keywords.stat().st_size > 20_000)
    assert not (out / "manifest.jsonl").exists()
    assert run_until(args, lambda: len(list((out / "manifests").glob("*.jsonl"))) >= 3
                     if (out / "manifests").exists() else False)
    assert not (out / "manifest.jsonl").exists(), "the run finished before it was killed"
    assert main(args) == 0
    assert dataset_fingerprint(out) == dataset_fingerprint(reference)
    assert not list(out.glob(".*.tmp")) and not list(out.glob("*.tmp"))


def test_sharded_parts_are_disjoint_and_merge(tmp_path, capsys):
    captions, images = make_dataset(tmp_path, 60)
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out, "--num-shards", 2, "--shard-index", 0,
                           "--samples-per-shard", 10)) == 0
    assert main(["plant", "merge", str(out)]) == 2
    assert "parts [1] of 2 have not finished" in capsys.readouterr().err
    assert main(plant_args(captions, images, out, "--num-shards", 2, "--shard-index", 1,
                           "--samples-per-shard", 10)) == 0
    part0 = {json.loads(line)["id"] for line in (out / "manifest-00000-of-00002.jsonl").read_text().splitlines()}
    part1 = {json.loads(line)["id"] for line in (out / "manifest-00001-of-00002.jsonl").read_text().splitlines()}
    assert part0 and part1 and not part0 & part1 and len(part0 | part1) == 60
    assert main(["plant", "merge", str(out)]) == 0
    assert {r["id"] for r in read_manifest(out)} == part0 | part1
    shards = {p.name for p in out.glob("shard-*.tar")}
    assert {"shard-000000.tar", "shard-000001.tar"} <= shards  # part 0 writes even, part 1 odd shard numbers


def test_shard_from_torchrun_environment(tmp_path, monkeypatch):
    captions, images = make_dataset(tmp_path, 20)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out)) == 0
    assert (out / "manifest-00001-of-00003.jsonl").exists()


def test_bad_images_and_captions_become_rejects_with_reasons(tmp_path):
    captions, images = make_dataset(tmp_path, 12)
    (images / "img00003.jpg").unlink()
    (images / "img00005.jpg").write_bytes(b"not a jpeg at all")
    with open(captions, "a") as f:
        f.write(json.dumps({"id": "abstract", "caption": "It is what it is.", "image": "img00000.jpg"}) + "\n")
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out)) == 0
    reasons = {r["id"]: r.get("reason", "") for r in read_manifest(out)}
    assert reasons["img00003"].startswith("missing image")
    assert reasons["img00005"].startswith("unreadable image")
    assert reasons["abstract"] == "no rated candidate"
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert {r["id"] for r in rejects} >= {"img00003", "img00005", "abstract"}


def test_wrong_image_folder_and_unreachable_server_stop_before_any_file(tmp_path, capsys):
    captions, images = make_dataset(tmp_path, 8)
    out = tmp_path / "cb"
    assert main(plant_args(captions, tmp_path / "nope", out)) == 2
    assert "image directory not found" in capsys.readouterr().err
    assert main(plant_args(captions, tmp_path, out)) == 2  # a folder, but not the images' folder
    assert "none of the first 8 images exist" in capsys.readouterr().err
    assert main(plant_args(captions, images, out, "--captioner", "openai", "--model", "Qwen/Qwen3-32B",
                           "--base-url", "http://127.0.0.1:9/v1")) == 2
    assert "cannot reach the OpenAI-compatible server" in capsys.readouterr().err
    assert not out.exists()  # checked before the keyword stage writes its files, as docs/commands/plant.md says


def test_resume_with_other_settings_is_refused(tmp_path, capsys):
    captions, images = make_dataset(tmp_path, 8)
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out)) == 0
    assert main(plant_args(captions, images, out, "--max-attempts", 5)) == 2
    assert "made with other settings (max_attempts differ" in capsys.readouterr().err


def test_ids_that_sanitise_alike_survive_plant_training_set_and_gallery(tmp_path):
    import html
    import unicodedata

    from concrete_jungle.concretebatch import IndexedConcreteBatch

    ids = ["a.b", "a_b", "a b", "a/b", "A.b", "a:b", unicodedata.normalize("NFC", "café"),
           unicodedata.normalize("NFD", "café"), "x" * 300]
    (tmp_path / "images").mkdir()
    rng = np.random.default_rng(0)
    with open(tmp_path / "captions.jsonl", "w") as f:
        for i, sid in enumerate(ids):
            Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(tmp_path / "images" / f"{i}.jpg")
            f.write(json.dumps({"id": sid, "caption": f"A red car parked next to a {SUBJECTS[i]}", "image": f"{i}.jpg"})
                    + "\n")
    out = tmp_path / "cb"
    assert main(plant_args(tmp_path / "captions.jsonl", tmp_path / "images", out)) == 0
    assert sorted(r["id"] for r in read_manifest(out) if r["status"] == "ok") == sorted(ids)
    dataset = IndexedConcreteBatch([out])
    assert len(dataset) == len(ids)
    assert sorted(json.loads(read_member(r["json"]))["id"] for r in dataset.records) == sorted(ids)
    assert main(["gallery", str(out), "--out", str(tmp_path / "g")]) == 0
    page = (tmp_path / "g" / "index.html").read_text()
    assert page.count('class="row"') == len(ids) and all(f"<h2>{html.escape(i)}</h2>" in page for i in ids)


def test_a_key_written_twice_is_an_error_naming_both_ids(tmp_path):
    from concrete_jungle.concretebatch import IndexedConcreteBatch, ShardWriter, encode_jpeg
    from concrete_jungle.errors import DatasetError

    out = tmp_path / "cb"
    out.mkdir()
    writer = ShardWriter(out / "shard-000000.tar")
    jpeg = encode_jpeg(Image.new("RGB", (8, 8)))
    for sid in ("first", "second"):  # another tool wrote both under one key
        writer.write("same-key", jpeg, "a cat", jpeg, "a dog", {"id": sid, "concreteness": 4.0})
    writer.commit()
    with pytest.raises(DatasetError, match=r"key 'same-key' appears twice .*\['first', 'second'\]"):
        IndexedConcreteBatch([out])


def shard_of(out, records: int):
    """A shard of ``records`` records as another tool writes one (no digest, no manifest): ``r0``, ``r1``, ..."""
    from concrete_jungle.concretebatch import ShardWriter, encode_jpeg

    out.mkdir()
    writer = ShardWriter(out / "shard-000000.tar")
    jpeg = encode_jpeg(Image.new("RGB", (8, 8)))
    for i in range(records):
        writer.write(f"r{i}", jpeg, "a cat", jpeg, "a dog", {"id": f"r{i}", "concreteness": 4.0})
    writer.commit()
    return out / "shard-000000.tar"


def test_a_shard_cut_between_two_records_is_an_error_naming_it_not_fewer_records(tmp_path):
    """Cut where a record begins, a shard read as 4 of its 6 records, and trained."""
    from concrete_jungle.concretebatch import IndexedConcreteBatch, iter_records
    from concrete_jungle.errors import DatasetError

    shard = shard_of(tmp_path / "cb", 6)
    with tarfile.open(shard) as tar:
        cut = next(m.offset for m in tar if m.name.startswith("r4."))
    shard.write_bytes(shard.read_bytes()[:cut])
    for read in (IndexedConcreteBatch, lambda roots: list(iter_records(roots[0]))):
        with pytest.raises(DatasetError, match=f"{shard} is damaged: it ends without its end-of-archive blocks"):
            read([tmp_path / "cb"])


@pytest.mark.parametrize("member, message", [
    ("r1.neg3.txt", r"record 'r1' holds neg3\.txt but only 1 negative caption\(s\) and 1 positive"),
    ("r1.pos3.txt", r"record 'r1' holds pos3\.txt but only 1 negative caption\(s\) and 1 positive")],
    ids=["negatives", "positives"])
def test_a_record_with_a_gap_in_its_negatives_or_positives_is_an_error_naming_it(tmp_path, member, message):
    """``neg.txt`` and ``neg3.txt`` without ``neg2.txt`` read as one negative, the third lost (``pos3.txt``
    without ``pos2.txt`` alike)."""
    from concrete_jungle.concretebatch import IndexedConcreteBatch
    from concrete_jungle.errors import DatasetError

    shard = shard_of(tmp_path / "cb", 2)
    with tarfile.open(shard) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar]
    with tarfile.open(shard, "w") as tar:
        for info, data in members + [(tarfile.TarInfo(member), b"a bird")]:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(DatasetError, match=message):
        IndexedConcreteBatch([tmp_path / "cb"])


@pytest.mark.parametrize("meta, message", [
    ({"id": "r0"}, r"record 'r0' of .*shard-000000\.tar cannot be read \(its json has no 'concreteness'\)"),
    (["r0"], r"the record at byte \d+ of .*shard-000000\.tar cannot be read \(ValueError: its json is a list"),
    ({"id": "r0", "concreteness": "high"}, r"record 'r0' has the concreteness rating 'high' in its json; a rating is a "
                                                 r"finite number"),
], ids=["no concreteness", "not an object", "a rating that is no number"])
def test_a_foreign_records_json_problem_is_an_error_naming_the_record(tmp_path, meta, message):
    """A shard another tool wrote, its json short of a field, raised KeyError or ValueError naming nothing."""
    from concrete_jungle.concretebatch import IndexedConcreteBatch, ShardWriter, encode_jpeg, iter_records
    from concrete_jungle.errors import DatasetError

    (tmp_path / "cb").mkdir()
    writer = ShardWriter(tmp_path / "cb" / "shard-000000.tar")
    jpeg = encode_jpeg(Image.new("RGB", (8, 8)))
    writer.write("r0", jpeg, "a cat", jpeg, "a dog", meta)
    writer.commit()
    with pytest.raises(DatasetError, match=message):
        IndexedConcreteBatch([tmp_path / "cb"])[0]
    with pytest.raises(DatasetError, match=message):
        list(iter_records(tmp_path / "cb"))


def test_image_names_outside_the_image_folder_are_rejected_and_links_inside_it_work(tmp_path):
    rng = np.random.default_rng(1)
    secret = tmp_path / "private" / "secret.jpg"  # a readable image outside --images
    secret.parent.mkdir()
    Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(secret)
    images = tmp_path / "images"
    (images / "inside").mkdir(parents=True)
    Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(images / "inside" / "ok.jpg")
    (images / "linked").symlink_to(secret.parent, target_is_directory=True)  # the user's own link: allowed
    names = {"up": "../private/secret.jpg", "absolute": str(secret), "sneaky": "inside/../../private/secret.jpg",
             "plain": "inside/ok.jpg", "link": "linked/secret.jpg"}
    with open(tmp_path / "captions.jsonl", "w") as f:
        for sid, name in names.items():
            f.write(json.dumps({"id": sid, "caption": "A red car parked next to a dog", "image": name}) + "\n")
    out = tmp_path / "cb"
    assert main(plant_args(tmp_path / "captions.jsonl", images, out)) == 0
    rows = {r["id"]: r for r in read_manifest(out)}
    for sid in ("up", "absolute", "sneaky"):
        assert rows[sid]["status"] == "rejected" and "points outside" in rows[sid]["reason"], rows[sid]
    assert rows["plain"]["status"] == rows["link"]["status"] == "ok"
    shards = b"".join(p.read_bytes() for p in out.glob("shard-*.tar"))
    # only through the user's link (anchor and its text-only negative), never through a crafted name
    assert shards.count(secret.read_bytes()) == 2


@pytest.mark.parametrize("kind", ["sugarcrepe", "retrieval", "winoground", "coco_probe", "pairs"])
def test_benchmark_and_training_files_may_not_name_images_outside_their_folder(tmp_path, kind):
    from concrete_jungle.evaluation import load_data
    from concrete_jungle.evaluation.checks import BenchmarkDataError
    from concrete_jungle.sources import UnsafePathError
    from concrete_jungle.train.pairs import PairsDataset

    root = tmp_path / "data"
    escape = "../../etc/hostname"
    if kind == "sugarcrepe":
        (root / "sugarcrepe").mkdir(parents=True)
        for subset in ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj"):
            (root / "sugarcrepe" / f"{subset}.json").write_text(json.dumps(
                {"0": {"filename": escape, "caption": "a", "negative_caption": "b"}}))
    elif kind == "retrieval":
        (root / "flickr30k").mkdir(parents=True)
        (root / "flickr30k" / "dataset_flickr30k.json").write_text(json.dumps({"images": [
            {"split": "test", "filepath": "..", "filename": "../x.jpg", "sentences": [{"raw": "a"}]}]}))
    elif kind == "winoground":
        (root / "winoground").mkdir(parents=True)
        (root / "winoground" / "examples.jsonl").write_text(json.dumps(
            {"id": 0, "caption_0": "a", "caption_1": "b", "image_0": "/etc/hostname", "image_1": "x"}) + "\n")
    elif kind == "coco_probe":
        (root / "coco" / "annotations").mkdir(parents=True)
        for split in ("train", "val"):
            (root / "coco" / "annotations" / f"instances_{split}2017.json").write_text(json.dumps(
                {"images": [{"id": 1, "file_name": escape}], "annotations": [], "categories": [{"id": 1}]}))
    if kind == "pairs":
        (root / "images").mkdir(parents=True)
        (root / "pairs.jsonl").write_text(json.dumps({"id": "a", "caption": "a dog", "image": escape}) + "\n")
        with pytest.raises(UnsafePathError, match="points outside"):
            PairsDataset([str(root / "pairs.jsonl")], str(root / "images"))
    else:
        with pytest.raises(BenchmarkDataError, match="points outside"):
            load_data(kind, root, skip_missing=True)


@pytest.mark.processes
def test_ctrl_c_in_plant_prints_how_to_resume_and_no_traceback(tmp_path):
    captions, images = make_dataset(tmp_path, 3000, image_size=16)
    out = tmp_path / "cb"
    proc = subprocess.Popen([sys.executable, "-m", "concrete_jungle.cli",
                             *plant_args(captions, images, out, "--samples-per-shard", 50, "--batch-size", 8)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: any(out.glob("shard-*.tar")))
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in stderr
    assert "interrupted: nothing is lost" in " ".join(stderr.split())


def test_plant_summary_is_readable_says_what_it_reused_and_limit_tries_a_few(tmp_path, capsys):
    captions, images = make_dataset(tmp_path, 40, image_size=16)
    args = plant_args(captions, images, tmp_path / "cb", "--samples-per-shard", 5, "--limit", 12)
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "{" not in printed and "'" not in printed and f"written: {tmp_path / 'cb'}" in printed
    rows = (tmp_path / "cb" / "manifest.jsonl").read_text().splitlines()
    assert len(rows) == 12
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "reusing 3 finished shard(s) of an earlier run (12 samples); 0 to make" in " ".join(captured.err.split())
    assert json.loads((tmp_path / "cb" / "summary.json").read_text())["shards_reused"] == 3
    assert main(args[:-1] + ["20"]) == 2  # another limit is another dataset
    assert "limit differs" in capsys.readouterr().err


def test_plant_refuses_a_training_run_folder_and_missing_images_before_writing(run, tmp_path, capsys):
    captions, images = make_dataset(tmp_path, 10, image_size=8)
    before = sorted(p.name for p in run.iterdir())
    assert main(plant_args(captions, images, run)) == 2
    assert "holds a training run" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == before
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(plant_args(captions, empty, tmp_path / "cb")) == 2
    assert "none of the first 10 images exist" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "cb").exists()


def test_plant_refuses_a_folder_of_other_files_naming_one_and_resumes_its_own(tmp_path, capsys):
    captions, images = make_dataset(tmp_path, 8, image_size=8)
    results = tmp_path / "results"  # an evaluation's folder: its summary.json has the name of plant's
    results.mkdir()
    (results / "summary.json").write_text('{"compositional": {"mean": 0.61}}\n')
    assert main(plant_args(captions, images, results)) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--out {results} holds {results / 'summary.json'}, which is not a file of a dataset `plant` made" in err
    (results / "results.md").write_text("# results\n")
    assert main(plant_args(captions, images, results)) == 2
    assert f"holds {results / 'results.md'}" in " ".join(capsys.readouterr().err.split())
    assert sorted(p.name for p in results.iterdir()) == ["results.md", "summary.json"]
    assert (results / "summary.json").read_text() == '{"compositional": {"mean": 0.61}}\n'
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out)) == 0
    assert main(plant_args(captions, images, out)) == 0  # its own dataset: resumed, as always
    assert "reusing 1 finished shard(s) of an earlier run" in " ".join(capsys.readouterr().err.split())


class GatedCaptioner(PurpleCaptioner):
    """A captioner that starts only once the file ``gate`` exists: a run held after its keywords, as a slow model
    load holds one."""

    def __init__(self, gate: str):
        super().__init__()
        if not wait_for(Path(gate).exists):
            raise TimeoutError(f"{gate} did not appear")


def test_a_second_plant_job_that_splits_the_folder_otherwise_is_refused_naming_the_first_ones_parts(tmp_path, capsys):
    captions, images = make_dataset(tmp_path, 12, image_size=8)
    out, gate = tmp_path / "cb", tmp_path / "gate"
    first = plant_args(captions, images, out, "--num-shards", 2, "--shard-index", 0,
                       "--captioner", "test_plant:GatedCaptioner", "--captioner-option", f"gate={gate}")
    with ThreadPoolExecutor(1) as pool:
        job = pool.submit(main, first)
        try:  # the first job is past its keywords, before its config.yaml: the second sees only its part files
            assert wait_for(lambda: (out / "keywords-00000-of-00002.summary.json").exists() or job.done())
            assert not job.done() and not (out / "config.yaml").exists()
            assert main(plant_args(captions, images, out, "--num-shards", 3, "--shard-index", 1)) == 2
        finally:
            gate.touch()
        assert job.result(timeout=120) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"{out} is split into 2 part(s) by another run" in err and "--num-shards 2 too" in err
    assert not list(out.glob("*of-00003*"))
    assert (out / "manifest-00000-of-00002.jsonl").is_file()


@pytest.mark.system_packages
def test_the_rules_captioner_without_wordnet_says_what_it_costs_once_at_the_start(tmp_path, capsys, monkeypatch):
    from concrete_jungle.plant.captioners import rules

    monkeypatch.setattr(rules, "WORDNET_ROOT", tmp_path / "no-wordnet")  # as where wordnet-base is not installed
    rules.load_wordnet.cache_clear()
    captions, images = make_dataset(tmp_path, 6, image_size=8)
    try:
        assert main(plant_args(captions, images, tmp_path / "cb")) == 0
    finally:
        rules.load_wordnet.cache_clear()  # the next test finds the installed WordNet again
    lines = [line for line in capsys.readouterr().err.splitlines() if "WordNet" in line]
    assert len(lines) == 1 and lines[0].startswith("plant: WordNet 3.0 is not installed"), lines
    assert "about 45 % of hc, 38 % of lc and 40 % of wo samples become rejects" in lines[0]
    assert lines[0].endswith("install it: apt-get install wordnet-base")
    assert main(plant_args(captions, images, tmp_path / "cb-lexicon", "--captioner-option", "wordnet=false")) == 0
    assert "WordNet" not in capsys.readouterr().err  # asked for no WordNet: nothing to say


@pytest.mark.processes
@pytest.mark.parametrize("flags, message, local", [
    (["--editor", "diffusers", "--editor-model", "nobody/no-such-img2img-model"],
     "--editor-model nobody/no-such-img2img-model is not in the local Hugging Face cache and HF_HUB_OFFLINE is set",
     "--editor-model DIR"),
    (["--captioner", "transformers", "--model", "nobody/no-such-causal-lm"],
     "--model nobody/no-such-causal-lm is not in the local Hugging Face cache and HF_HUB_OFFLINE is set",
     "--model DIR"),
    (["--score", "--scorer-option", "bertscore.model=nobody/no-such-scorer", "--scorer-option",
      "bertscore.num_layers=2"],
     "--scorer-option bertscore.model=nobody/no-such-scorer is not in the local Hugging Face cache and "
     "HF_HUB_OFFLINE is set", "--scorer-option bertscore.model=DIR"),
])
def test_a_model_that_cannot_be_had_offline_is_one_line_before_any_file(tmp_path, flags, message, local):
    captions, images = make_dataset(tmp_path, 4, image_size=8)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")} | {
        "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "HOME": str(tmp_path)}  # an empty cache
    out = tmp_path / "cb"
    done = subprocess.run([sys.executable, "-m", "concrete_jungle.cli", *plant_args(captions, images, out, *flags)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # one line, nothing before it
    err = " ".join(done.stderr.split())
    assert message in err and "download it once with the network" in err and "or pass a local folder" in err
    assert err.endswith(f"or pass a local folder ({local})")
    assert not out.exists()


def test_seen_ids_finds_every_repeat_as_a_set_would_across_merges():
    import random

    from concrete_jungle.plant.streams import SeenIds

    rng = random.Random(0)
    ids = [f"id{rng.randrange(3000)}" for _ in range(5000)] + ["", "café", "\ud800"]  # repeats, odd ids
    seen, reference = SeenIds(), set()
    seen.recent_limit = 64  # many merges into the sorted arrays
    for sample_id in ids:
        assert seen.add(sample_id) == (sample_id in reference), sample_id
        reference.add(sample_id)
    assert sum(map(len, seen.high)) + len(seen.recent) == len(reference)


def test_value_tally_gives_the_mean_and_median_of_the_list_to_the_last_bit():
    import random

    from concrete_jungle.plant.streams import ValueTally
    from concrete_jungle.records import mean_median

    rng = random.Random(1)
    table = [round(rng.uniform(1, 5), 2) for _ in range(300)]  # ratings repeat: they are a table's
    for n in (0, 1, 2, 7, 1000, 4001):
        values = [rng.choice(table) for _ in range(n)]
        tally = ValueTally()
        for v in values:
            tally.add(v)
        assert tally.mean_median() == mean_median(values)


def test_atomic_jsonl_writes_atomic_write_jsonl_s_bytes_and_leaves_nothing_on_an_error(tmp_path):
    from concrete_jungle.plant.streams import AtomicJsonl, read_records, repair_tail
    from concrete_jungle.records import atomic_write_jsonl

    rows = [{"id": "a", "caption": "ünïcode \u2028 line", "n": 1.5}, {"id": "b", "z": None, "a": [1, 2]}]
    atomic_write_jsonl(tmp_path / "list.jsonl", rows)
    with AtomicJsonl(tmp_path / "rows.jsonl") as out:
        for row in rows:
            out.write(row)
    assert (tmp_path / "rows.jsonl").read_bytes() == (tmp_path / "list.jsonl").read_bytes()
    with pytest.raises(RuntimeError), AtomicJsonl(tmp_path / "rows.jsonl") as out:
        out.write({"id": "c"})
        raise RuntimeError("stopped")
    assert (tmp_path / "rows.jsonl").read_bytes() == (tmp_path / "list.jsonl").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["list.jsonl", "rows.jsonl"]
    # a killed appender's half line is cut, and only it
    with open(tmp_path / "rows.jsonl", "a") as f:
        f.write('{"id": "half')
    repair_tail(tmp_path / "rows.jsonl")
    assert list(read_records(tmp_path / "rows.jsonl")) == rows


def test_a_split_run_whose_input_repeats_an_id_merges_with_the_repeat_a_reject(tmp_path):
    captions, images = make_dataset(tmp_path, 20, image_size=8)
    with open(captions, "a") as f:  # the same id again: the keyword stage's "duplicate id", in the id's own part
        f.write(json.dumps({"id": "img00003", "caption": "A red dog on the bench", "image": "img00004.jpg"}) + "\n")
    out = tmp_path / "cb"
    for i in (0, 1):
        assert main(plant_args(captions, images, out, "--num-shards", 2, "--shard-index", i)) == 0
    assert main(["plant", "merge", str(out)]) == 0
    rows = [r for r in read_manifest(out) if r["id"] == "img00003"]
    assert len(read_manifest(out)) == 21 and [r.get("reason") for r in rows] == [None, "duplicate id"]


def test_keyword_candidates_leave_spacy_s_vocabulary_as_it_was(nlp, ratings):
    from concrete_jungle.plant.keyword_job import candidates_of

    before = len(nlp.vocab.strings)
    texts = [f"A red dog sitting under the table number {i} near Zyx{i}ville" for i in range(300)]
    found = candidates_of(texts, nlp, ratings)
    assert len(nlp.vocab.strings) == before  # new words (numbers, names) do not stay: memory flat in the input
    assert all(any(c.text == "dog" and c.category == "object" for c in cands) for cands in found)
    assert found == candidates_of(texts, nlp, ratings)
