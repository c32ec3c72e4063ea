"""The data x loss grid (`concrete-jungle grid`): every cell from the same start, the same steps and data order,
evaluated on the same items; its table, heat-map and JSON; resumed cell by cell; the toy world's grid."""

import json
import sys
from pathlib import Path

import pytest
import yaml

from concrete_jungle.cli import main
from concrete_jungle.configs import ConfigError
from concrete_jungle.experiments.grid import cell_config, load_grid_config, run_grid

sys.path.insert(0, str(Path(__file__).parent))
from test_train import write_k_negative_set  # noqa: E402


def grid_file(tmp_path, datasets, data_root, losses=("infonce", "negclip", "cement"), **more):
    spec = {"out": str(tmp_path / "grid"), "datasets": {k: str(v) for k, v in datasets.items()},
            "losses": {name: {"name": name} for name in losses},
            "eval": {"data_root": str(data_root), "benchmarks": ["sugarcrepe"], "resamples": 200},
            "set": ["model.name=cj-tiny", "model.pretrained=none", "model.precision=fp32", "data.workers=0",
                    "batch_size=4", "steps=2", "optim.lr=0.002", "optim.warmup=1", "save_every=0"]} | more
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_the_grid_trains_each_cell_from_one_start_compares_it_with_intervals_and_resumes(tmp_path, data_root,
                                                                                      capsys):
    data = write_k_negative_set(tmp_path / "k2")
    path = grid_file(tmp_path, {"K2": data, "K2again": data}, data_root)
    assert main(["grid", str(path), "--no-progress"]) == 0
    out = tmp_path / "grid"
    table = json.loads((out / "grid.json").read_text())
    cells = table["benchmarks"]["sugarcrepe"]["cells"]
    assert set(cells) == {f"{d}--{loss}" for d in ("K2", "K2again") for loss in ("infonce", "negclip", "cement")}
    start = {c["start"] for c in cells.values()}
    assert len(start) == 1  # one start, evaluated once, on the same items
    for name, cell in cells.items():
        lo, hi = cell["ci95"]
        assert lo <= cell["gain"] <= hi and cell["gain"] == pytest.approx(100 * (cell["value"] - cell["start"]))
    # the same dataset, recipe, seed and loss: the same data order and the same model, bit for bit
    for loss in ("infonce", "negclip", "cement"):
        assert cells[f"K2--{loss}"] == cells[f"K2again--{loss}"]
    printed = capsys.readouterr().out
    assert "K2again" in printed and (out / "grid.md").read_text().count("| K2") == 2
    assert (out / "grid-sugarcrepe.png").stat().st_size > 10_000
    # a second start reuses every finished cell: nothing is trained or evaluated again
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.safetensors")}
    assert main(["grid", str(path), "--no-progress"]) == 0
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.safetensors")} == stamps
    assert "reused K2--cement" in capsys.readouterr().out


def test_a_grid_file_is_checked_before_anything_runs(tmp_path, data_root):
    data = write_k_negative_set(tmp_path / "k2")
    with pytest.raises(ConfigError, match="loss.name 'negclipp' is not one of"):
        load_grid_config(grid_file(tmp_path, {"K2": data}, data_root, losses=("negclipp",)))
    with pytest.raises(ConfigError, match="which each cell sets itself"):
        load_grid_config(grid_file(tmp_path, {"K2": data}, data_root), ["set=['loss.name=cement']"])
    with pytest.raises(ConfigError, match="give one of eval.data_root"):
        load_grid_config(grid_file(tmp_path, {"K2": data}, data_root, eval={"benchmarks": ["sugarcrepe"]}))
    with pytest.raises(ConfigError, match="unknown key"):
        load_grid_config(grid_file(tmp_path, {"K2": data}, data_root, step=3))
    with pytest.raises(ConfigError, match=r"eval.resamples must be >= 1 \(bootstrap resamples"):
        load_grid_config(grid_file(tmp_path, {"K2": data}, data_root), ["eval.resamples=0"])


def test_the_sample_grid_file_names_valid_cells(monkeypatch):
    repo = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(repo)  # its paths, as the docs run it, are relative to the repository's root
    grid = load_grid_config("configs/grid.yaml")
    cells = {(d, loss): cell_config(grid, d, loss) for d in grid.datasets for loss in grid.losses}
    assert len(cells) == 6 and {c.loss.name for c in cells.values()} == {"infonce", "cement", "negclip"}
    assert cells["D_hc", "cement"].data.concretebatch == ["runs/D_hc"]
    assert cells["D_hc", "cement"].out == str(Path("runs/grid/cells/D_hc--cement/run"))


def test_grid_quick_is_the_toy_world_s_small_grid_and_says_so(tmp_path, capsys):
    assert main(["grid", "configs/grid.yaml", "--quick"]) == 2
    assert "--quick makes the toy world's grid small: give it with --toy OUT" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["grid", "--help"])
    printed = " ".join(capsys.readouterr().out.split())
    assert "with --toy: a small world (160 training scenes, 80 held out), 20 pretraining and 3 fine-tuning steps" \
        in printed and "95 % interval" in printed


@pytest.mark.slow  # ~2 min on 2 cores: renders a toy world, pretrains its baseline, plants and imports
def test_the_toy_world_grid_runs_end_to_end(tmp_path):
    from concrete_jungle.cli.grid import QUICK_TOY
    from concrete_jungle.experiments.grid import toy_grid

    grid = toy_grid(tmp_path / "toy", **QUICK_TOY, progress=False)  # grid --toy --quick
    assert set(grid.datasets) == {"D_hc", "swaps"}
    table = run_grid(grid, progress=False)
    cells = table["benchmarks"]["sugarcrepe"]["cells"]
    assert len(cells) == 6 and all(c["ci95"] is not None for c in cells.values())


def test_cells_whose_labels_join_alike_get_a_folder_each():
    """Cells a x -b and a- x b shared the folder cells/a---b: one cell's numbers were shown for the other."""
    from concrete_jungle.experiments.grid import cell_name

    labels = ["a", "a-", "-b", "b", "a--b", "b--c", "c", "a-b", "-", "--"]
    names = [cell_name(d, loss) for d in labels for loss in labels]
    assert len(set(names)) == len(names)
    assert cell_name("K2", "cement") == "K2--cement" and cell_name("a-b", "c_d") == "a-b--c_d"  # as before
    assert cell_name("a", "-b").startswith("a---b--") and cell_name("a", "-b") != cell_name("a-", "b")


def test_a_grid_run_again_refuses_cells_of_another_recipe_and_evaluates_again_on_other_benchmark_files(
        tmp_path, data_root, capsys):
    """A grid re-run reused finished cells after the recipe, seed or benchmark files changed ("reused" only)."""
    import shutil

    data = write_k_negative_set(tmp_path / "k2")
    root = tmp_path / "bench"
    shutil.copytree(data_root, root)
    path = grid_file(tmp_path, {"K2": data}, root, losses=("infonce",))
    assert main(["grid", str(path), "--no-progress"]) == 0
    out = tmp_path / "grid"
    cell = out / "cells" / "K2--infonce"
    assert json.loads((cell / "identity.json").read_text())["train"]["seed"] == 0
    spec = yaml.safe_load(path.read_text())
    capsys.readouterr()
    path.write_text(yaml.safe_dump(spec | {"set": [*spec["set"], "seed=1"]}))
    assert main(["grid", str(path), "--no-progress"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"the grid's cell K2 x infonce was made from other settings or inputs (train.seed 0 -> 1; recorded in " \
           f"{cell / 'identity.json'})" in err and "run the grid into another out" in err
    path.write_text(yaml.safe_dump(spec))
    before = json.loads((cell / "eval" / "sugarcrepe.json").read_text())
    subset = root / "sugarcrepe" / "add_att.json"  # the same keys and images, captions and negatives swapped
    items = json.loads(subset.read_text())
    subset.write_text(json.dumps({k: v | {"caption": v["negative_caption"], "negative_caption": v["caption"]}
                                  for k, v in items.items()}))
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.safetensors")}
    assert main(["grid", str(path), "--no-progress"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "reused K2--infonce" in printed and "sugarcrepe evaluated again" in printed
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.safetensors")} == stamps  # nothing trained again
    after = json.loads((cell / "eval" / "sugarcrepe.json").read_text())
    assert after["benchmark_files_sha256"] != before["benchmark_files_sha256"]
    assert json.loads((out / "start" / "eval" / "sugarcrepe.json").read_text())["benchmark_files_sha256"] == \
        after["benchmark_files_sha256"]
    (out / "grid.md").write_text("my notes\n")  # a file of the grid's name it did not write
    assert main(["grid", str(path), "--no-progress"]) == 2
    assert f"{out / 'grid.md'} was edited after `concrete-jungle grid`" in " ".join(capsys.readouterr().err.split())
    assert (out / "grid.md").read_text() == "my notes\n"
