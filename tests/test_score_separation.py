"""The toy world's score-separation benchmark on a tiny world: the viewer's verdicts agree with the faulty editor's
own record of the prompts it ignored, and the AUCs are sklearn's on the same scores."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import score_separation  # noqa: E402  (the committed command)

from concrete_jungle.concretebatch import iter_records  # noqa: E402
from concrete_jungle.records import read_jsonl  # noqa: E402
from concrete_jungle.toyworld.faulty import FaultyToyEditor  # noqa: E402
from concrete_jungle.toyworld.rewrite import WorldInputError  # noqa: E402
from concrete_jungle.toyworld.separation import (
    DIRECTIONS,
    VerdictError,
    auc_interval,
    pair_verdicts,
    roc_auc,  # noqa: E402
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The benchmark on 60 scenes with a random-init toy CLIP: its result and output folder."""
    out = tmp_path_factory.mktemp("separation")
    result = score_separation.main(["--out", str(out), "--scenes", "60", "--pretrain-steps", "0",
                                    "--resamples", "200"])
    return result, out


def test_the_viewer_calls_a_negative_untrue_of_its_picture_exactly_where_the_editor_ignored_the_prompt(run):
    result, out = run
    verdicts = read_jsonl(out / "verdicts.jsonl")
    record = {line["seed"]: line for line in read_jsonl(Path(result["dataset"]).parent / "editor_record.jsonl")}
    faults = [record[v["seed"]]["fault"] for v in verdicts]
    assert len(verdicts) == result["counts"]["pairs"] > 40
    assert {"keep", "repaint", None} <= set(faults) and 0.3 < sum(f is not None for f in faults) / len(faults) < 0.7
    for v, fault in zip(verdicts, faults):
        # a followed prompt is true of its picture; a kept picture is the anchor, of which the negative is true only
        # where it reads true of the anchor (a light or mood edit: the viewer reads neither); a repaint never
        assert v["true_of_picture"] == (True if fault is None else not v["false_of_anchor"] if fault == "keep"
                                        else False), v
        assert v["good"] == (fault is None and v["false_of_anchor"]), v
    # a kept negative is the anchor's picture, byte for byte as stored; a repainted or edited one is not
    kept = {v["id"] for v, fault in zip(verdicts, faults) if fault == "keep"}
    for r in iter_records(result["dataset"]):
        same = np.array_equal(np.asarray(r["image"]), np.asarray(r["neg_image"]))
        assert same == (r["meta"]["id"] in kept)


def test_the_table_s_aucs_are_sklearn_s_on_the_planted_scores(run):
    result, out = run
    verdicts = read_jsonl(out / "verdicts.jsonl")
    assert set(result["separation"]) == {"agreement", "agreement_anchor", "agreement_negative", "clip_text_sim",
                                         "clip_image_sim", "image_sim"}
    for score, row in result["separation"].items():
        for against, cell in row["against"].items():
            chosen = [v for v in verdicts if v["good"] or against in ("all bad", v["cause"])]
            good = [v["good"] for v in chosen]
            turned = [DIRECTIONS[score] * v["scores"][score] for v in chosen]
            assert cell["auc"] == pytest.approx(roc_auc_score(good, turned), abs=1e-12), (score, against)
            assert cell["ci95"][0] <= cell["auc"] <= cell["ci95"][1]
    # the pixel similarity of a kept picture is exactly 1, above every edit: a perfect separation, a point interval
    keep = result["separation"]["image_sim"]["against"]["keep"]
    assert keep["auc"] == 1.0 and keep["ci95"] == [1.0, 1.0]
    assert (out / "separation.md").read_text().count("| `") == 2 * len(result["separation"]) + len(result["gates"])


def test_the_gate_table_counts_the_pairs_each_set_of_gates_keeps(run):
    result, out = run
    verdicts = read_jsonl(out / "verdicts.jsonl")
    for cause, (kept, n) in result["gates"]["agreement>=0.0,image_sim<1.0"].items():
        mine = [v for v in verdicts if v["cause"] == cause]
        assert n == len(mine) and kept == sum(v["scores"]["agreement"] >= 0 and v["scores"]["image_sim"] < 1
                                              for v in mine)
    # a kept picture is the anchor's JPEG: its pixel similarity is exactly 1, and its agreement is min(a, -a) <= 0
    keep = [v["scores"] for v in verdicts if v["cause"] == "keep"]
    assert all(s["image_sim"] == 1.0 and s["clip_image_sim"] == pytest.approx(1.0, abs=1e-5)
               and s["agreement"] == pytest.approx(-abs(s["agreement_anchor"]), abs=1e-5) for s in keep)
    assert result["gates"]["image_sim<1.0"]["keep"][0] == 0


def test_roc_auc_counts_ties_as_half_as_sklearn_does():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, 300).astype(float)  # many ties
    good = rng.random(300) < 0.4
    assert roc_auc(scores, good) == pytest.approx(roc_auc_score(good, scores), abs=1e-12)
    assert roc_auc([1, 1, 1, 1], [True, False, True, False]) == 0.5
    low, high = auc_interval(scores, good, resamples=300, seed=1)
    assert low < roc_auc(scores, good) < high and [low, high] == auc_interval(scores, good, resamples=300, seed=1)
    with pytest.raises(VerdictError, match="good and bad"):
        roc_auc([0.1, 0.2], [True, True])


def test_a_record_that_does_not_describe_the_stored_picture_is_refused(run, tmp_path):
    result, _ = run
    dataset = Path(result["dataset"])
    lines = read_jsonl(dataset.parent / "editor_record.jsonl")
    edited = next(i for i, line in enumerate(lines) if line["fault"] is None)
    lines[edited]["fault"] = "keep"  # claims the anchor came back where the editor drew the prompt
    wrong = tmp_path / "record.jsonl"
    wrong.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(VerdictError, match="negative picture stored"):
        pair_verdicts(dataset, result["world"], wrong)


@pytest.mark.parametrize("option, value, message", [("rate", 1.5, "rate=1.5"), ("faults", "blur", "faults='blur'"),
                                                    ("seed", "x", "seed='x'")])
def test_the_faulty_editor_names_a_bad_option(run, option, value, message):
    with pytest.raises(WorldInputError, match=message):
        FaultyToyEditor(run[0]["world"], **{option: value})
