"""Each study's committed files (docs/studies/<name>/) rebuild every table row its results section in
docs/studies/<name>.md shows, through `concrete-jungle study report`, with no model and no world."""

import re
from pathlib import Path

import pytest

from concrete_jungle.cli import main

DOCS = Path(__file__).resolve().parents[1] / "docs"


def results_rows(page: str, heading: str) -> list[str]:
    """The table rows (headers included, separators not) of the section of docs/``page`` under ``heading``."""
    text = (DOCS / page).read_text()
    start = text.index(heading)
    end = re.compile(r"\n#{2,3} ").search(text, start + 1)
    section = text[start:end.start() if end else len(text)]
    return [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]


@pytest.mark.parametrize("study, heading, tables, rows", [
    ("study1", "### Study 1 rerun", 2, 7 + 9),
    ("study2", "## Study 2 results", 3, 3 + 11 + 10),
    ("gate", "## Result", 3, 2 + 2 + 6),
    ("gate2", "## Result", 3, 2 + 9 + 5),
    ("study3", "## Result", 7, 3 + 4 + 10 + 14 + 4 + 11 + 11),
])
def test_a_study_s_published_files_reproduce_every_number_of_its_results_in_the_docs(study, heading, tables, rows,
                                                                                   tmp_path):
    assert main(["study", "report", str(DOCS / "studies" / study), "--out", str(tmp_path)]) == 0
    report = (tmp_path / "study.md").read_text().splitlines()
    shown = results_rows(f"studies/{study}.md", heading)
    assert len(shown) == tables + rows  # every table of the report is in the docs, headers and all rows
    assert not [row for row in shown if row not in report]
    if study == "gate":  # its starts were recorded, but made before the runner checked a pre-registration
        assert "Pre-registration: not checked by the runner (its starts predate the check)." in " ".join(report)


def published_copy(tmp_path, study: str = "study1") -> Path:
    import shutil

    folder = tmp_path / study
    shutil.copytree(DOCS / "studies" / study, folder)
    return folder


def edit_one_answer(folder: Path) -> None:
    """One answer of D_hc + Cement flipped, every item kept: an edit consistent with the rest of the files."""
    import gzip
    import json

    path = folder / "answers.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith('["D_hc + Cement", 0, "add_att"'))
    answer = json.loads(lines[at])
    answer[-1] = 1.0 - answer[-1]
    lines[at] = json.dumps(answer, ensure_ascii=False)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def refusal(folder: Path, capsys) -> str:
    """`study report` on ``folder`` refused in one line (exit status 2): the line, unwrapped."""
    assert main(["study", "report", str(folder)]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) == 1, captured.err
    return " ".join(captured.err.split())


@pytest.mark.parametrize("changed", ["answers.jsonl.gz", "run.json"])
def test_a_published_file_changed_after_publishing_is_refused_naming_it(changed, tmp_path, capsys):
    folder = published_copy(tmp_path)
    if changed == "answers.jsonl.gz":
        edit_one_answer(folder)
    else:  # 128 minutes would print as 0
        (folder / "run.json").write_text('{\n  "seconds": 7.0\n}')
    err = refusal(folder, capsys)
    assert f"{folder / changed} is not the file the study published: its sha256 differs from the one digests.json " \
           "records" in err


def test_world_counts_that_disagree_with_the_answers_are_refused_naming_both(tmp_path, capsys):
    import json

    from concrete_jungle.experiments.published import load, write_digests

    folder = published_copy(tmp_path)
    assert load(folder)[1]["test_items"]["add_att"] == 1500  # the report's counts are the answers'
    world = json.loads((folder / "world.json").read_text())
    world["test_items"]["add_att"] = 7777
    (folder / "world.json").write_text(json.dumps(world))
    write_digests(folder)  # published so: the digests agree, the files do not
    err = refusal(folder, capsys)
    assert f"{folder / 'world.json'} says add_att has 7777 test items, {folder / 'answers.jsonl.gz'} holds 1500" in err


@pytest.mark.parametrize("damage, named", [
    ("answers cut in half", "answers.jsonl.gz"),
    ("design without its config", "design.json"),
    ("no digests", "digests.json"),
])
def test_damaged_published_files_are_one_line_naming_the_file(damage, named, tmp_path, capsys):
    import json

    from concrete_jungle.experiments.published import write_digests

    folder = published_copy(tmp_path)
    if damage == "answers cut in half":
        data = (folder / "answers.jsonl.gz").read_bytes()
        (folder / "answers.jsonl.gz").write_bytes(data[: len(data) // 2])
        write_digests(folder)
    elif damage == "design without its config":
        design = json.loads((folder / "design.json").read_text())
        del design["config"]
        (folder / "design.json").write_text(json.dumps(design))
        write_digests(folder)
    else:
        (folder / "digests.json").unlink()
    err = refusal(folder, capsys)
    assert str(folder / named) in err or f"{folder} has no digests.json" in err


def test_the_report_says_whether_its_minutes_are_the_last_start_s_or_every_start_s_and_each_start_s_code(tmp_path,
                                                                                                      capsys):
    """`study report docs/studies/study1` printed "128 minutes" for a study that took about 3 hours over several
    starts: run.json held the last start's seconds, and nothing said so; nor which code each start ran."""
    import json

    from concrete_jungle.experiments.published import write_digests

    folder = published_copy(tmp_path)
    assert main(["study", "report", str(folder)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "128 minutes (the wall time of its last start only: these files predate the record of every start's, so " \
           "a study that was stopped and resumed took longer, and the total is not in its files)" in out
    (folder / "run.json").write_text('{"seconds": 10800.0, "starts": "all"}')  # as 0.2.0's `publish` wrote it
    write_digests(folder)
    assert main(["study", "report", str(folder)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "180 minutes (wall time over all its starts)" in out and "each start ran is not recorded" in out
    start = {"started": "2026-12-02T10:00:00Z", "last_stage": "2026-12-02T11:00:00Z"}
    clean = {"version": "0.2.0", "commit": "a" * 40, "dirty": False, "changed": [], "changed_count": 0,
             "changes_sha256": None}
    dirty = clean | {"dirty": True, "changed": ["src/concrete_jungle/loss.py"], "changed_count": 1,
                     "changes_sha256": "b" * 64}
    (folder / "run.json").write_text(json.dumps({"seconds": 10800.0, "starts": [  # as `publish` writes it now
        start | {"code": clean, "code_at_last_stage": dirty},
        start | {"code": {"version": "0.2.0", "commit": None, "dirty": None, "reason": "git is not installed"}}]}))
    write_digests(folder)
    assert main(["study", "report", str(folder)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "180 minutes (wall time over all its starts)" in out
    assert ("2 start(s): start 1 (2026-12-02T10:00:00Z): commit aaaaaaaaaaaa, clean; by its last finished stage "
            "(2026-12-02T11:00:00Z): commit aaaaaaaaaaaa with 1 changed file(s) in the package") in out
    assert "start 2 (2026-12-02T10:00:00Z): code not known (git is not installed)" in out


# ---------------------------------------------------------------------------------------------- the errata
# Every number the studies' "Errata (2026-12-02)" sections state, recomputed from the published files (and the
# original Study 1's table, whose answers were not kept), and found in the section: an erratum cannot drift from
# the data. The numbers that need the training data are in tests/test_study2.py (`-m slow -k errata`).


def errata(page: str, date: str = "2026-12-02") -> str:
    """The errata section of docs/studies/``page``, its lines joined (a number may wrap)."""
    text = (DOCS / "studies" / page).read_text()
    return " ".join(text[text.index(f"## Errata ({date})"):].split())


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict:
    """Per study: ``study report``'s results.json and the published files as `published.load` reads them."""
    import json

    from concrete_jungle.experiments.published import load

    out = {}
    for study in ("study1", "study2"):
        folder = tmp_path_factory.mktemp(study)
        assert main(["study", "report", str(DOCS / "studies" / study), "--out", str(folder)]) == 0
        design, _, items, _ = load(DOCS / "studies" / study)
        out[study] = {"result": json.loads((folder / "results.json").read_text()), "design": design,
                      "items": items, "report": (folder / "study.md").read_text()}
    return out


def contrast(result: dict, name: str) -> dict:
    return next(h for h in result.get("primary", []) + result.get("secondary", []) + result.get("hypotheses", [])
                if h["name"] == name)


def interval(items: dict, weights: dict, metric: str, seeds=(0, 1, 2)) -> tuple[float, float, float]:
    """A contrast of the published answers (points), with its 95 % interval: 2,000 resamples of test scenes and
    seeds, seed 0 (paired by seed unless the baseline, one model, is in it)."""
    from concrete_jungle.experiments.stages import BASELINE
    from concrete_jungle.outcomes import bootstrap_contrast

    groups = {label: [items[(label, s)]["outcomes"] for s in ((None,) if label == BASELINE else seeds)]
              for label in weights}
    found = bootstrap_contrast(groups, weights, [metric], 2000, seed=0, paired_runs=BASELINE not in weights)[metric]
    return found["estimate"], *found["ci95"]


def points(x: float, digits: int = 2) -> str:
    """A signed number as the errata print it: a minus sign, not a hyphen, and +0.00 for what rounds to 0."""
    from concrete_jungle.experiments.report import signed

    return signed(x, digits).replace("-", "−")


def span(low: float, high: float) -> str:
    return f"[{points(low)}, {points(high)}]"


def test_errata_of_study2_sums_intervals_and_p_are_the_published_files(reports):
    from concrete_jungle.experiments.stages import CONTROL

    r, text = reports["study2"]["result"], errata("study2.md")
    p2, s2 = contrast(r, "P2"), contrast(r, "S2")
    table = r["table"]
    both = table["D_hc + InfoNCE"]["M.Avg"][0] - table[CONTROL.label]["M.Avg"][0]
    assert p2["estimate"] + s2["estimate"] == pytest.approx(both)  # the sum is the unregistered contrast
    assert f"{p2['estimate']:+.3f} − {-s2['estimate']:.3f} = **{points(both, 3)}**" in text  # not +0.06
    assert f"{table['D_hc + InfoNCE']['M.Avg'][0]:.3f} − {table[CONTROL.label]['M.Avg'][0]:.3f}" in text
    margins = [contrast(r, n) for n in ("P3", "S3", "S4", "S5", "P3-targeted")]
    assert all(-0.7 <= h["ci95"][0] and h["ci95"][1] <= 0.8 for h in margins)
    add = contrast(r, "P3-add")
    assert add["ci95"][0] < -0.7 and f"**{span(*add['ci95'])}**" in text
    # the bootstrap p adds one to both counts: P2 has no resample at or below 0 of its 2,000
    assert p2["p"] == pytest.approx(2 / 2001) and p2["p_holm"] == pytest.approx(3 * 2 / 2001)
    assert f"p is **{p2['p']:.4f}** = 2 / 2,001" in text and f"Holm p {p2['p_holm']:.4f}" in text
    # the report says what its files do not record
    assert "The code each start ran is not recorded in these files" in " ".join(reports["study2"]["report"].split())


def test_errata_of_study2_what_the_results_do_not_show_is_the_published_files(reports):
    """No positive control, Cement outside its dilution regime, the ceiling of replace_att: from the files."""
    from concrete_jungle.experiments.stages import BASELINE, CONTROL

    study, text = reports["study2"], errata("study2.md")
    items, table, design = study["items"], study["result"]["table"], study["design"]
    against_baseline = [interval(items, {row: 1, BASELINE: -1}, "M.Avg") for row in table if row != BASELINE]
    assert all(low < 0 < high for _, low, high in against_baseline)  # no row resolvably off the baseline
    lowest, highest = min(d for d, _, _ in against_baseline), max(d for d, _, _ in against_baseline)
    assert f"differences **{points(lowest)} to {points(highest)}**" in text
    obj = interval(items, {"D_hc + Cement": 1, CONTROL.label: -1}, "replace_obj")
    assert obj[1] < 0 < obj[2] and f"**{points(obj[0])} {span(*obj[1:])}**" in text
    for row in ("D_hc + Cement", CONTROL.label):
        gain = interval(items, {row: 1, BASELINE: -1}, "replace_obj")
        assert f"{points(gain[0])} {span(*gain[1:])}" in text
    assert all(low < 50 < high for row in table
               for _, low, high in [interval(items, {row: 1}, "replace_rel")])  # at chance, every row
    curve = design["baseline_choice"]["curve"]
    assert f"**{100 * curve['1400']['M.Avg']:.2f}** at step 1,400 and {100 * curve['2000']['M.Avg']:.2f} at 2,000" \
           in text and f"from {100 * curve['1400']['R@1']:.1f} to {100 * curve['2000']['R@1']:.1f}" in text
    share = design["batch_size_choice"]["curves"]["none"]
    threshold = design["config"]["share_threshold"]
    assert share["256"] > threshold and not design["batch_size_choice"]["rule_met"]
    assert f"**{share['256']:.3f}** at N = 256" in text and f"**{threshold}**" in text
    assert f"{reports['study1']['design']['batch_size_choice']['curves']['none']['256']:.3f} at 256" in text
    att = [v["replace_att"][0] for v in table.values()]
    assert f"**{min(att):.1f}–{max(att):.1f} %** for every row" in text
    p1 = contrast(study["result"], "P1")
    assert f"7 × {p1['resolvable']:.3f} = **{7 * p1['resolvable']:.2f}**" in text


def seed_level(items: dict, weights: dict, metric: str, seeds=(0, 1, 2)) -> tuple[float, float]:
    """The t interval of a contrast's per-seed paired differences (95 %, len(seeds) - 1 degrees of freedom)."""
    import statistics

    from concrete_jungle.experiments.study2 import with_targeted
    from concrete_jungle.outcomes import metric_values

    assert len(seeds) == 3
    t = 0.95 / (2 * 0.975 * 0.025) ** 0.5  # the t quantile of 0.975 with 2 degrees of freedom, 4.303
    diffs = [100 * sum(w * metric_values(with_targeted(items[(label, s)]["outcomes"]), names=[metric])[metric]
                       for label, w in weights.items()) for s in seeds]
    half = t * statistics.stdev(diffs) / len(diffs) ** 0.5
    return statistics.fmean(diffs) - half, statistics.fmean(diffs) + half


def test_errata_seed_level_intervals_keep_study2_s_p2_s1_s2_and_not_study1_s_h1_h7(reports):
    from concrete_jungle.experiments import study, study2

    items2, text2 = reports["study2"]["items"], errata("study2.md")
    contrasts2 = {name: (metric, weights) for name, _, metric, weights in study2.PRIMARY + study2.SECONDARY}
    for name in ("P2", "S1", "S2", "P2-add"):
        low, high = seed_level(items2, contrasts2[name][1], contrasts2[name][0])
        assert low > 0 or high < 0, name
        if name != "P2-add":
            assert span(low, high) in text2, name
    targeted = seed_level(items2, contrasts2["P2-targeted"][1], "REPLACE+SWAP")
    assert targeted[0] < 0 < targeted[1] and span(*targeted) in text2
    items1, text1 = reports["study1"]["items"], errata("study1.md")
    hypotheses = {name: weights for name, _, weights in study.HYPOTHESES}
    for name in ("H1", "H7", "H6"):
        low, high = seed_level(items1, hypotheses[name], "M.Avg")
        assert (low > 0) == (name == "H6") and high > 0, name  # H1, H7 straddle 0; H6 is above it
        assert span(low, high) in text1, name


def test_errata_of_study1_the_rerun_s_numbers_are_its_published_files(reports):
    from concrete_jungle.experiments import study
    from concrete_jungle.experiments.stages import BASELINE, CONTROL

    text, table, items = errata("study1.md"), reports["study1"]["result"]["table"], reports["study1"]["items"]
    method = table["D_hc + Cement"]["M.Avg"][0] - table[CONTROL.label]["M.Avg"][0]
    assert f"**{points(method)}**" in text and round(method, 1) != -2.1  # as written: 64.7 − 66.8 = −2.1
    rel = {row: interval(items, {row: 1}, "replace_rel") for row in table}
    assert all(d < 50 and low < 50 < high for d, low, high in rel.values())  # below 50, none resolvably
    base = rel[BASELINE]
    assert f"{base[0]:.1f} [{base[1]:.1f}, {base[2]:.1f}]" in text
    # the original's baseline (answers not kept: its count, as Study 2's page rebuilt it, and its table's 46.7)
    right, total = 613, 1314
    assert "(613 of 1,314, as published)" in " ".join((DOCS / "studies" / "study2.md").read_text().split())
    share = right / total
    original = next(r for r in results_rows("studies/study1.md", "## Study results") if r.startswith("| CLIP"))
    assert f"{100 * share:.1f}" == original.split(" | ")[5]  # replace_rel
    half = 1.96 * (share * (1 - share) / total) ** 0.5
    assert f"{100 * (share - half):.2f}–{100 * (share + half):.2f}" in text and share + half < 0.5
    # H4 (and H2) sit at the 5 % edge: another seed of the same bootstrap turns them "not resolved"
    verdicts = {seed: {h["name"]: h for h in study.contrasts(items, (0, 1, 2), 2000, seed=seed)} for seed in (1, 3)}
    verdicts[0] = {h["name"]: h for h in reports["study1"]["result"]["hypotheses"]}  # the report's: seed 0
    assert verdicts[0]["H4"]["verdict"] == "contradicted" and verdicts[1]["H4"]["verdict"] == "not resolved"
    assert verdicts[0]["H2"]["verdict"] == "contradicted" and verdicts[3]["H2"]["verdict"] == "not resolved"
    assert 'H2 turns "not resolved" with seed 3' in text
    assert f"seed 1: **{span(*verdicts[1]['H4']['ci95'])}**" in text
    # the report says what its files do not record
    assert "The code each start ran is not recorded in these files" in " ".join(reports["study1"]["report"].split())


@pytest.mark.slow  # 20,000 resamples of seven contrasts, six times: several minutes
def test_errata_study1_s_h4_flips_with_another_bootstrap_seed_at_20000_resamples():
    from concrete_jungle.experiments import study
    from concrete_jungle.experiments.published import load

    items, text = load(DOCS / "studies" / "study1")[2], errata("study1.md")
    h4 = {seed: next(h for h in study.contrasts(items, (0, 1, 2), 20000, seed=seed) if h["name"] == "H4")
          for seed in range(6)}
    kept = [h4[seed] for seed in range(5)]
    assert all(h["verdict"] == "contradicted" for h in kept) and h4[5]["verdict"] == "not resolved"
    above = sorted(-h["ci95"][1] for h in kept)
    p = sorted(h["p"] for h in kept)
    assert f"below 0 by {above[0]:.3f} to {above[-1]:.3f} points (p {p[0]:.3f}–{p[-1]:.3f})" in text
    assert f"seed 5: {span(*h4[5]['ci95'])}" in text


def test_errata_of_study1_correction_7_s_p_values_are_its_table_s(reports):
    """The original Study 1's per-item answers were not kept: its p-values come from its table's intervals by the
    normal approximation, as correction 7 computed them."""
    from statistics import NormalDist

    rows = {row.split(" | ")[0].strip("| ").split()[0]: row.split(" | ") for row in
            results_rows("studies/study1.md", "## Study results") if row.startswith("| H")}
    text = errata("study1.md")
    p = {}
    for name in ("H1", "H6", "H7"):
        estimate, (low, high) = float(rows[name][2]), map(float, rows[name][3].strip("[]").split(", "))
        se = (high - low) / (2 * 1.96)
        p[name] = 2 * (1 - NormalDist().cdf(abs(estimate) / se))
    assert f"H7 p ≈ {p['H7']:.4f}" in text and f"H1 p ≈ {p['H1']:.4f}" in text
    assert f"H6 p ≈ {p['H6']:.3f}, × 5 = {5 * p['H6']:.2f}" in text and 5 * p["H6"] > 0.05


def test_the_readme_and_toyworld_paragraphs_on_the_studies_state_what_study2_s_files_give(reports):
    """README's and docs/toyworld.md's answer to "Does the method work on the toy world?": each number from
    `study report docs/studies/study2` and the published design (97 % and 31 / 24 / 31: the errata, checked by
    the slow test of tests/test_study2.py)."""
    from concrete_jungle.experiments.stages import CONTROL

    study = reports["study2"]
    r, design, table = study["result"], study["design"], study["result"]["table"]
    p1, p2, s2, p3 = (contrast(r, n) for n in ("P1", "P2", "S2", "P3"))
    att = [v["replace_att"][0] for v in table.values()]
    for page in ("README.md", "docs/toyworld.md"):
        text = (DOCS.parent / page).read_text()
        start = text.index("**Does the method work on the toy world?**")
        paragraph = " ".join(text[start:text.index("\n## ", start)].split())  # to the next section
        assert "Not shown either way" in paragraph and "COCO" in paragraph
        assert (f"({points(p1['estimate'])} points of M.Avg, 95 % interval {points(p1['ci95'][0])} to "
                f"{points(p1['ci95'][1])}") in paragraph
        share = design["batch_size_choice"]["curves"]["none"]["256"]
        assert f"{share:.3f} of the gradient" in paragraph and f"{min(att):.0f}–{max(att):.0f} %" in paragraph
    text = " ".join((DOCS / "toyworld.md").read_text().split())
    obj = interval(study["items"], {"D_hc + Cement": 1, CONTROL.label: -1}, "replace_obj")
    assert f"{points(obj[0])} {span(*obj[1:])}" in text and f"resolves about {p1['resolvable']:.2f} points" in text
    assert f"{points(p3['estimate'])} on D_wo" in text
    assert f"by {p2['estimate']:.2f} points (P2" in text and f"cost {-s2['estimate']:.2f} point (S2)" in text
    assert f"({points(p2['estimate'] + s2['estimate'], 3)})" in text


def test_answers_read_back_keep_a_series_that_had_no_items(tmp_path):
    """A series without items (a world whose swap negatives all keep their words has no bag-of-words-differing part)
    has no line in the answers file; read back, it is there and empty, and its metric has no value."""
    from concrete_jungle.experiments.published import read_answers, write_gzip_lines
    from concrete_jungle.outcomes import metric_values

    recipes = {"swap_att": {"mean": "swap_att"}, "swap_att/bow_differs": {"mean": "swap_att/bow_differs"},
               "all": {"micro": ["swap_att", "swap_att/bow_differs"]}}
    path = tmp_path / "answers.jsonl.gz"
    write_gzip_lines(path, [["row", 0, "swap_att", "k1", "scene-1", 1.0], ["row", 0, "swap_att", "k2", "scene-2", 0.0]])
    outcomes = read_answers(path, recipes)[("row", 0)]["outcomes"]
    assert outcomes["series"]["swap_att/bow_differs"] == {"keys": [], "units": [], "values": []}
    assert metric_values(outcomes) == {"swap_att": 0.5, "swap_att/bow_differs": None, "all": 0.5}


# ------------------------------------------------------------------------------------------- the gate's errata
# Every number of docs/studies/gate.md's "Errata (2026-12-03)", recomputed from docs/studies/gate/ (and, marked
# slow, from the world's scenes re-derived from its seed and from the repository's history), and found in the section.


@pytest.fixture(scope="module")
def gate_report(tmp_path_factory) -> dict:
    """`study report docs/studies/gate`'s results.json, and the published files as `published.load` reads them."""
    import json

    from concrete_jungle.experiments.published import load, read_curves, run_record

    folder = tmp_path_factory.mktemp("gate")
    assert main(["study", "report", str(DOCS / "studies" / "gate"), "--out", str(folder)]) == 0
    design, world, items, _ = load(DOCS / "studies" / "gate")
    return {"result": json.loads((folder / "results.json").read_text()), "design": design, "world": world,
            "items": items, "run": run_record(DOCS / "studies" / "gate"),
            "curves": read_curves(DOCS / "studies" / "gate" / "curves.jsonl.gz", items)}


def test_gate_errata_the_subset_differences_the_mean_without_add_att_and_the_rise_are_the_published_files(
        gate_report):
    from concrete_jungle.experiments import gate

    text, rungs = errata("gate.md", "2026-12-03"), {r["rung"]: r for r in gate_report["result"]["rungs"]}
    subsets = {name: r["subsets"] for name, r in rungs.items()}
    # item 7: 14 uncorrected intervals; the four cited are those above 0, R1's larger swap estimates are not
    intervals = [(rung, k, v) for rung, kinds in subsets.items() for k, v in kinds.items()]
    assert len(intervals) == 14 and f"**{len(intervals)}** uncorrected" in text
    above = sorted((rung, k) for rung, k, v in intervals if v["t95"][0] > 0)
    assert above == [("R1", "replace_att"), ("R1", "replace_obj"), ("R2", "swap_att"), ("R2", "swap_obj")]
    for kind in ("swap_att", "swap_obj"):
        swap = subsets["R1"][kind]
        assert swap["t95"][0] < 0 < swap["mean"] and swap["mean"] > subsets["R1"]["replace_obj"]["mean"]
        assert f"**{points(swap['mean'])} {span(*swap['t95'])}** ({kind})" in text
    t = gate.t_quantile(1 - 0.05 / (2 * len(intervals)), 2)
    assert f"= **{t:.2f}** instead of {gate.t_quantile(0.975, 2):.2f}" in text
    corrected = sorted((rung, k) for rung, k, v in intervals
                       if abs(v["mean"]) > t * v["sd"] / 3 ** 0.5)  # the interval excludes 0
    assert corrected == [("R1", "add_att"), ("R2", "add_att")] and all(subsets[r]["add_att"]["mean"] < 0
                                                                         for r, _ in corrected)
    # item 8: M.Avg's difference with add_att's taken as 0, and over the five kinds with true negatives
    for name, kinds in subsets.items():
        assert sum(v["mean"] for v in kinds.values()) / 7 == pytest.approx(rungs[name]["mean"])
    without = [sum(v["mean"] for k, v in subsets[r].items() if k != "add_att") / 7 for r in ("R1", "R2")]
    assert f"**{points(without[0])}** at R1 and **{points(without[1])}** at R2" in text
    assert all(w < gate_report["design"]["margin"]["mean_at_least"] for w in without)
    five = [sum(v["mean"] for k, v in subsets[r].items() if k not in ("add_att", "add_obj")) / 5 for r in ("R1", "R2")]
    assert f"{points(five[0])} and {points(five[1])}" in text
    # item 9: the positive arm picks add_att's longer, colour-naming negative more often than the control
    table = gate_report["result"]["table"]
    wrong = {(r, arm): 100 - table[f"{r}: {arm}"]["add_att"][0] for r in ("R1", "R2") for arm in ("positive control",
                                                                                                   "control")}
    assert all(wrong[(r, "positive control")] > wrong[(r, "control")] for r in ("R1", "R2"))
    assert (f"**{wrong[('R1', 'positive control')]:.1f} %** of the items at R1 (the control "
            f"{wrong[('R1', 'control')]:.1f} %) and **{wrong[('R2', 'positive control')]:.1f} %** at R2 "
            f"({wrong[('R2', 'control')]:.1f} %)") in text
    # item 10: the rise over each rung's baseline, both arms
    rises = {(name, arm): r[arm] - r["baseline"] for name, r in rungs.items() for arm in ("control", "positive")}
    assert f"**{min(rises.values()):.1f}–{max(rises.values()):.1f}** points" in text
    assert (f"R1: control {points(rises[('R1', 'control')])}, positive control {points(rises[('R1', 'positive')])}; "
            f"R2: {points(rises[('R2', 'control')])}, {points(rises[('R2', 'positive')])}") in text


def test_gate_errata_the_hard_negative_share_the_false_negatives_counts_and_the_starts_are_the_published_files(
        gate_report):
    import statistics

    from concrete_jungle.records import file_digest

    text, curves = errata("gate.md", "2026-12-03"), gate_report["curves"]
    # item 4: the share InfoNCE gave the hard negative at N = 64, at every step of each positive-control fine-tune
    shares = {key: [r["hn_grad_share"] for r in log] for key, log in curves.items() if "positive" in key[0]}
    assert len(shares) == 6 and all(len(v) == 200 and None not in v for v in shares.values())
    means = [statistics.fmean(v) for v in shares.values()]
    first = [v[0] for v in shares.values()]
    assert max(means) < 0.485 and f"**{min(means):.3f}–{max(means):.3f}**" in text
    assert f"({min(first):.2f}–{max(first):.2f} at the first step)" in text
    # item 5: the records of the two kinds whose negative pictures the anchor's caption describes
    kept = gate_report["world"]["positive_control"]["per_edit"]
    entailed = kept["add_att"] + kept["add_obj"]
    total = sum(kept.values())
    assert total == gate_report["world"]["positive_control"]["ok"]
    assert f"**{kept['add_att']:,}** add_att and **{kept['add_obj']:,}** add_obj" in text
    assert f"other five kinds' {total - entailed:,} records" in text
    assert f"**{entailed:,} of the {total:,}** negative pictures (**{100 * entailed / total:.1f} %**" in text
    for page in ("README.md", "docs/toyworld.md"):
        assert f"{entailed:,} of {'its ' if page == 'README.md' else ''}{total:,}" in " ".join(
            (DOCS.parent / page).read_text().split()), page
    assert f"{100 * entailed / total:.1f} % of its negative pictures" in " ".join((DOCS / "toyworld.md").read_text()
                                                                                    .split())
    # items 1 and 3: each start's times and code, as run.json records them
    first_start, second = gate_report["run"]["starts"]
    assert f"(**{first_start['started'][11:19]} UTC**, `run.json`)" in text
    assert f"**{first_start['last_stage'][11:19]} UTC**" in text and f"(**{second['started'][11:19]} UTC**)" in text
    code, at_last = first_start["code"], first_start["code_at_last_stage"]
    assert code["dirty"] and at_last["dirty"] and not second["code_at_last_stage"]["dirty"]
    assert f"commit {code['commit'][:12]} with {code['changed_count']} changed files" in text
    assert (f"commit {at_last['commit'][:7]} with {at_last['changed_count']} changed files, changes sha256 "
            f"`{at_last['changes_sha256'][:12]}…`") in text
    assert f"`{code['changes_sha256'][:12]}…`" in text
    assert f"sha256 `{second['code']['changes_sha256'][:12]}…`" in text
    assert second["code"]["changed"] == ["src/concrete_jungle/experiments/published.py"]
    design = file_digest(DOCS / "studies" / "gate" / "design.json")
    assert f"sha256 `{design[:12]}…`" in text


@pytest.mark.slow  # the 4,000 training scenes' 23,600 pairs re-derived and read by the viewer: about 10 seconds
def test_gate_errata_every_add_att_and_add_obj_negative_picture_is_described_by_its_anchor_caption_and_no_other():
    """Item 5: the gate's world re-derived from its settings (no picture rendered) gives the positive control's
    pairs exactly as published (kept and dropped, per edit kind), and the anchor's caption reads true of the
    negative picture of every add_att and add_obj record and of no other record."""
    import json

    from concrete_jungle.experiments import gate
    from concrete_jungle.toyworld.build import WorldConfig, sample_world
    from concrete_jungle.toyworld.viewer import reads_true

    design = json.loads((DOCS / "studies" / "gate" / "design.json").read_text())
    published = json.loads((DOCS / "studies" / "gate" / "world.json").read_text())["positive_control"]
    rows = [row for _, row in sample_world(WorldConfig(**design["world"]))]
    kept, dropped, described = {}, {}, {}
    for record, reason in gate.positive_control_pairs(rows, design["positive_control"]["seed"], mirror_relations=True):
        if reason:
            dropped.setdefault(reason, {}).setdefault(record["edit"], 0)
            dropped[reason][record["edit"]] += 1
            continue
        kept[record["edit"]] = kept.get(record["edit"], 0) + 1
        described[record["edit"]] = described.get(record["edit"], 0) + reads_true(record["caption"],
                                                                                   record["changed"])
    assert kept == published["per_edit"] and dropped == published["dropped"]
    assert {k: described[k] == kept[k] for k in kept} == {k: k in ("add_att", "add_obj") for k in kept}
    assert all(described[k] == 0 for k in kept if k not in ("add_att", "add_obj"))


@pytest.mark.slow  # two checkouts of the repository's history and `git log`: seconds, and it needs the history
def test_gate_errata_commit_times_and_each_start_s_code_are_the_repository_s(tmp_path):
    """Items 1 and 3: the commit times of the gate's files, and the first start's code at its last stage (and the
    second start's) rebuilt from the commits: the changes sha256 `stages.code_version` gives a checkout of the
    start's commit holding the later commit's package is the one run.json records."""
    import json
    import shutil
    import subprocess
    import tarfile

    from concrete_jungle.experiments.stages import code_version

    repo = DOCS.parent
    text = errata("gate.md", "2026-12-03")

    def git(*args: str, cwd=repo) -> str:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout

    if subprocess.run(["git", "cat-file", "-e", "e993130^{commit}"], cwd=repo, capture_output=True).returncode:
        pytest.skip("the repository's history (commit e993130) is not in this checkout: clone it whole")
    added = {}
    for line in git("log", "--diff-filter=A", "--format=%H %ci", "--", "src/concrete_jungle/experiments/gate.py",
                    "docs/studies/gate.md", "docs/studies/gate/design.json").splitlines():
        commit, day, time, _ = line.split()
        added[commit[:7]] = f"{day} {time}"
    assert added == {"e993130": "2026-12-02 13:22:26", "8f87189": "2026-12-02 12:47:21"}
    assert f"8f87189 at **{added['8f87189']} UTC**" in text and f"e993130, **{added['e993130']} UTC**" in text
    starts = json.loads((DOCS / "studies" / "gate" / "run.json").read_text())["starts"]
    # the first start's code at its last stage against e993130's package; the second start's against 7ab831f's
    for recorded, later in ((starts[0]["code_at_last_stage"], "e993130"), (starts[1]["code"], "7ab831f")):
        tree = tmp_path / later
        tree.mkdir()
        for commit, paths in ((recorded["commit"], ()), (later, ("src/concrete_jungle",))):
            archive = tmp_path / f"{commit}.tar"
            archive.write_bytes(subprocess.run(["git", "archive", commit, *paths], cwd=repo, capture_output=True,
                                               check=True).stdout)
            if paths:  # the later commit's package in place of the start's
                git("init", "-q", cwd=tree)
                git("add", "-A", cwd=tree)
                git("-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "start", cwd=tree)
                shutil.rmtree(tree / "src" / "concrete_jungle")
            with tarfile.open(archive) as f:
                f.extractall(tree, filter="data")
        code = code_version(tree / "src" / "concrete_jungle")
        assert (code["changed_count"], code["changes_sha256"]) == (recorded["changed_count"],
                                                                   recorded["changes_sha256"]), later


def test_gate2_s_result_prose_is_its_published_files():
    """Every number of docs/studies/gate2.md's "What the numbers say", recomputed by `study report` from
    docs/studies/gate2/."""
    from concrete_jungle.experiments import gate2
    from concrete_jungle.experiments.published import load

    design, world, items, seconds = load(DOCS / "studies" / "gate2")
    result = gate2.summarise(design, items, seconds)
    text = " ".join((DOCS / "studies" / "gate2.md").read_text().split())
    a, b = result["controls"]
    assert result["gated"] and a["passes"] and not b["passes"]
    low, high = min(a["per_seed"]), max(a["per_seed"])
    assert f"{low:+.2f} to {high:+.2f} points of SWAP, mean {a['mean']:+.2f}" in text
    assert f"the seed-level interval {a['t_interval'][0]:+.2f} to {a['t_interval'][1]:+.2f}" in text
    assert f"bootstrap {a['bootstrap']['ci95'][0]:+.2f} to {a['bootstrap']['ci95'][1]:+.2f}" in text
    kept = world["controls"]["A"]
    assert f"0 of {kept['ok']:,}" in text and sum(kept["anchor_true_of_negative"].values()) == 0
    assert f"{b['mean']:+.2f} points [{b['t_interval'][0]:+.2f}, {b['t_interval'][1]:+.2f}]" in text
    assert b["mean"] < design["margin"]["mean_at_least"] and b["t_interval"][0] > 0
    add_att = b["subsets"]["add_att"]
    assert not add_att["matched"] and add_att["blind"] == {"positive": 100.0, "control": 100.0}
    assert f"the baseline's is {result['baseline_blind']['add_att']:.1f} %" in text
    assert f"{-add_att['mean']:.2f} points below its control" in text
    rel = [row["replace_rel"][0] for row in result["table"].values()]
    assert f"({min(rel):.1f}–{max(rel):.1f} %)" in text
    r = {label: row["text_retrieval_recall@1"][0] for label, row in result["table"].items()}
    assert (f"({r['B: positive control']:.1f} and {r['B: control']:.1f} % against {r['CLIP baseline']:.1f} %)"
            in text and f"A's arms less so ({r['A: positive control']:.1f} and {r['A: control']:.1f} %)" in text)
    assert f"took {seconds / 60:.0f} minutes of wall time" in text
    assert f"{world['projection']['seconds'] / 60:.1f} minutes (budget" in text


def test_study3_s_result_prose_is_its_published_files():
    """Every number of docs/studies/study3.md's "What the numbers say", recomputed by `study report`'s summary from
    docs/studies/study3/."""
    from concrete_jungle.experiments import study3_result
    from concrete_jungle.experiments.published import load

    design, world, items, seconds = load(DOCS / "studies" / "study3")
    result = study3_result.summarise(design, items, seconds, world)
    text = " ".join((DOCS / "studies" / "study3.md").read_text().replace("−", "-").split())
    h1, h2, h3, h4 = result["primary"]
    assert [h["verdict"] for h in result["primary"]] == ["not resolved"] * 4
    assert h1["matched"] == ["replace_att", "replace_obj"] and min(h1["per_seed"]) > 0
    assert (f"{h1['estimate']:+.2f} points, above 0 in every seed ({min(h1['per_seed']):+.2f} to "
            f"{max(h1['per_seed']):+.2f}), the bootstrap interval {h1['ci95'][0]:+.2f} to {h1['ci95'][1]:+.2f} and "
            f"p {h1['p']:.4f}") in text
    assert h1["p_holm"] == min(1.0, 4 * h1["p"]) and f"by 4, to {h1['p_holm']:.4f}" in text
    assert (f"replace_obj ({h1['per_subset']['replace_obj']:+.2f}; replace_att "
            f"{h1['per_subset']['replace_att']:+.2f})") in text
    assert f"is {h1['t_interval'][0]:+.2f} to {h1['t_interval'][1]:+.2f}" in text
    resolvable = h1["resolvable"]
    assert f"{resolvable['bootstrap']:.2f} points against the seed level's {resolvable['seed_level']:.2f}" in text
    for h in (h2, h3):
        assert f"{h['estimate']:+.2f} [{h['ci95'][0]:+.2f}, {h['ci95'][1]:+.2f}]" in text
    assert f"{h4['estimate']:+.2f} [{h4['ci95'][0]:+.2f}, {h4['ci95'][1]:+.2f}], not resolved" in text
    s = h4["per_subset"]
    assert (f"replace_light {s['replace_light']:+.2f}, replace_att {s['replace_att']:+.2f}; replace_obj "
            f"{s['replace_obj']:+.2f}, replace_mood {s['replace_mood']:+.2f}") in text
    secondary = {h["name"]: h for h in result["secondary"]}
    same = [secondary[f"S-D_{m} + negclip vs D_{m} + infonce"] for m in ("hc", "lc", "wo")]
    assert max(abs(h["estimate"]) for h in same) <= 0.01 and max(abs(x) for h in same for x in h["per_seed"]) <= 0.04
    for mode, words in (("lc", "on D_lc's matched outcome, "), ("wo", "and on D_wo's, ")):
        h = secondary[f"S-D_{mode} + cement vs D_{mode} + infonce"]
        assert f"{words}{h['estimate']:+.2f} [{h['ci95'][0]:+.2f}, {h['ci95'][1]:+.2f}]" in text
        assert max(h["per_seed"]) < 0 and h["ci95"][1] < 0
        light = {loss: result["subsets"][f"D_{mode} + {loss}"]["replace_light"]["accuracy"]
                 for loss in ("infonce", "cement")}
        assert f"{light['infonce']:.1f} %" in text and f"{light['cement']:.1f} %" in text
        differences = {sub: result["subsets"][f"D_{mode} + cement"][sub]["accuracy"]
                       - result["subsets"][f"D_{mode} + infonce"][sub]["accuracy"] for sub in h["matched"]}
        assert differences["replace_light"] / len(differences) < h["estimate"] / 2  # most of it is replace_light
    assert f"the control {result['subsets']['control']['replace_light']['accuracy']:.1f} %" in text
    assert (f"D_hc + InfoNCE is {h1['R@1']['estimate']:.2f} points above the control and Cement "
            f"{-h2['R@1']['estimate']:.2f} below InfoNCE") in text
    assert max(abs(h["M.Avg"]["estimate"]) for h in result["primary"]) < 1
    m = h1["M.Avg"]
    assert f"(H1 {m['estimate']:+.2f} [{m['ci95'][0]:+.2f}, {m['ci95'][1]:+.2f}])" in text
    shares = world["n_star"]["curves"]["infonce"]
    assert min(shares.values()) > design["batch_size"]["share_threshold"]
    assert f"({shares['128']:.3f} at 128 down to {shares['1024']:.3f} at 1,024)" in text
    entailed = {m: (d["entailed"]["true"], d["records"]) for m, d in world["datasets"].items()}
    assert (f"{entailed['hc'][0]} of D_hc's {entailed['hc'][1]:,}, none of D_lc's {entailed['lc'][1]:,}, "
            f"{entailed['wo'][0]} of D_wo's {entailed['wo'][1]:,}") in text and entailed["lc"][0] == 0
    assert f"was {world['projection']['seconds'] / 60:.1f} minutes (budget 240)" in text
    assert f"took {seconds / 60:.0f} minutes of wall time" in text
    lc, wo = (secondary[f"S-D_{m} + cement vs D_{m} + infonce"]["estimate"] for m in ("lc", "wo"))
    readme = " ".join((DOCS.parent / "README.md").read_text().replace("−", "-").split())
    assert (f"gained {h1['estimate']:+.2f} points over the control on the subsets their edits make, above 0 in every "
            f"seed but p {h1['p_holm']:.4f} after Holm's correction") in readme
    assert (f"({h2['estimate']:+.2f}, 95 % interval {h2['ci95'][0]:+.2f} to {h2['ci95'][1]:+.2f}) and fell below it "
            f"on D_lc's and D_wo's edits ({lc:+.2f} and {wo:+.2f}, secondary)") in readme
    toyworld = " ".join((DOCS / "toyworld.md").read_text().replace("−", "-").split())
    assert (f"D_hc + InfoNCE against the control {h1['estimate']:+.2f} points [{h1['ci95'][0]:+.2f}, "
            f"{h1['ci95'][1]:+.2f}] (Holm p {h1['p_holm']:.4f}), Cement against InfoNCE on D_hc "
            f"{h2['estimate']:+.2f}, D_hc + Cement against D_lc + Cement {h4['estimate']:+.2f}") in toyworld
    assert f"(D_hc + InfoNCE against the control {h1['estimate']:+.2f} points, Holm p {h1['p_holm']:.4f})" in toyworld
