"""Training configs as YAML, flags and --set give them (configs.py, train/config.py): numbers read as numbers, ranges
checked where they are read, duplicate keys and alias bombs refused, unknown keys named."""

import json
import re
import sys
from pathlib import Path

import pytest

from concrete_jungle.cli import main
from concrete_jungle.configs import ConfigError, load_yaml
from concrete_jungle.train.config import load_config

sys.path.insert(0, str(Path(__file__).parent))
from conftest import TINY_TRAIN  # noqa: E402


def test_numbers_in_flags_and_yaml_are_numbers(tmp_path, planted):
    config = tmp_path / "c.yaml"
    config.write_text("out: x\noptim:\n  lr: 1e-5\n  eps: 1E-8\n")
    assert load_config(str(config), []).optim.lr == 1e-5
    assert load_config(None, ["out=x", "optim.lr=1e-05"]).optim.lr == 1e-5  # what `--lr 1e-5` becomes
    assert main(["train", "--data", str(planted), "--out", str(tmp_path / "run"), "--lr", "1e-5", "--steps", "1",
                 *TINY_TRAIN]) == 0
    assert json.loads((tmp_path / "run" / "config.json").read_text())["optim"]["lr"] == 1e-5


@pytest.mark.parametrize("overrides, message", [
    (["optim.grad_clip=-1"], "optim.grad_clip must be > 0, or null for no clipping, got -1.0"),
    (["optim.weight_decay=-0.1"], "optim.weight_decay must be >= 0"),
    (["loss.m_min=3"], "loss.m_min 3.0 is above loss.m_max 2.0"),
    (["optim.warmup=-5"], "optim.warmup must be >= 0"),
    (["model.precision=fp64"], "model.precision 'fp64' is not one of fp32, amp_bf16"),
    (["out=''"], "out is empty"),
    (["eval.subset=-1"], "eval.subset must be >= 0"),
    (["loss.center=.nan"], "loss.center must be a finite number, got nan"),
    (["optim.lr=.inf"], "optim.lr must be a finite number, got inf"),
    (["optim.beta2=1.5"], "optim.beta2 must be in [0, 1)"),
    (["optim.weight_decay=1e6"], "optim.weight_decay 1e+06 with optim.lr 1e-05 multiplies every weight by -9 each "
                                 "step (AdamW: 1 - lr x weight_decay), which zeroes or flips it: lower "
                                 "optim.weight_decay"),
    (["seed=18446744073709551616"], "seed must be in [0, 2**32), got 18446744073709551616 (flag --seed)"),
    (["seed=-1"], "seed must be in [0, 2**32), got -1"),
])
def test_numbers_out_of_range_are_refused_where_they_are_read(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, ["out=x", *overrides])


def test_yaml_twice_given_keys_and_alias_bombs_are_refused_with_short_messages(tmp_path):
    twice = tmp_path / "twice.yaml"
    twice.write_text("out: x\nsteps: 10\nsteps: 20\n")
    with pytest.raises(ConfigError, match=r"key 'steps' is given twice \(line 3\)"):
        load_config(str(twice), [])
    bomb = tmp_path / "bomb.yaml"  # 414 bytes that expand to 9^7 strings
    lines = ["out: x", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdef", "bcdefg"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    bomb.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(bomb), [])
    assert "expands to more than 100,000 values" in str(e.value) and len(str(e.value)) < 300
    long = tmp_path / "long.yaml"
    long.write_text("out: x\nbatch_size: [" + ",".join(["1"] * 10000) + "]\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(long), [])
    assert "batch_size: expected int, got [1, 1," in str(e.value) and "(30,000 characters)" in str(e.value)
    assert len(str(e.value)) < 300


def test_a_set_key_that_does_not_exist_is_blamed_on_set(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("model:\n  name: cj-tiny\n")
    assert main(["train", "--config", str(config), "--set", "optim.lrr=1e-3", "--data", str(tmp_path),
                 "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "--set optim.lrr=1e-3: 'lrr' is not a key of optim (did you mean lr?)" in " ".join(err.split())
    assert "c.yaml" not in err


def test_a_plant_config_giving_the_mode_twice_is_an_error_naming_both_keys(tmp_path, capsys):
    paper = Path(__file__).resolve().parents[1] / "configs" / "paper"
    for path in sorted(paper.glob("plant_*.yaml")):  # the shipped configs give it once: editing it changes it
        data = load_yaml(path)
        assert data["mode"] == path.stem.split("_")[1] and "mode" not in data["sampler"], path.name
    twice = tmp_path / "plant.yaml"
    twice.write_text((paper / "plant_lc.yaml").read_text().replace("sampler:\n", "sampler:\n  mode: hc\n"))
    assert main(["plant", "--config", str(twice)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{twice}: the mode is given twice, as mode (lc) and sampler.mode (hc); give it once, as mode" in err
    assert main(["plant", "--config", str(paper / "plant_hc.yaml"), "--set", "sampler.mode=lc"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "plant_hc.yaml with --set: the mode is given twice, as mode (hc) and sampler.mode (lc)" in err


def test_a_bad_set_value_names_the_set_an_unknown_yaml_key_gets_a_suggestion_and_a_missing_out_names_the_flag(
        tmp_path, capsys):
    """`--set optim.lr=abc` was blamed on the YAML file (``c.yaml.optim.lr: expected float``), a misspelt key in the
    file got no suggestion, and a config without ``out:`` did not say that ``--out`` gives it."""
    config = tmp_path / "c.yaml"
    config.write_text("out: run\noptim:\n  warmpu: 2\n")
    assert main(["train", "--config", str(config), "--set", "optim.lr=abc"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--set optim.lr=abc: expected float, got 'abc'" in err and f"{config}.optim.lr" not in err
    assert f"{config}.optim: unknown key(s) 'warmpu' (did you mean warmup?)" in err
    config.write_text("steps: 2\n")
    assert main(["train", "--config", str(config)]) == 2
    assert f"error: {config}: missing required key(s) out (flag --out DIR)" in " ".join(capsys.readouterr().err.split())



@pytest.mark.parametrize("overrides, message", [
    # Cement's margin parameters under a loss that reads none, or another schedule's
    (["loss.name=negclip", "loss.tau=0.3"], "loss.tau 0.3 is not read: it is a Cement margin parameter, and "
                                            "loss.name negclip"),
    (["loss.name=fsc_clip", "loss.m_min=-1"], "loss.m_min -1.0 is not read"),
    (["loss.name=degla", "loss.m_max=3"], "loss.m_max 3.0 is not read"),
    (["loss.name=ce_clip", "loss.static_margin=2"], "loss.static_margin 2.0 is not read"),
    (["loss.name=infonce", "loss.center=3"], "loss.center 3.0 is not read: it is a Cement margin parameter, and "
                                             "loss.name infonce (a margin schedule of Cement's loss) reads none of "
                                             "them"),
    (["loss.name=cement", "loss.static_margin=2"], "reads m_min, m_max, center, tau"),
    (["loss.name=static", "loss.tau=0.3"], "loss.tau 0.3 is not read"),
    # another loss's section
    (["loss.name=negclip", "loss.fsc_clip.local_weight=0.5"], "loss.fsc_clip is not read: loss.name is negclip"),
    # an option its own section's settings switch off
    (["loss.name=fsc_clip", "loss.fsc_clip.focal=false", "loss.fsc_clip.focal_gamma=3"],
     "loss.fsc_clip.focal_gamma 3.0 is not read: it is the focal loss's gamma, and focal is false"),
    (["loss.name=fsc_clip", "loss.fsc_clip.local_negatives=false", "loss.fsc_clip.local_weight=0.5"],
     "loss.fsc_clip.local_weight 0.5 is not read: the local loss reads it, and local_negatives is false"),
    (["loss.name=fsc_clip", "loss.fsc_clip.local_negatives=false", "loss.fsc_clip.sim_normalizer=softmax"],
     "loss.fsc_clip.sim_normalizer 'softmax' is not read"),
    (["loss.name=fsc_clip", "loss.fsc_clip.local_negatives=false", "loss.fsc_clip.sim_sparsify=true"],
     "loss.fsc_clip.sim_sparsify True is not read"),
    (["loss.name=fsc_clip", "loss.fsc_clip.global_negatives=false", "loss.fsc_clip.global_weight=1"],
     "loss.fsc_clip.global_weight 1.0 is not read"),
    (["loss.name=fsc_clip", "loss.fsc_clip.global_negatives=false", "loss.fsc_clip.local_negatives=false",
      "loss.fsc_clip.label_smoothing=0.1"], "loss.fsc_clip.label_smoothing 0.1 is not read"),
    (["loss.name=ce_clip", "loss.ce_clip.fixed_threshold=10"],
     "loss.ce_clip.fixed_threshold 10.0 is not read: it is the threshold of threshold: fixed, and threshold is mean"),
    (["loss.name=ce_clip", "loss.ce_clip.threshold=fixed", "loss.ce_clip.threshold_upper_bound=5"],
     "loss.ce_clip.threshold_upper_bound 5.0 is not read"),
    (["loss.name=ce_clip", "loss.ce_clip.cmr_weight=0", "loss.ce_clip.threshold=max"],
     "loss.ce_clip.threshold 'max' is not read: its thresholds are the rank loss's"),
    (["loss.name=degla", "loss.degla.tgc_weight=0", "loss.degla.distill_weight=0", "loss.degla.ema_decay=0.99"],
     "loss.degla.ema_decay 0.99 is not read: no teacher is kept"),
    (["loss.name=degla", "loss.degla.tgc_weight=0", "loss.degla.tgc_scale=3"], "loss.degla.tgc_scale 3.0 is not read"),
    # masking entailed negative pictures under a loss that reads no negative picture
    (["loss.name=ce_clip", "loss.mask_entailed=true"], "loss.mask_entailed is not read: loss.name ce_clip reads no "
                                                       "negative picture"),
    (["loss.name=negclip", "loss.negclip.negative_images=false", "loss.mask_entailed=true"],
     "loss.mask_entailed is not read: loss.name negclip reads no negative picture"),
])
def test_an_option_the_loss_does_not_read_is_refused_naming_it_the_loss_and_the_setting(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, ["out=x", *overrides])


@pytest.mark.parametrize("overrides", [
    ["loss.name=negclip", "loss.tau=0.15", "loss.static_margin=1.0"],  # a shared recipe's margins at their defaults
    ["loss.name=degla", "loss.degla.tgc_weight=0", "loss.degla.ema_decay=0.99"],  # the distillation reads a teacher
    ["loss.name=ce_clip", "loss.ce_clip.threshold=fixed", "loss.ce_clip.fixed_threshold=10"],
    ["loss.name=fsc_clip", "loss.fsc_clip.local_negatives=false", "loss.fsc_clip.focal_gamma=3"],
])
def test_options_the_loss_reads_and_defaults_left_as_they_are_are_accepted(overrides):
    load_config(None, ["out=x", *overrides])


def test_a_printed_config_of_a_peer_loss_reads_back(tmp_path):
    """Every key written out (`--print-config`, config.json): the keys at their defaults are the run without them."""
    from dataclasses import asdict

    import yaml

    config = load_config(None, ["out=x", "loss.name=fsc_clip", "loss.fsc_clip.local_negatives=false"])
    (tmp_path / "printed.yaml").write_text(yaml.safe_dump(asdict(config)))
    assert load_config(str(tmp_path / "printed.yaml"), []) == config
