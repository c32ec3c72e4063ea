"""Checkpoints as commands take them (models/checkpoints.py): a run's folder, its checkpoints folder and
checkpoints/latest for every command that takes one, a path that names none, a weights file that is not one; and a
checkpoint folder published as it is (its model card, plain open_clip's `local-dir:` loading)."""

import json
import re

import pytest

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


def test_a_weights_file_given_as_a_checkpoint_is_refused_saying_how_to_name_its_architecture(tmp_path, capsys):
    (tmp_path / "negclip.pth").write_bytes(b"weights")
    assert main(["eval", "--data-root", str(tmp_path), "--checkpoint", str(tmp_path / "negclip.pth")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{tmp_path / 'negclip.pth'} is a weights file without the config that records its architecture" in err
    assert f"--model NAME --pretrained {tmp_path / 'negclip.pth'} (NAME-quickgelu for a fine-tune of OpenAI's " \
           "weights), or --model peer:NAME" in err


def test_a_published_checkpoint_folder_has_a_model_card_from_its_run_and_loads_in_open_clip_with_our_features(
        run, data_root, tmp_path, capsys):
    import open_clip
    import torch
    from PIL import Image

    from concrete_jungle.models import load_model
    from concrete_jungle.models.checkpoints import resolve_checkpoint

    folder = resolve_checkpoint(run)
    assert main(["eval", "--data-root", str(data_root), "--checkpoint", str(folder), "--out", str(tmp_path / "r"),
                 "--no-progress"]) == 0
    assert main(["model-card", str(run), "--results", str(tmp_path / "r"), "--repo", "me/cement-tiny",
                 "--resamples", "200"]) == 0
    card = (folder / "README.md").read_text()
    for part in ("library_name: open_clip", "loss: cement", "for 3 of 3 steps at batch size 8",
                 "ConcreteBatch `cb`: mode hc; captioner rules; editor none", "| sugarcrepe (compositional) |",
                 "Start weights: none: trained from a random initialisation",
                 'open_clip.create_model_and_transforms("hf-hub:me/cement-tiny")',
                 f"hf upload me/cement-tiny {folder} . --exclude 'trainer_state.*'"):
        assert part in card, part
    assert re.search(r"\| \*\*compositional mean\*\* \| \*\*\d+\.\d\d\*\* \| \[\d+\.\d\d, \d+\.\d\d\] \|", card)
    # each number names its data: the folder and its files' digest (the fixture root is no toy world)
    assert f"- sugarcrepe: `{data_root.resolve()}`, files sha256 `" in card and "toy world" not in card
    assert main(["eval", "--data-root", str(data_root), "--model", "cj-tiny", "--pretrained", "none",
                 "--out", str(tmp_path / "other"), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["model-card", str(folder), "--results", str(tmp_path / "other")]) == 2  # another model's results
    assert "holds the results of cj-tiny (random init, seed 0), not of" in " ".join(capsys.readouterr().err.split())

    ours = load_model(checkpoint=folder)
    plain, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{folder}")
    picture = Image.new("RGB", (80, 60), (200, 30, 90))
    pixels = ours.preprocess(picture).unsqueeze(0)
    assert torch.equal(preprocess(picture).unsqueeze(0), pixels)
    captions = ["a red square", "a cat under a table"]
    tokens = ours.tokenizer(captions)
    assert torch.equal(open_clip.get_tokenizer(f"local-dir:{folder}")(captions), tokens)
    with torch.no_grad():
        torch.testing.assert_close(plain.eval().encode_image(pixels), ours.model.encode_image(pixels), rtol=0, atol=0)
        torch.testing.assert_close(plain.encode_text(tokens), ours.model.encode_text(tokens), rtol=0, atol=0)


def test_a_model_card_s_repo_is_a_hub_id_and_its_upload_line_is_quoted_for_the_shell(tmp_path, capsys):
    """`model-card --repo` took any text, and a shell fragment (or a folder named with one) landed in the printed
    upload line."""
    import shlex

    from concrete_jungle.models import load_model, save_checkpoint

    clip = load_model("cj-tiny", "none", seed=0)
    folder = save_checkpoint(tmp_path / "my $(touch pwned) model", clip.model, clip.config)
    with pytest.raises(SystemExit, match="2"):  # argparse's usage error
        main(["model-card", str(folder), "--repo", "me/x; rm -rf ~"])
    assert "'me/x; rm -rf ~' is not a Hub repository id: give ORG/NAME" in " ".join(capsys.readouterr().err.split())
    assert not (folder / "README.md").exists()
    assert main(["model-card", str(folder), "--repo", "me/cement-tiny"]) == 0
    line = f"hf upload me/cement-tiny {shlex.quote(str(folder))} . --exclude 'trainer_state.*'"
    assert line in " ".join(capsys.readouterr().out.split()) and line in (folder / "README.md").read_text()


def test_a_card_says_when_its_data_is_a_toy_world_behind_the_links_of_a_data_root(tmp_path):
    from concrete_jungle.analysis.model_card import data_source

    world = tmp_path / "runs" / "world-abc"
    (world / "test" / "sugarcrepe").mkdir(parents=True)
    (world / "world.json").write_text("{}")
    root = tmp_path / "toy"
    root.mkdir()
    (root / "sugarcrepe").symlink_to(world / "test" / "sugarcrepe")  # the trade-off recipe's data root
    said = data_source({"benchmark_files_sha256": "f" * 64, "data_root": str(root)})
    assert said == f"`{root}`, files sha256 `ffffffffffff`: **the toy world** (rendered scenes in the benchmark's " \
                   "format, not the benchmark's own data)"
    assert "data root not recorded" in data_source({"benchmark_files_sha256": "f" * 64})
