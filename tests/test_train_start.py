"""The model a run starts from (`train.start`): a published checkpoint by name (``model.name: peer:NAME``) or by a
local copy of its file, checked before it trains (registry entry, published digest, architecture, safe and finite
weights), and the weights it started from recorded in the run's config.json, compared on resume, keying a grid's
cells."""

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from concrete_jungle.configs import ConfigError
from concrete_jungle.models import ModelError, load_model
from concrete_jungle.models import pretrained as published
from concrete_jungle.records import file_digest
from concrete_jungle.train.config import load_config
from concrete_jungle.train.loop import train
from concrete_jungle.train.start import start_identity

sys.path.insert(0, str(Path(__file__).parent))
from test_train import write_k_negative_set  # noqa: E402

FINAL = "checkpoints/step-0000002/open_clip_model.safetensors"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_k_negative_set(tmp_path_factory.mktemp("k") / "k2")


def save_peer_file(path: Path, seed: int = 1, model: str = "cj-tiny-quickgelu", edit=None) -> Path:
    """A peer's weights file as an open_clip_train run's torch.save leaves it: the state dict under 'state_dict',
    DataParallel's 'module.' prefix on every name, the epoch beside it."""
    state = load_model(model, "none", seed=seed).model.state_dict()
    if edit is not None:
        edit(state)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": 3, "state_dict": {f"module.{k}": v for k, v in state.items()}}, path)
    return path


@pytest.fixture
def peers(tmp_path, monkeypatch):
    """Two registry entries whose files the test makes: `toy` without a published digest (as NegCLIP), `other`
    with one (as FSC-CLIP), both fine-tunes of QuickGELU weights, in a peers' folder of their own."""
    monkeypatch.setenv("CJ_PEERS_DIR", str(tmp_path / "peers"))
    other_file = save_peer_file(tmp_path / "peers" / "other" / "other.pt", seed=2)
    toy = dataclasses.replace(published.find("negclip"), name="toy", method="Toy", architecture="cj-tiny-quickgelu",
                              file="toy.pth")
    other = dataclasses.replace(published.find("fsc-clip"), name="other", method="Other",
                                architecture="cj-tiny-quickgelu", file="other.pt", sha256=file_digest(other_file))
    monkeypatch.setattr(published, "PEERS", published.PEERS + (toy, other))
    return save_peer_file(tmp_path / "peers" / "toy" / "toy.pth")


def config(out, data, *overrides):
    return load_config(None, [f"out={out}", "model.precision=fp32", f"data.concretebatch=['{data}']",
                              "data.workers=0", "optim.lr=0.002", "optim.warmup=1", "batch_size=4", "steps=2",
                              "save_every=0", *overrides])


def test_a_run_from_a_published_checkpoint_trains_its_weights_as_its_architecture_and_records_them(tmp_path, data,
                                                                                                  peers):
    """peer:toy by name, and by a local copy of its file, trains what its file loaded as the registry's
    architecture trains, bit for bit; config.json records which weights it started from."""
    copy = tmp_path / "downloads" / "toy.pth"
    copy.parent.mkdir()
    copy.write_bytes(peers.read_bytes())
    runs = {"by_name": ["model.name=peer:toy"], "by_copy": ["model.name=peer:toy", f"model.pretrained={copy}"],
            "by_file": ["model.name=cj-tiny-quickgelu", f"model.pretrained={copy}"]}
    for name, overrides in runs.items():
        train(config(tmp_path / name, data, *overrides), progress=False)
    weights = {name: load_file(tmp_path / name / FINAL) for name in runs}
    assert all(torch.equal(weights["by_name"][k], w[k]) for w in weights.values() for k in w)
    start = load_model("cj-tiny-quickgelu", "none", seed=1).model.state_dict()
    assert not torch.equal(weights["by_name"]["text_projection"], start["text_projection"])  # it trained
    digest = file_digest(peers)
    recorded = {name: json.loads((tmp_path / name / "config.json").read_text())["start"] for name in runs}
    assert recorded == {"by_name": {"peer": "toy", "weights_sha256": digest},
                        "by_copy": {"peer": "toy", "weights_sha256": digest}, "by_file": {"weights_sha256": digest}}
    saved = json.loads((tmp_path / "by_name" / "checkpoints" / "step-0000002" / "open_clip_config.json").read_text())
    assert saved["model_cfg"]["quick_gelu"] is True  # the registry's architecture, kept in the checkpoint


def nan_in_projection(state):
    state["text_projection"][0, 0] = float("nan")


@pytest.mark.parametrize("overrides, problem", [
    (["model.name=peer:absent"], r"model.name: --model peer:absent: no published checkpoint of that name; known: "),
    (["model.name=peer:negclip"], r"--model peer:negclip \(NegCLIP\) needs its weights on disk: download negclip.pth"),
    (["model.name=peer:tripletclip"], r"peer:tripletclip \(TripletCLIP\) cannot be loaded: its checkpoints are two "),
    (["model.name=peer:toy", "model.pretrained=laion2b_s34b_b79k"],
     r"model.pretrained laion2b_s34b_b79k: under model.name peer:toy it names a local copy of Toy's weights file, "
     r"and no such file exists; leave model.pretrained out"),
    (["model.name=peer:toy", "model.checkpoint=runs/x"],
     r"model.name peer:toy and model.checkpoint runs/x both name the weights to start from: give one of them"),
], ids=["unknown", "not-on-disk", "not-open-clip", "a-tag", "and-a-checkpoint"])
def test_a_published_checkpoint_that_cannot_start_a_run_is_one_line_before_any_data(tmp_path, data, peers, overrides,
                                                                                    problem):
    with pytest.raises(ConfigError, match=problem) as e:
        train(config(tmp_path / "run", data, *overrides), progress=False)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("weights, overrides, problem", [
    ("other", ["model.name=peer:toy"],  # another entry's published file under this one's name
     r"other.pt is Other's published checkpoint \(sha256 [0-9a-f]{12}…\), not Toy's: use --model peer:other"),
    ("toy", ["model.name=peer:other"],  # a file of other content under a name with a published digest
     r"toy.pth is not the Other file its authors published \(sha256 [0-9a-f]{64}, published"),
    ("demo", ["model.name=peer:toy"],  # weights of another architecture than the registry's
     r"demo.pth is not cj-tiny-quickgelu's weights: .* in the file, .* by cj-tiny-quickgelu"),
    ("toy", ["model.name=cj-tiny"],  # the peer's file under the config's model of another activation
     r"toy.pth is Toy's published checkpoint .*but --model cj-tiny runs GELU: use --model peer:toy \(or --model "
     r"cj-tiny-quickgelu\)"),
    ("nan", ["model.name=peer:toy"], r"nan.pth: tensor text_projection holds 1 NaN or infinite value\(s\) of 4096"),
    ("code", ["model.name=peer:toy"], r"code.pth cannot be read as weights without running code from it"),
], ids=["another-entry-s", "not-the-published", "another-architecture", "another-activation", "nan", "pickled-code"])
def test_a_published_checkpoint_s_file_is_checked_before_it_trains(tmp_path, data, peers, weights, overrides,
                                                                  problem):
    """Each file is given as model.pretrained: the published digest, another entry's file, the registry's
    architecture against the config's model, finite weights, and no code read from a pickle."""
    made = {"other": lambda: published.peer_dir() / "other" / "other.pt", "toy": lambda: peers,
            "demo": lambda: save_peer_file(tmp_path / "demo.pth", model="cj-demo"),
            "nan": lambda: save_peer_file(tmp_path / "nan.pth", edit=nan_in_projection),
            "code": lambda: torch.save({"state_dict": {}, "args": argparse.Namespace(lr=1e-5)},  # needs its class
                                       tmp_path / "code.pth") or tmp_path / "code.pth"}
    path = made[weights]()
    with pytest.raises(ModelError, match=problem) as e:
        train(config(tmp_path / "run", data, *overrides, f"model.pretrained={path}"), progress=False)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_resume_from_other_start_weights_is_refused_and_a_grid_cell_s_identity_follows_them(tmp_path, data,
                                                                                             peers):
    from concrete_jungle.experiments.grid import cell_identity

    cfg = config(tmp_path / "run", data, "model.name=peer:toy")
    train(cfg, progress=False, stop_at=1)
    before = cell_identity(cfg, start_identity(cfg.model))
    save_peer_file(peers, seed=3)  # the peer's file replaced by other weights between the two starts
    with pytest.raises(ConfigError, match=r"--resume latest continues a run made with other settings: "
                                          r"start.weights_sha256 \"[0-9a-f]{64}\" -> \"[0-9a-f]{64}\""):
        train(cfg, resume="latest", progress=False)
    assert cell_identity(cfg, start_identity(cfg.model)) != before
