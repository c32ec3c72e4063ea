"""Study 2: its pre-registered design as written in the docs, its Holm-corrected contrasts on answers whose truth
is known, and a tiny run that is stopped midway and resumes row by row."""

import hashlib
import json
import re
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from concrete_jungle.cli import main
from concrete_jungle.experiments import study2
from concrete_jungle.experiments.stages import BASELINE, CONTROL, Stages
from concrete_jungle.experiments.study2 import PRIMARY, ROWS, SECONDARY, Study2Config, contrasts

DOCS = Path(__file__).resolve().parents[1] / "docs"
SUBSETS = ("add_att", "add_obj", "replace_obj", "swap_obj")


def design_section() -> str:
    """The design section of docs/studies/study2.md (formerly a section of docs/toyworld.md)."""
    text = (DOCS / "studies" / "study2.md").read_text()
    start = text.index("## Study 2: a pre-registered experiment")
    return text[start:text.index("\n## ", start + 1)]


def test_the_design_section_is_the_one_committed_before_the_study_ran():
    """Pre-registration: the section's text is byte for byte what commit 8bd86e4 held in docs/toyworld.md, before
    any part of Study 2 existed (`git show 8bd86e4:docs/toyworld.md`); results and notes go in sections of their
    own."""
    digest = hashlib.sha256(design_section().encode()).hexdigest()
    assert digest == "01b9ec2fce7103f635b432115472b9020f74562bfa4653a277cb0ee9596267ac"


def table(section: str, header: str) -> list[list[str]]:
    """The rows of the markdown table whose header line starts with ``header``."""
    lines = section.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[at + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def contrast_text(weights: dict) -> str:
    return "".join(("" if i == 0 and w > 0 else " − " if w < 0 else " + ") + f"`{label}`"
                   for i, (label, w) in enumerate(weights.items()))


def settings(c: Study2Config) -> dict[str, str]:
    w = c.world
    return {"training scenes": w.train, "validation scenes": w.val, "test scenes": w.test, "world seed": w.seed,
            "held-out rule": w.held_out, "image format": w.image_format, "test negatives": w.test_negatives,
            "model": c.model, "pretraining batch size": c.pretrain_batch_size,
            "pretraining learning rate": c.pretrain_lr, "pretraining curve steps": c.pretrain_max_steps,
            "pretraining checkpoint every": c.pretrain_every, "fine-tuning learning rate": c.finetune_lr,
            "batch size candidates": ", ".join(map(str, c.batch_sizes)), "gradient-share threshold": c.share_threshold,
            "gradient-share pairs": c.share_pairs, "control curve steps": c.max_steps,
            "control curve every": c.curve_every, "plateau (points of validation Recall@1)": c.plateau,
            "seeds": ", ".join(map(str, c.seeds)), "bootstrap resamples": c.bootstrap, "alpha": c.alpha}


def test_the_design_section_is_the_code_s_design_and_the_published_design_s():
    """Every setting, row and contrast of the docs' design section is the code's; once published, the committed
    design.json holds the same rules."""
    section = design_section()
    written = {row[0]: row[1] for row in table(section, "| setting | value |")}
    assert written == {k: str(v) for k, v in settings(Study2Config()).items()}
    rows = [row[0] for row in table(section, "| row | data | loss | negatives |")]
    assert rows == [BASELINE] + [r.label for r in ROWS]
    negatives = {r[0]: r[3] for r in table(section, "| row | data | loss | negatives |")}
    assert all(negatives[r.label] == ("masked" if not r.negatives else "apart" if r.apart else "beside their anchors")
               for r in ROWS)
    primary, secondary = (table(section, "| | claim | metric | contrast |"),
                          table(section[section.index("**Secondary contrasts**"):], "| | claim | metric | contrast |"))
    for written_rows, code in ((primary, PRIMARY), (secondary, SECONDARY)):
        assert written_rows == [[name, claim, metric, contrast_text(w)] for name, claim, metric, w in code]
    published = DOCS / "studies" / "study2" / "design.json"
    if published.is_file():  # written by the run; the rules it ran by are the ones above
        design = json.loads(published.read_text())
        assert {k: str(v) for k, v in settings(Study2Config(**{
            **design["config"], "world": replace(Study2Config().world, **design["config"]["world"]),
            "batch_sizes": tuple(design["config"]["batch_sizes"]), "seeds": tuple(design["config"]["seeds"])})).items()
                } == written
        assert [r["label"] for r in design["rows"]] == rows[1:]
        assert design["primary"] == [list(h) for h in PRIMARY] and design["secondary"] == [list(h) for h in SECONDARY]


def answers(rates: dict[str, float], seeds=(0, 1, 2), items=300, seed=0):
    """Every row's answers with the given accuracy per row (default 0.6): the same items, three per scene."""
    from concrete_jungle.evaluation.sugarcrepe import recipes
    from concrete_jungle.stats import series

    rng = np.random.default_rng(seed)
    out = {}
    for label in [r.label for r in ROWS]:
        for s in seeds:
            answers = {sub: series(range(items), [f"scene{i // 3}" for i in range(items)],
                                   rng.random(items) < rates.get(label, 0.6)) for sub in SUBSETS}
            out[(label, s)] = {"outcomes": {"series": answers, "metrics": recipes(list(SUBSETS))}}
    return out


def test_the_primary_family_is_holm_corrected_and_the_secondary_splits_read_their_own_subsets():
    found = contrasts(answers({"D_hc + Cement": 0.75}), (0, 1, 2), resamples=400)
    primary = {h["name"]: h for h in found[0]}
    assert primary["P1"]["verdict"] == "supported" and primary["P1"]["estimate"] > 10
    assert primary["P2"]["verdict"] == primary["P3"]["verdict"] == "not resolved"
    # Holm: the smallest p times three, the next never below it
    ranked = sorted(primary.values(), key=lambda h: h["p"])
    assert ranked[0]["p_holm"] == pytest.approx(min(1, 3 * ranked[0]["p"]))
    assert ranked[1]["p_holm"] >= ranked[0]["p_holm"]
    secondary = {h["name"]: h for h in found[1]}
    assert [h[0] for h in SECONDARY] == list(secondary)
    assert secondary["S3"]["verdict"] == "supported"  # D_hc + Cement above D_hc + InfoNCE
    # a difference only on add_att and add_obj shows in the ADD split and not in the targeted one
    only_add = answers({})
    for s in (0, 1, 2):
        for sub in ("add_att", "add_obj"):
            only_add[("D_hc + Cement", s)]["outcomes"]["series"][sub]["values"] = [1] * 300
    split = {h["name"]: h for h in contrasts(only_add, (0, 1, 2), resamples=200)[1]}
    assert split["P1-add"]["verdict"] == "supported" and split["P1-targeted"]["verdict"] == "not resolved"
    assert split["P1-targeted"]["estimate"] == pytest.approx(0.0, abs=6)


class Stop(Exception):
    """Stands for a killed run."""


def test_a_tiny_study2_stopped_midway_resumes_row_by_row_and_its_published_files_recompute_it(tmp_path, capsys,
                                                                                               monkeypatch):
    tiny = dict(world=replace(Study2Config().world, train=160, test=40, val=30), pretrain_batch_size=16,
                pretrain_max_steps=10, pretrain_every=5, batch_sizes=(8, 16), share_pairs=64, max_steps=10,
                curve_every=5, seeds=(0, 1), bootstrap=50)
    monkeypatch.setitem(study2.PROFILES, "cpu", tiny)  # the cpu profile at toy size: the command's own path
    out = tmp_path / "study2"
    command = ["study", "run", "study2", "--out", str(out), "--no-progress"]
    finetune, calls = Stages.finetune, []

    def stopped_after_three_rows(self, *args, **kwargs):  # the fourth compared fine-tune is killed
        if not kwargs.get("save_every"):
            calls.append(1)
            if len(calls) == 4:
                raise Stop
        return finetune(self, *args, **kwargs)

    monkeypatch.setattr(Stages, "finetune", stopped_after_three_rows)
    began = time.perf_counter()
    with pytest.raises(Stop):
        main(command)
    first_start = time.perf_counter() - began
    counted = json.loads((out / "wall_time.json").read_text())["seconds"]  # up to the third row's end
    assert 0 < counted <= first_start
    finished = sorted(out.glob("finetune-*/run/checkpoints/latest.json"))
    compared = [p for p in finished if "save_every" not in json.loads((p.parents[2] / "stage.json").read_text())]
    assert len(compared) == 3
    stamps = {p: p.stat().st_mtime_ns for p in finished}
    monkeypatch.setattr(Stages, "finetune", finetune)
    capsys.readouterr()
    began = time.perf_counter()
    assert main(command) == 0
    second_start = time.perf_counter() - began
    printed = capsys.readouterr().out
    # the report's wall time is both starts' (the first's up to its last finished row), not the last start's
    seconds = json.loads((out / "published" / "run.json").read_text())["seconds"]
    assert counted < seconds <= counted + second_start + 0.1
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())  # the finished rows were not trained again
    assert len(re.findall(r"reused: .*seed", printed)) == 3 + 1  # three rows and the control's curve
    design = json.loads((out / "design.json").read_text())
    assert design["study"] == "study2" and design["n"] in (8, 16) and 5 <= design["steps"] <= 10
    assert design["baseline_choice"]["steps"] in (5, 10)
    runs = [json.loads(p.read_text()) for p in out.glob("finetune-*/stage.json")]
    assert {(r["batch_size"], r["steps"]) for r in runs if "save_every" not in r} == {(design["n"], design["steps"])}
    assert len([r for r in runs if "save_every" not in r]) == len(ROWS) * 2
    assert sum(bool(r.get("apart")) for r in runs) == 2
    result = json.loads((out / "results.json").read_text())
    assert [h["name"] for h in result["primary"]] == ["P1", "P2", "P3"]
    assert set(result["table"]) == {BASELINE, CONTROL.label, *(r.label for r in ROWS)}
    report = (out / "study.md").read_text()
    assert "Holm" in report and f"**N = {design['n']}**" in report
    import shutil

    published = tmp_path / "published"
    shutil.copytree(out / "published", published)
    shutil.rmtree(out)
    assert main(["study", "report", str(published), "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    assert again["table"] == result["table"] and again["primary"] == result["primary"]
    assert again["secondary"] == result["secondary"]
    assert (tmp_path / "again" / "study.md").read_text() == report

