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
