"""`plant` and `import` write the summary table they print as Markdown beside their summary JSON, and a rerun
into the same folder accepts that file as the dataset's own."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from concrete_jungle.cli import main  # noqa: E402
from plant_fixtures import make_dataset, plant_args  # noqa: E402  (the plant tests' captions and images)
from test_import import write_negclip  # noqa: E402  (the import tests' NegCLIP rows)


def table_rows(markdown: str) -> dict[str, str]:
    """statistic -> value of a printed summary table."""
    return {cells[0]: cells[1] for line in markdown.splitlines() if line.startswith("| ")
            for cells in [[c.strip() for c in line.strip("|").split("|")]] if cells[0] != "statistic"}


def test_plant_writes_its_summary_table_beside_summary_json_and_a_rerun_accepts_it(tmp_path, capsys):
    captions, images = make_dataset(tmp_path, 12)
    out = tmp_path / "cb"
    args = plant_args(captions, images, out, "--samples-per-shard", 8, "--batch-size", 4)
    assert main(args) == 0
    printed = capsys.readouterr().out
    table = (out / "summary.md").read_text()
    assert table.startswith("ConcreteBatch\n") and table in printed
    summary = json.loads((out / "summary.json").read_text())
    assert table_rows(table)["ok"] == str(summary["ok"]) and table_rows(table)["samples"] == "12"
    assert main(args) == 0  # the folder holds summary.md now: still a dataset plant made, resumed
    again = table_rows((out / "summary.md").read_text())
    assert again["shards reused"] == str(json.loads((out / "summary.json").read_text())["shards_reused"]) == "2"
    assert again["ok"] == table_rows(table)["ok"]


def test_each_part_of_a_split_plant_and_the_merge_write_their_own_summary_table(tmp_path, capsys):
    captions, images = make_dataset(tmp_path, 12)
    out = tmp_path / "cb"
    for index in (0, 1):
        assert main(plant_args(captions, images, out, "--samples-per-shard", 8, "--num-shards", 2,
                               "--shard-index", index)) == 0
        part = f"summary-{index:05d}-of-00002"
        summary = json.loads((out / f"{part}.json").read_text())
        assert table_rows((out / f"{part}.md").read_text())["part"] == summary["part"]
    assert not (out / "summary.md").exists()
    capsys.readouterr()
    assert main(["plant", "merge", str(out)]) == 0
    table = (out / "summary.md").read_text()
    assert table in capsys.readouterr().out
    assert table_rows(table)["parts"] == "2" and table_rows(table)["samples"] == "12"


def test_import_writes_its_summary_table_beside_summary_json_and_a_rerun_accepts_it(tmp_path, capsys):
    tsv, _ = write_negclip(tmp_path)
    args = ["import", "negclip", str(tsv), "--images", str(tmp_path), "--out", str(tmp_path / "cb"),
            "--samples-per-shard", "4", "--no-progress"]
    assert main(args) == 0
    table = (tmp_path / "cb" / "summary.md").read_text()
    assert table.startswith("ConcreteBatch imported from negclip\n") and table in capsys.readouterr().out
    summary = json.loads((tmp_path / "cb" / "summary.json").read_text())
    assert table_rows(table)["ok"] == str(summary["ok"])
    assert main(args) == 0  # resumed: every shard reused, the table written again
    again = table_rows((tmp_path / "cb" / "summary.md").read_text())
    assert again["shards reused"] == again["shards"] == table_rows(table)["shards"]
    assert again["ok"] == str(summary["ok"])
