"""Checkpoints as commands take them (checkpoints.py): a run's folder, its checkpoints folder and
checkpoints/latest for every command that takes one, and a path that names none."""

import json

from concrete_jungle.cli import main


def test_every_command_that_takes_a_checkpoint_accepts_latest_and_the_run_folder(run, planted, data_root, tmp_path,
                                                                                   capsys):
    latest = json.loads((run / "checkpoints" / "latest.json").read_text())["name"]
    for i, name in enumerate([run / "checkpoints" / "latest", run, run / "checkpoints"]):
        out = tmp_path / f"eval{i}"
        assert main(["eval", "--data-root", str(data_root), "--checkpoint", str(name), "--out", str(out),
                     "--no-progress"]) == 0
        result = json.loads((out / "sugarcrepe.json").read_text())
        assert result["model"]["path"] == str(run / "checkpoints" / latest)  # the file that was evaluated
        assert str(run / "checkpoints" / latest) in (out / "results.md").read_text()
    assert main(["analyze", "gradient-share", "--data", str(planted), "--checkpoint", str(run / "checkpoints"
                 / "latest"), "--batch-sizes", "4", "--batches", "1", "--out", str(tmp_path / "gs")]) == 0
    capsys.readouterr()
    assert main(["eval", "--data-root", str(data_root), "--checkpoint", str(tmp_path / "nope"),
                 "--out", str(tmp_path / "x")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "nope does not exist" in err and "checkpoints/latest" in err
    assert main(["train", "--data", str(planted), "--out", str(tmp_path / "ft"), "--checkpoint",
                 str(run / "checkpoints" / "latest"), "--steps", "1", "--set", "data.workers=0", "--batch-size", "8",
                 "--no-progress"]) == 0  # fine-tuning from a run's latest checkpoint
