"""Loading models (models.py): pretrained weights that cannot be had offline, and the hash the embedding cache is
keyed by following the weights file's content and the precision."""

import os

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
