"""Tables a command prints survive a pipe (printed whole, through cli/tables.py) and are kept in a file beside their
JSON; `eval --compare` says when its files were scored under different versions of a benchmark's rule."""

import json

from concrete_jungle.cli import main


def test_keywords_prints_its_summary_whole_and_writes_it_beside_the_summary_json(data_root, tmp_path, capsys):
    out = tmp_path / "kw.jsonl"
    assert main(["keywords", "--captions", str(data_root / "sugarcrepe"), "--mode", "hc", "--out", str(out),
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((tmp_path / "kw.summary.json").read_text())
    # not a terminal: the table as Markdown, one whole line a statistic (rich drew boxes cut at 80 columns)
    assert f"| count | {summary['count']} |" in printed.splitlines()
    assert "┃" not in printed and "│" not in printed
    assert (tmp_path / "kw.summary.md").read_text().strip() in printed


def test_compare_writes_its_table_beside_its_json_in_out_and_warns_of_another_rule(data_root, tmp_path, capsys):
    files = []
    for seed in (0, 1):
        out = tmp_path / f"seed-{seed}"
        assert main(["eval", "--benchmarks", "sugarcrepe", "--data-root", str(data_root), "--model", "cj-tiny",
                     "--pretrained", "none", "--seed", str(seed), "--no-progress", "--out", str(out)]) == 0
        files.append(out / "sugarcrepe.json")
    capsys.readouterr()
    compared = tmp_path / "compared"
    args = ["eval", "--compare", *map(str, files), "--resamples", "20", "--out", str(compared)]
    assert main(args) == 0
    printed = capsys.readouterr()
    table = (compared / "compare-sugarcrepe.md").read_text()
    assert table.strip() in printed.out and "Warning" not in table and printed.err == ""
    assert json.loads((compared / "compare-sugarcrepe.json").read_text())["rules"] == {
        "seed-0/sugarcrepe.json": 1, "seed-1/sugarcrepe.json": 1}
    # a result scored under an older rule (a result written before results recorded it counts as rule 1)
    result = json.loads(files[1].read_text())
    files[1].write_text(json.dumps(result | {"rule": 2}))
    assert main(args) == 0
    printed = capsys.readouterr()
    warning = ("Warning: scored under different versions of the sugarcrepe rule (seed-0/sugarcrepe.json rule 1, "
               "seed-1/sugarcrepe.json rule 2)")
    assert warning in (compared / "compare-sugarcrepe.md").read_text() and warning in printed.out
    assert "warning: the files were scored under different versions of the sugarcrepe rule" in \
        " ".join(printed.err.split())
