"""The blind baseline of the newer choice benchmarks (docs/method.md §7, "Validity checks"): where a picture chooses
among texts, the benchmark's own rule against the mean picture, computed here from each picture and text encoded
alone; where a text chooses among pictures, no blind value (``not_applicable``, shown n/a)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from concrete_jungle.evaluation import report
from concrete_jungle.evaluation.benchmarks import bivlc, crepe, imagecode, mmvp_vlm, spec, svo_probes, vl_checklist
from concrete_jungle.evaluation.encoding import Encoder
from concrete_jungle.evaluation.validity import MACRO, MICRO
from test_image_choice_benchmarks import write_bivlc
from test_list_benchmarks import picture, text, write_crepe, write_imagecode, write_spec, write_svo, write_vl_checklist
from test_pair_benchmarks import write_mmvp


def mean_of(features: list[torch.Tensor]) -> torch.Tensor:
    return F.normalize(torch.stack(features).mean(0), dim=-1)


def test_bivlc_s_blind_images_choose_captions_by_the_mean_picture_and_captions_choosing_images_are_n_a(tmp_path,
                                                                                                        clip):
    rows = write_bivlc(tmp_path / "bivlc")
    data = bivlc.load_root(tmp_path)
    result = bivlc.evaluate(Encoder(clip, batch_size=5, progress=False), data)
    images = tmp_path / "bivlc" / "images"
    files = sorted({r[k] for r in rows for k in ("image", "negative_image")})
    mean = mean_of([picture(clip, images / f) for f in files])
    pos = [float(mean @ text(clip, r["caption"]) > mean @ text(clip, r["negative_caption"])) for r in rows]
    neg = [float(mean @ text(clip, r["negative_caption"]) > mean @ text(clip, r["caption"])) for r in rows]
    blind = result["blind"]
    assert blind["pictures"] == len(files)
    assert blind["metrics"]["Ipos_2T"] == pytest.approx(np.mean(pos), abs=1e-9)
    assert blind["metrics"]["Ineg_2T"] == pytest.approx(np.mean(neg), abs=1e-9)
    assert blind["metrics"]["I2T"] == 0  # one picture for both images prefers one caption twice
    assert {"T2I", "Tpos_2I", "group", "macro/T2I", "replace/group"} <= set(blind["not_applicable"])
    assert set(blind["metrics"]) | set(blind["not_applicable"]) == set(result["metrics"])
    assert result["averages"]["I2T"] == MICRO and result["averages"]["macro/I2T"] == MACRO
    table = report.markdown({"bivlc": result})
    assert "| T2I |" in table and " n/a |" in table and "n/a: a caption choosing among pictures" in table


def test_crepe_and_vl_checklist_blind_rank_the_texts_against_the_mean_picture_under_their_own_tie_rule(tmp_path,
                                                                                                       clip):
    rows = write_crepe(tmp_path)
    result = crepe.evaluate(Encoder(clip, batch_size=5, progress=False), crepe.load_root(tmp_path))
    vg = tmp_path / "crepe" / "vg"
    regions = {(i, x, y, w, h) for lines in rows.values() for i, x, y, w, h, *_ in lines}
    mean = mean_of([picture(clip, vg / ("VG_100K_2" if i == 3 else "VG_100K") / f"{i}.jpg", box=(x, y, w, h))
                    for i, x, y, w, h in regions])
    assert result["blind"]["pictures"] == len(regions)
    for (kind, c), lines in rows.items():
        right = []
        for *_, caption, negatives in lines:
            scores = [float(mean @ text(clip, t)) for t in [caption, *negatives]]
            right.append(all(s <= scores[0] for s in scores[1:]))  # a tie ranks the caption first
        assert result["blind"]["metrics"][f"{kind}/c{c}"] == pytest.approx(np.mean(right), abs=1e-9)
    assert result["blind"]["metrics"]["CREPE"] is None  # as the model's: part of the release
    files = write_vl_checklist(tmp_path)
    result = vl_checklist.evaluate(Encoder(clip, batch_size=4, progress=False), vl_checklist.load_root(tmp_path))
    shown = {}
    for sources in vl_checklist.CATEGORIES.values():
        for name, folder in (e for entries in sources.values() for e in entries):
            for path, _ in files.get(name, []):
                shown[tmp_path / "vl_checklist" / folder / path] = None
    mean = mean_of([picture(clip, p, rgb=False) for p in shown])
    for category in ("Relation/action", "Relation/spatial"):
        per_source = []
        for entries in vl_checklist.CATEGORIES[category].values():
            per_source.append(np.mean([np.mean([float(mean @ text(clip, t["POS"][0]) > mean @ text(clip, t["NEG"][0]))
                                                for _, t in files[f]]) for f, _ in entries]))
        assert result["blind"]["metrics"][category] == pytest.approx(np.mean(per_source), abs=1e-9)


def test_spec_s_blind_covers_its_image_to_text_queries_only(tmp_path, clip):
    cases = write_spec(tmp_path)
    result = spec.evaluate(Encoder(clip, batch_size=4, progress=False), spec.load_root(tmp_path))
    queries = {tmp_path / "spec" / s / q["query"] for s, (i2t, _) in cases.items() for q in i2t}
    mean = mean_of([picture(clip, p) for p in queries])
    for subset, (i2t, _) in cases.items():
        right = [int(np.argmax([float(mean @ text(clip, k)) for k in q["keys"]])) == q["label"] for q in i2t]
        assert result["blind"]["metrics"][f"{subset}/i2t"] == pytest.approx(np.mean(right), abs=1e-9)
    assert set(result["blind"]["not_applicable"]) == {"count/t2i", "existence/t2i", "t2i"}


@pytest.mark.parametrize("name", ["mmvp_vlm", "imagecode", "svo_probes"])
def test_a_text_choosing_among_pictures_has_no_blind_value_and_its_averages_are_labelled(tmp_path, clip, name):
    module, write, labels = {"mmvp_vlm": (mmvp_vlm, write_mmvp, {"macro": MACRO, "micro": MICRO}),
                             "imagecode": (imagecode, write_imagecode, {"ImageCoDe": MICRO}),
                             "svo_probes": (svo_probes, write_svo, {"SVO-Probes": MACRO,
                                                                    "SVO-Probes (micro)": MICRO})}[name]
    write(tmp_path)
    result = module.evaluate(Encoder(clip, progress=False), module.load_root(tmp_path, skip_missing=True))
    assert result["blind"]["metrics"] == {} and result["blind"]["not_applicable"] == list(result["metrics"])
    assert result["averages"] == labels
