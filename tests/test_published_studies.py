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
])
def test_a_study_s_published_files_reproduce_every_number_of_its_results_in_the_docs(study, heading, tables, rows,
                                                                                   tmp_path):
    assert main(["study", "report", str(DOCS / "studies" / study), "--out", str(tmp_path)]) == 0
    report = (tmp_path / "study.md").read_text().splitlines()
    shown = results_rows(f"studies/{study}.md", heading)
    assert len(shown) == tables + rows  # every table of the report is in the docs, headers and all rows
    assert not [row for row in shown if row not in report]


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


def test_the_report_says_whether_its_minutes_are_the_last_start_s_or_every_start_s(tmp_path, capsys):
    """`study report docs/studies/study1` printed "128 minutes" for a study that took about 3 hours over several
    starts: run.json held the last start's seconds, and nothing said so."""
    from concrete_jungle.experiments.published import write_digests

    folder = published_copy(tmp_path)
    assert main(["study", "report", str(folder)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "128 minutes (the wall time of its last start only: these files predate the record of every start's, so " \
           "a study that was stopped and resumed took longer, and the total is not in its files)" in out
    (folder / "run.json").write_text('{"seconds": 10800.0, "starts": "all"}')  # as `publish` writes it now
    write_digests(folder)
    assert main(["study", "report", str(folder)]) == 0
    assert "180 minutes (wall time over all its starts)" in " ".join(capsys.readouterr().out.split())
