"""The reproduction recipe's configs stay valid: each one loads through the same strict readers the
commands use, and names the paper's settings."""

from pathlib import Path

import pytest

from concrete_jungle.configs import ConfigError, from_dict, load_yaml
from concrete_jungle.plant import PlantConfig
from concrete_jungle.train.config import load_config

PAPER = Path(__file__).resolve().parents[1] / "configs" / "paper"


@pytest.mark.parametrize("mode", ["hc", "lc", "wo"])
def test_plant_configs(mode):
    c = from_dict(PlantConfig, load_yaml(PAPER / f"plant_{mode}.yaml"), where=f"plant_{mode}.yaml")
    assert c.mode == c.sampler.mode == mode and c.out.endswith(f"D_{mode}")
    assert (c.captioner, c.captioner_options["model"]) == ("openai", "Qwen/Qwen3-32B")
    assert (c.editor, c.editor_options["model"], c.editor_options["strength"], c.editor_options["steps"]) == (
        "diffusers", "stabilityai/sdxl-turbo", 0.75, 4)


@pytest.mark.parametrize("path", sorted(PAPER.glob("train_*.yaml")), ids=lambda p: p.stem)
def test_train_configs(path):
    c = load_config(str(path), [])
    _, loss, mode = path.stem.split("_")
    assert c.loss.name == loss and c.data.concretebatch == [f"runs/paper/D_{mode}"]
    assert (c.model.name, c.model.pretrained, c.batch_size, c.loss.m_min, c.loss.m_max, c.loss.center,
            c.loss.tau) == ("ViT-B-32", "openai", 1024, -2.0, 2.0, 4.0, 0.15)
    assert c.data.pairs_split == "train,restval"


def test_a_misspelt_key_is_an_error(tmp_path):
    bad = tmp_path / "plant.yaml"
    bad.write_text((PAPER / "plant_hc.yaml").read_text().replace("samples_per_shard", "samples_per_shards"))
    with pytest.raises(ConfigError, match="samples_per_shards"):
        from_dict(PlantConfig, load_yaml(bad), where=str(bad))


PEERS = PAPER.parent / "peers"


@pytest.mark.parametrize("path", sorted(PEERS.glob("*.yaml")), ids=lambda p: p.stem)
def test_peer_recipes_load_and_name_their_loss(path):
    c = load_config(str(path), [])
    assert c.loss.name == path.stem and (c.model.name, c.model.pretrained) == ("ViT-B-32", "openai")
    assert c.data.concretebatch and c.data.concretebatch[0].startswith("runs/peers/")


def test_every_peer_loss_has_a_recipe():
    from concrete_jungle.loss.options import PEER_LOSSES

    assert {p.stem for p in PEERS.glob("*.yaml")} == set(PEER_LOSSES)
