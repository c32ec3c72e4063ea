"""WiSE-FT (models/wise_ft.py, `concrete-jungle wise-ft`): checkpoints between a start model and its fine-tune, the two
ends bit for bit at alpha 0 and 1, models of different architectures refused with the reason, a stopped sweep
resumed and another one's folders kept."""

import json

import pytest
import torch
from safetensors.torch import load_file

from concrete_jungle.cli import main


def checkpoint(tmp_path, name: str, model: str = "cj-tiny", seed: int = 0, nudge: float = 0.0):
    """A checkpoint of ours; ``nudge``: every weight moved by that much noise (a stand-in for fine-tuning)."""
    from concrete_jungle.models import load_model, save_checkpoint

    clip = load_model(model, "none", seed=seed)
    if nudge:
        torch.manual_seed(seed + 100)
        with torch.no_grad():
            for p in clip.model.parameters():
                p.add_(nudge * torch.randn_like(p))
            clip.model.positional_embedding[0, 0] = -0.0  # a signed zero must come back as itself
    return save_checkpoint(tmp_path / name, clip.model, clip.config)


def raw(state: dict) -> dict:
    """Every tensor's bytes: equal bytes, equal bits (-0.0 and 0.0 differ here, as torch.equal would not see)."""
    return {k: (str(v.dtype), v.contiguous().numpy().tobytes()) for k, v in state.items()}


def test_alpha_0_and_1_are_the_two_ends_bit_for_bit_and_between_them_lies_the_interpolation(tmp_path, capsys):
    from concrete_jungle.models import load_model

    finetuned = checkpoint(tmp_path, "ft", nudge=0.02)  # from cj-tiny's random init with seed 0, as START is
    out = tmp_path / "sweep"
    assert main(["wise-ft", "cj-tiny:none", str(finetuned), "--alpha", "0", "0.5", "1", "--out", str(out)]) == 0
    start = load_model("cj-tiny", "none", seed=0).model.state_dict()
    ends = load_file(finetuned / "open_clip_model.safetensors")
    zero, half, one = (load_file(out / f"alpha-{a}" / "open_clip_model.safetensors") for a in ("0", "0.5", "1"))
    assert raw(zero) == raw(start) and raw(one) == raw(ends)
    assert torch.signbit(one["positional_embedding"][0, 0])  # -0.0 kept
    for key, value in half.items():
        if value.is_floating_point():
            torch.testing.assert_close(value, (start[key].double() + ends[key].double()).div(2).float())
    record = json.loads((out / "alpha-0.5" / "wise_ft.json").read_text())
    assert record["alpha"] == 0.5 and record["start"]["label"] == "cj-tiny (random init, seed 0)"
    assert record["finetuned"]["identity"]["path"] == str(finetuned)
    clip = load_model(checkpoint=out / "alpha-0.5")  # what eval --checkpoint loads
    assert clip.config == load_model(checkpoint=finetuned).config
    card = (out / "alpha-0.5" / "README.md").read_text()
    assert "WiSE-FT weight interpolation (`concrete-jungle wise-ft`), alpha 0.5" in card
    assert "START: cj-tiny (random init, seed 0)" in card


def test_models_of_different_architectures_are_refused_naming_what_differs_and_nothing_is_written(tmp_path, capsys):
    start = checkpoint(tmp_path, "gelu")
    for other, reason in [(checkpoint(tmp_path, "quick", model="cj-tiny-quickgelu"),
                           "config model_cfg.quick_gelu: false in START, true in FINETUNED"),
                          (checkpoint(tmp_path, "demo", model="cj-demo"),
                           "config model_cfg.text_cfg.context_length: 77 in START, 40 in FINETUNED")]:
        assert main(["wise-ft", str(start), str(other), "--alpha", "0.5", "--out", str(tmp_path / "out")]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "are not one architecture, so no weights lie between them" in err and reason in err, err
        assert not list((tmp_path / "out").glob("alpha-*"))
    capsys.readouterr()
    assert main(["wise-ft", str(start), "ViT-Z-99:openai", "--alpha", "0.5", "--out", str(tmp_path / "out")]) == 2
    assert "FINETUNED 'ViT-Z-99:openai' names no model" in " ".join(capsys.readouterr().err.split())
    with pytest.raises(SystemExit):
        main(["wise-ft", str(start), str(start), "--alpha", "1.5", "--out", str(tmp_path / "out")])
    assert "1.5 must be in [0, 1]" in capsys.readouterr().err


def test_a_sweep_run_again_keeps_what_it_wrote_and_another_sweep_into_its_folder_is_refused(tmp_path, capsys):
    start, finetuned = checkpoint(tmp_path, "start"), checkpoint(tmp_path / "run" / "checkpoints", "step-0000002",
                                                                  nudge=0.02)
    (finetuned.parent / "latest.json").write_text(json.dumps({"name": finetuned.name}))  # as training names it
    out = tmp_path / "sweep"
    args = ["wise-ft", str(start), str(finetuned.parent / "latest"), "--out", str(out), "--alpha"]
    assert main([*args, "0.25"]) == 0
    written = (out / "alpha-0.25" / "open_clip_model.safetensors").stat().st_mtime_ns
    assert main([*args, "0.25", "0.75"]) == 0  # 0.25 kept, 0.75 added
    assert (out / "alpha-0.25" / "open_clip_model.safetensors").stat().st_mtime_ns == written
    assert (out / "alpha-0.75" / "wise_ft.json").is_file()
    other = checkpoint(tmp_path, "other", nudge=0.05)
    capsys.readouterr()
    assert main(["wise-ft", str(start), str(other), "--out", str(out), "--alpha", "0.25"]) == 2
    assert "holds something else than this interpolation" in " ".join(capsys.readouterr().err.split())
    assert main(["wise-ft", str(start), str(other), "--out", str(out), "--alpha", "0.25", "--overwrite"]) == 0
    assert json.loads((out / "alpha-0.25" / "wise_ft.json").read_text())["finetuned"]["identity"]["path"] == \
        str(other)


def test_alphas_that_print_alike_get_a_folder_each(tmp_path, capsys):
    """``--alpha 0.5 0.500000001`` wrote both into alpha-0.5 and reported two checkpoints, the first lost."""
    from concrete_jungle.models.wise_ft import alpha_name

    assert [alpha_name(a) for a in (0.0, 0.25, 0.5, 1.0)] == ["alpha-0", "alpha-0.25", "alpha-0.5", "alpha-1"]
    assert alpha_name(0.500000001) == "alpha-0.500000001" and alpha_name(1 / 3) == "alpha-0.3333333333333333"
    finetuned = checkpoint(tmp_path, "ft", nudge=0.02)
    out = tmp_path / "sweep"
    assert main(["wise-ft", "cj-tiny:none", str(finetuned), "--alpha", "0.5", "0.500000001", "--out",
                 str(out)]) == 0
    records = [json.loads((out / name / "wise_ft.json").read_text())["alpha"]
               for name in ("alpha-0.5", "alpha-0.500000001")]
    assert records == [0.5, 0.500000001]
    assert main(["wise-ft", "cj-tiny:none", str(finetuned), "--alpha", "0.5", "--out", str(tmp_path / "ft" /
                 "open_clip_config.json")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
