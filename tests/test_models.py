"""Loading models (models.py): pretrained weights that cannot be had offline, and the hash the embedding cache is
keyed by following the weights file's content and the precision; a checkpoint's config checked against its
weights."""

import json
import os
import re

import pytest

from conftest import cli


def test_the_embedding_cache_follows_the_weights_file_s_content_and_the_precision(tmp_path):
    from safetensors.torch import save_file

    from concrete_jungle.models import load_model

    weights = tmp_path / "w.safetensors"
    save_file(load_model("cj-tiny", "none", seed=1).model.state_dict(), str(weights))
    first = load_model("cj-tiny", str(weights))
    save_file(load_model("cj-tiny", "none", seed=2).model.state_dict(), str(weights))  # overwritten in place
    assert load_model("cj-tiny", str(weights)).hash != first.hash
    assert load_model("cj-tiny", "none", precision="bf16").hash != load_model("cj-tiny", "none").hash


def test_pretrained_weights_that_cannot_be_had_offline_are_one_clear_line_at_once(data_root, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")} | {
        "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "HOME": str(tmp_path)}  # an empty cache
    done = cli("eval", "--data-root", data_root, "--model", "ViT-B-32", "--out", tmp_path / "r", env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    err = " ".join(done.stderr.split())
    assert "the 'openai' weights of ViT-B-32 are not in the local cache and HF_HUB_OFFLINE is set" in err
    assert "--pretrained /path/to/open_clip_model.safetensors" in err


def saved_checkpoint(tmp_path, name: str = "ckpt"):
    from concrete_jungle.models import load_model, save_checkpoint

    clip = load_model("cj-tiny", "none", seed=1)
    return save_checkpoint(tmp_path / name, clip.model, clip.config)


def edit_config(path, section: str | None, key: str, value) -> None:
    config = json.loads((path / "open_clip_config.json").read_text())
    (config["model_cfg"][section] if section else config["model_cfg"])[key] = value
    (path / "open_clip_config.json").write_text(json.dumps(config, indent=2))


@pytest.mark.parametrize("section, key, value, problem", [
    ("text_cfg", "heads", 4, "is not the config the weights were saved with"),  # the same shapes
    (None, "quick_gelu", True, "is not the config the weights were saved with"),
    ("vision_cfg", "image_size", 32, "visual.positional_embedding [17, 64] in the weights, [5, 64] by the config"),
    ("text_cfg", "context_length", 64, "positional_embedding [77, 64] in the weights, [64, 64] by the config"),
])
def test_a_checkpoint_whose_config_does_not_describe_its_weights_is_refused_naming_the_config(section, key, value,
                                                                                            problem, tmp_path):
    from concrete_jungle.models import ModelError, load_model

    path = saved_checkpoint(tmp_path)
    edit_config(path, section, key, value)
    with pytest.raises(ModelError, match=re.escape(str(path / "open_clip_config.json")) + ".*" + re.escape(problem)):
        load_model(checkpoint=path)


def test_a_checkpoint_saved_without_its_config_digest_loads_with_a_warning_and_is_told_apart_by_its_config(
        tmp_path, capsys):
    import shutil

    from concrete_jungle.models import load_model

    original = saved_checkpoint(tmp_path)
    (original / "architecture.json").unlink(missing_ok=True)  # as saved before the digest was recorded
    edited = tmp_path / "edited"
    shutil.copytree(original, edited)
    edit_config(edited, "text_cfg", "heads", 4)
    a, b = load_model(checkpoint=original), load_model(checkpoint=edited)
    err = " ".join(capsys.readouterr().err.split())
    assert f"warning: {original / 'open_clip_config.json'} is taken on trust: the checkpoint has no " \
           "architecture.json" in err
    assert a.identity["checkpoint"] != b.identity["checkpoint"]  # the results' label covers weights and config
    assert "weights and config sha1" in a.label


def test_a_truncated_weights_file_is_one_error_naming_it(tmp_path):
    from concrete_jungle.models import ModelError, load_model

    weights = saved_checkpoint(tmp_path) / "open_clip_model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ModelError, match=re.escape(f"{weights} is damaged (") + ".*use another checkpoint"):
        load_model(checkpoint=weights.parent)
