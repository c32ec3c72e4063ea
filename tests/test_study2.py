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
from concrete_jungle.experiments.published import load, read_curves
from concrete_jungle.experiments.stages import BASELINE, CONTROL, Stages, code_version
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
    from concrete_jungle.outcomes import series

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
    """Stopped after three compared rows and started again: the finished rows are reused, the wall time counts both
    starts, run.json records each start's code (commit and dirty flag), every row's training curve is published,
    and the published files alone recompute the report."""
    tiny = dict(world=replace(Study2Config().world, train=160, test=40, val=30), pretrain_batch_size=16,
                pretrain_max_steps=10, pretrain_every=5, batch_sizes=(8, 16), share_pairs=64, max_steps=10,
                curve_every=5, seeds=(0, 1), bootstrap=50)
    monkeypatch.setitem(study2.PROFILES, "cpu", tiny)  # the cpu profile at toy size: the command's own path
    out = tmp_path / "study2"
    # the profile is not the committed design's: started as not pre-registered, and recorded so
    command = ["study", "run", "study2", "--out", str(out), "--no-progress", "--not-preregistered"]
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
    run = json.loads((out / "published" / "run.json").read_text())
    assert counted < run["seconds"] <= counted + second_start + 0.1
    # each start with the code it ran: this checkout's commit and dirty flag, or why they are not known
    now = code_version()
    assert len(run["starts"]) == 2 and run["starts"][0]["started"] <= run["starts"][1]["started"]
    for start in run["starts"]:
        assert start["code"]["commit"] == now["commit"] and start["code"]["version"] == now["version"]
        assert isinstance(start["code"]["dirty"], bool) if now["commit"] else start["code"]["reason"]
        assert start["last_stage"] >= start["started"] and start["code_at_last_stage"]["commit"] == now["commit"]
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
    assert "2 start(s): start 1 (" in " ".join(report.split()) and "curves.jsonl.gz" in report
    assert run["preregistration"] == "not pre-registered" and all(not s["preregistration"]["preregistered"]
                                                                  for s in run["starts"])
    assert "**Not pre-registered**: start 1 ran with --not-preregistered" in " ".join(report.split())
    # the training curve of every row and seed, each step of its run: the baseline's pretraining, the fine-tunes'
    curves = read_curves(out / "published" / "curves.jsonl.gz", load(out / "published")[2])
    assert set(curves) == {(BASELINE, None)} | {(r.label, s) for r in ROWS for s in (0, 1)}
    assert [r["step"] for r in curves[(BASELINE, None)]] == list(range(1, 11))
    assert all([r["step"] for r in curves[(r.label, s)]] == list(range(1, design["steps"] + 1)) and
               all(isinstance(step["loss"], float) for step in curves[(r.label, s)]) for r in ROWS for s in (0, 1))
    import shutil

    published = tmp_path / "published"
    shutil.copytree(out / "published", published)
    shutil.rmtree(out)
    assert main(["study", "report", str(published), "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    assert again["table"] == result["table"] and again["primary"] == result["primary"]
    assert again["secondary"] == result["secondary"]
    assert (tmp_path / "again" / "study.md").read_text() == report
    (published / "curves.jsonl.gz").unlink()  # published with its digest: a folder without it is not the study's
    assert main(["study", "report", str(published)]) == 2
    assert "digests.json lists the sha256 of" in " ".join(capsys.readouterr().err.split())



def errata_text() -> str:
    text = (DOCS / "studies" / "study2.md").read_text()
    return " ".join(text[text.index("## Errata (2026-12-02)"):].split())


@pytest.mark.slow  # renders Study 2's world and plants its three datasets: minutes
def test_errata_study2_s_negatives_edit_one_field_none_swaps_and_some_name_a_test_scene_s_things(tmp_path):
    """The errata's numbers that need the training data Study 2 did not publish, from its world and datasets
    rebuilt by its own stages and seed (the same samples planted and the same test counts as the run)."""
    import gzip
    from collections import Counter

    from concrete_jungle.concretebatch import iter_records
    from concrete_jungle.experiments.stages import StageConfig
    from concrete_jungle.records import read_jsonl
    from concrete_jungle.toyworld.build import named_part
    from concrete_jungle.toyworld.world import parse_caption, word_kind

    stages = Stages(StageConfig(out=str(tmp_path), world=Study2Config().world, no_leak=True), progress=False)
    world = stages.world()
    published = json.loads((DOCS / "studies" / "study2" / "world.json").read_text())
    assert json.loads((world / "world.json").read_text())["test_items"] == published["test_items"]
    text = errata_text()
    subset = {"shape": "replace_obj", "colour": "replace_att", "size": "replace_att", "texture": "replace_att",
              "relation": "replace_rel", "light": "none", "mood": "none"}
    scenes = read_jsonl(world / "scenes.jsonl")
    held_out = {split: {f"{split}/{r['image'].split('/')[-1]}": named_part(parse_caption(r["captions"][0]).key())
                        for r in scenes if r["split"] == split} for split in ("test", "val")}
    near, counts = {}, {}
    for mode, planted in (("hc", 3999), ("lc", 3992), ("wo", 3994)):
        records = list(iter_records(stages.plant(world, mode)))
        assert len(records) == planted  # as the run planted
        kinds = Counter()
        for record in records:
            anchor, negative = parse_caption(record["caption"]), parse_caption(record["neg_caption"])
            fields = [(a, f) for a, b in zip(anchor.things, negative.things) for f in ("shape", "colour", "size",
                                                                                       "texture")
                      if getattr(a, f) != getattr(b, f)]
            fields += [r for r, s in zip(anchor.relations, negative.relations) if r != s]
            fields += [w for w in ("light", "mood") if getattr(anchor, w) != getattr(negative, w)]
            assert len(anchor.things) == len(negative.things) and len(fields) == 1  # one field, no swap, no add
            kinds[subset[word_kind(record["meta"]["keyword"])]] += 1
        counts[mode] = kinds
        shares = {k: f"{v:,} ({100 * v / planted:.1f} %)" for k, v in kinds.items()}
        row = " | ".join(shares.get(k, "0") for k in ("replace_obj", "replace_att", "replace_rel", "none"))
        assert f"| D_{mode} | {row} |" in text
        negatives = [named_part(parse_caption(r["neg_caption"]).key()) for r in records]
        named = set(negatives)
        test_parts, any_parts = set(held_out["test"].values()), {*held_out["test"].values(), *held_out["val"].values()}
        near[mode] = {scene for scene, part in held_out["test"].items() if part in named}
        kinds["test negatives"] = sum(n in test_parts for n in negatives)
        kinds["held-out negatives"] = sum(n in any_parts for n in negatives)
    hc = counts["hc"]
    assert f"**{100 * (hc['replace_obj'] + hc['replace_att']) / 3999:.1f} %** of D_hc's edits" in text
    assert "**11,985** negatives (3,999 + 3,992 + 3,994)" in text
    assert (f"**{' / '.join(str(counts[m]['test negatives']) for m in ('hc', 'lc', 'wo'))}** negatives of D_hc / "
            f"D_lc / D_wo have exactly the things and relations of "
            f"**{' / '.join(str(len(near[m])) for m in ('hc', 'lc', 'wo'))}** test scenes") in text
    assert f"(**{' / '.join(str(counts[m]['held-out negatives']) for m in ('hc', 'lc', 'wo'))}** negatives" in text
    # no advantage on those scenes' items: accuracy over the seven subsets' items and the three seeds
    right = Counter()
    with gzip.open(DOCS / "studies" / "study2" / "answers.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            row, _, series, _, unit, value = json.loads(line)
            if unit in near["hc"] and series in published["test_items"]:
                right[row] += value
                right[(row, "answers")] += 1
    items = right[(CONTROL.label, "answers")] // 3  # three seeds
    assert f"D_hc's {len(near['hc'])} ({items} items, three seeds)" in text
    for row in (CONTROL.label, "D_hc + InfoNCE", "D_hc + Cement", "augmentation control (negative pairs apart)"):
        assert f"{100 * right[row] / right[(row, 'answers')]:.1f} %" in text
    assert max(right[r] for r in ("D_hc + InfoNCE", "D_hc + Cement")) < right[CONTROL.label]
