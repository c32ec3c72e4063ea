"""Loading models (models/factory.py, models/pretrained.py): pretrained weights that cannot be had offline, and the
hash the embedding cache is keyed by following the weights file's content and the precision; a checkpoint's config
checked against its weights; a weights file checked against the name it is loaded as (shapes, and the activation
where the registry, a config beside it or the weights it was fine-tuned from tell it); published checkpoints by
name."""

import json
import os
import re

import pytest
import torch

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


@pytest.mark.processes
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


def quickgelu_weights(tmp_path, seed: int = 1):
    """A QuickGELU model's weights as a file with no config beside it, and the model."""
    from safetensors.torch import save_file

    from concrete_jungle.models import load_model

    clip = load_model("cj-tiny-quickgelu", "none", seed=seed)
    (tmp_path / "alone").mkdir(exist_ok=True)
    path = tmp_path / "alone" / f"weights-{seed}.safetensors"
    save_file(clip.model.state_dict(), str(path))
    return path, clip


def test_a_quickgelu_checkpoint_loaded_by_its_weights_file_as_gelu_is_refused_naming_the_config_that_says_so(
        tmp_path):
    from concrete_jungle.models import ModelError, load_model, save_checkpoint, uses_quick_gelu

    clip = load_model("cj-tiny-quickgelu", "none", seed=1)
    folder = save_checkpoint(tmp_path / "ckpt", clip.model, clip.config)
    weights = folder / "open_clip_model.safetensors"
    with pytest.raises(ModelError, match=re.escape(f"{folder / 'open_clip_config.json'} records quick_gelu=True")
                       + ".*--model cj-tiny runs GELU: load the folder itself"):
        load_model("cj-tiny", str(weights))
    named = load_model("cj-tiny-quickgelu", str(weights))  # the name that matches loads, with the same features
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert uses_quick_gelu(named.model)
        torch.testing.assert_close(named.model.encode_image(x), clip.model.eval().encode_image(x))


def test_a_pretrained_tag_trained_with_quickgelu_is_built_with_it_under_the_plain_name_and_says_so(
        tmp_path, monkeypatch, capsys):
    """open_clip 3 builds ``ViT-B-32`` with ``openai`` weights as GELU and only warns; here as a tiny tag of the same
    kind (open_clip's own table of tags, with a local file)."""
    import open_clip.pretrained

    from concrete_jungle.models import load_model, uses_quick_gelu

    weights, clip = quickgelu_weights(tmp_path)
    monkeypatch.setitem(open_clip.pretrained._PRETRAINED, "cj-tiny",
                        {"toy_openai": {"file": str(weights), "quick_gelu": True}})
    built = load_model("cj-tiny", "toy_openai")
    assert uses_quick_gelu(built.model) and built.config["model_cfg"]["quick_gelu"] is True
    assert "were trained with QuickGELU: built with QuickGELU" in " ".join(capsys.readouterr().err.split())
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(built.model.encode_image(x), clip.model.eval().encode_image(x))


def test_a_fine_tune_of_cached_quickgelu_weights_loaded_as_gelu_is_refused_and_unrelated_weights_get_a_note(
        tmp_path, monkeypatch, capsys):
    import open_clip.pretrained
    from safetensors.torch import save_file

    from concrete_jungle.models import ModelError, load_model, uses_quick_gelu

    start, clip = quickgelu_weights(tmp_path)
    monkeypatch.setitem(open_clip.pretrained._PRETRAINED, "cj-tiny-quickgelu",
                        {"toy_openai": {"file": str(start), "quick_gelu": True}})
    torch.manual_seed(0)
    tuned = {k: v + 0.01 * v.std() * torch.randn_like(v) if v.is_floating_point() and v.numel() > 1 else v
             for k, v in clip.model.state_dict().items()}
    save_file(tuned, str(tmp_path / "alone" / "finetuned.safetensors"))
    with pytest.raises(ModelError, match=r"is a fine-tune of cj-tiny-quickgelu's 'toy_openai' weights \(relative "
                                         r"distance 0\.0\d+\), which run QuickGELU, but --model cj-tiny runs GELU: "
                                         r"use --model cj-tiny-quickgelu"):
        load_model("cj-tiny", str(tmp_path / "alone" / "finetuned.safetensors"))
    assert uses_quick_gelu(load_model("cj-tiny-quickgelu", str(tmp_path / "alone" / "finetuned.safetensors")).model)
    capsys.readouterr()
    other, _ = quickgelu_weights(tmp_path, seed=2)  # trained apart: about 1.4 from the tag's weights
    assert not uses_quick_gelu(load_model("cj-tiny", str(other)).model)
    assert "cannot be read from its weights: built with GELU" in " ".join(capsys.readouterr().err.split())


def test_weights_of_another_shape_are_refused_naming_the_tensors_open_clip_would_resize(tmp_path):
    from safetensors.torch import save_file

    from concrete_jungle.models import ModelError, load_model

    save_file(load_model("cj-demo", "none").model.state_dict(), str(tmp_path / "demo.safetensors"))
    with pytest.raises(ModelError, match=r"is not cj-tiny's weights: positional_embedding \[40, 64\] in the file, "
                                         r"\[77, 64\] by cj-tiny; visual.positional_embedding"):
        load_model("cj-tiny", str(tmp_path / "demo.safetensors"))


def test_a_pickled_training_checkpoint_loads_its_tensors_and_numbers_without_running_code(tmp_path):
    import numpy as np

    from concrete_jungle.models import ModelError, load_model

    clip = load_model("cj-tiny-quickgelu", "none", seed=1)
    torch.save({"epoch": 5, "state_dict": {f"module.{k}": v for k, v in clip.model.state_dict().items()},
                "best": np.float64(0.5), "steps": np.int64(3)}, tmp_path / "run.pt")
    loaded = load_model("cj-tiny-quickgelu", str(tmp_path / "run.pt"))
    for k, v in clip.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[k], v)
    torch.save({"state_dict": clip.model.state_dict(), "hook": print}, tmp_path / "code.pt")  # a global: code
    with pytest.raises(ModelError, match="cannot be read as weights without running code from it"):
        load_model("cj-tiny-quickgelu", str(tmp_path / "code.pt"))


def test_random_bytes_as_weights_are_no_weights_file_not_code(tmp_path):
    """Random bytes as a peer's weights were refused as "cannot be read as weights without running code"."""
    from concrete_jungle.models import ModelError, load_model

    for name in ("peer.pt", "peer.safetensors"):
        (tmp_path / name).write_bytes(os.urandom(4096).replace(b"\x80", b"\x00").replace(b"PK", b"pk"))
        with pytest.raises(ModelError, match=re.escape(str(tmp_path / name)) + r" is (no weights file|damaged or "
                           r"no safetensors file).*download it again"):
            load_model("cj-tiny-quickgelu", str(tmp_path / name))


def test_every_published_checkpoint_names_an_architecture_open_clip_builds_with_the_activation_of_its_start():
    import open_clip

    from concrete_jungle.models import pretrained as published

    names = [p.name for p in published.PEERS]
    assert len(names) == len(set(names)) and all(n == n.lower() for n in names)
    assert {"negclip", "ce-clip", "fsc-clip", "clic-vit-b-32-cogvlm", "spec-clip", "degla",
            "tripletclip"} <= set(names)
    for peer in published.PEERS:
        assert peer.licence and peer.paper and peer.repository.startswith("https://"), peer.name
        assert peer.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", peer.sha256), peer.name
        assert not (peer.file and peer.hf_hub), peer.name
        if peer.architecture is None:  # what cannot load says why
            assert "not an open_clip model" in peer.note, peer.name
            continue
        assert peer.architecture in open_clip.list_models(), peer.name
        # QuickGELU exactly for fine-tunes of OpenAI's weights, as each entry's start says
        assert peer.architecture.endswith("-quickgelu") == (peer.start.split()[1] == "openai"), peer.name
        assert peer.file is None or peer.file.endswith(published.WEIGHT_SUFFIXES), peer.name
        assert peer.hf_hub is None or peer.hf_hub in peer.weights, peer.name
        assert peer.file or peer.hf_hub or "put" in peer.note, peer.name  # where no file is named, what to do


@pytest.mark.processes
def test_a_published_checkpoint_not_on_disk_or_not_loadable_is_one_line_at_once(data_root, tmp_path, monkeypatch,
                                                                                capsys):
    from concrete_jungle.cli import main

    monkeypatch.setenv("CJ_PEERS_DIR", str(tmp_path / "peers"))
    args = ["eval", "--data-root", str(data_root), "--out", str(tmp_path / "r"), "--no-progress", "--model"]
    assert main([*args, "peer:negclip"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--model peer:negclip (NegCLIP) needs its weights on disk: download negclip.pth from Google Drive file " \
           "1ooVVPxB-tvptgmHlIMMFGV3Cg-IrhbRZ" in err and f"put it in {tmp_path / 'peers' / 'negclip'}/" in err
    assert "Traceback" not in err and err.count("error:") == 1
    assert main([*args, "peer:tripletclip"]) == 2
    assert "cannot be loaded: its checkpoints are two Hugging Face transformers towers" in \
           " ".join(capsys.readouterr().err.split())
    assert main([*args, "peer:openclip"]) == 2
    assert "no published checkpoint of that name; known: peer:negclip, peer:ce-clip" in \
           " ".join(capsys.readouterr().err.split())
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")} | {
        "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "HOME": str(tmp_path)}  # an empty cache
    done = cli(*args, "peer:clic-vit-b-32-cogvlm", env=env)
    err = " ".join(done.stderr.split())
    assert done.returncode == 2 and "Traceback" not in err, err
    assert "its config and weights are not in the local cache and HF_HUB_OFFLINE is set: download them once with " \
           "`hf download nmndeep/CLIC-ViT-B-32-224-CogVLM`" in err


def test_a_published_checkpoint_on_disk_is_checked_against_its_digest_and_its_architecture(tmp_path, monkeypatch,
                                                                                          capsys):
    from safetensors.torch import save_file

    from concrete_jungle.models import ModelError, load_model

    monkeypatch.setenv("CJ_PEERS_DIR", str(tmp_path))
    (tmp_path / "fsc-clip").mkdir()
    (tmp_path / "fsc-clip" / "coco_fsc-clip-ViT-B-32.pt").write_bytes(b"half a download")
    with pytest.raises(ModelError, match=r"is not the FSC-CLIP \(COCO\) file its authors published \(sha256 "
                                         r"[0-9a-f]{64}, published 976e43d7"):
        load_model("peer:fsc-clip")
    (tmp_path / "degla").mkdir()  # no published digest: taken as it is, said once; its shapes still checked
    save_file(load_model("cj-tiny", "none").model.state_dict(), str(tmp_path / "degla" / "DeGLA.safetensors"))
    with pytest.raises(ModelError, match=r"is not ViT-B-32-quickgelu's weights: positional_embedding \[77, 64\] in "
                                         r"the file, \[77, 512\]"):
        load_model("peer:degla")
    assert "no published digest to check it against" in capsys.readouterr().err


def test_a_file_with_a_published_digest_gets_that_checkpoint_s_architecture_and_its_name(tmp_path, monkeypatch):
    import dataclasses

    from concrete_jungle.models import ModelError, load_model, uses_quick_gelu
    from concrete_jungle.models import pretrained as published
    from concrete_jungle.records import file_digest

    weights, _ = quickgelu_weights(tmp_path)
    toy = dataclasses.replace(published.find("negclip"), name="toy", method="Toy", architecture="cj-tiny-quickgelu",
                              file=weights.name, sha256=file_digest(weights))
    monkeypatch.setattr(published, "PEERS", published.PEERS + (toy,))  # an entry whose file the test can make
    monkeypatch.setenv("CJ_PEERS_DIR", str(tmp_path))
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / weights.name).write_bytes(weights.read_bytes())
    with pytest.raises(ModelError, match=r"is Toy's published checkpoint .*but --model cj-tiny runs GELU: use "
                                         r"--model peer:toy \(or --model cj-tiny-quickgelu\)"):
        load_model("cj-tiny", str(weights))
    clip = load_model("peer:toy")
    assert uses_quick_gelu(clip.model) and clip.label == "cj-tiny-quickgelu (peer:toy)"


def test_a_hub_checkpoint_whose_config_leaves_out_quickgelu_is_corrected_for_a_fine_tune_of_openai_weights(
        tmp_path, monkeypatch, capsys):
    """A published Hub checkpoint (open_clip's hf-hub layout, here in a local Hugging Face cache) whose config does
    not record the QuickGELU its start weights ran: built with QuickGELU under its peer name, said in one line."""
    import dataclasses

    import huggingface_hub.constants

    from concrete_jungle.models import load_model, save_checkpoint, uses_quick_gelu
    from concrete_jungle.models import pretrained as published

    clip = load_model("cj-tiny-quickgelu", "none", seed=1)
    repo = tmp_path / "hub" / "models--toy--clic"
    snapshot = save_checkpoint(repo / "snapshots" / "abc123", clip.model, clip.config)
    config = json.loads((snapshot / "open_clip_config.json").read_text())
    del config["model_cfg"]["quick_gelu"]  # as a Hub config written from a plain ViT-B-32 config reads
    (snapshot / "open_clip_config.json").write_text(json.dumps(config))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    toy = dataclasses.replace(published.find("clic-vit-b-32-cogvlm"), name="toy-clic", method="Toy CLIC",
                              hf_hub="toy/clic", architecture="cj-tiny-quickgelu")
    monkeypatch.setattr(published, "PEERS", published.PEERS + (toy,))
    as_published = load_model("hf-hub:toy/clic")  # the Hub config as it is: GELU
    corrected = load_model("peer:toy-clic")
    assert not uses_quick_gelu(as_published.model) and uses_quick_gelu(corrected.model)
    assert "hf-hub:toy/clic's config does not record QuickGELU, but Toy CLIC is ViT-B-32 openai" in \
        " ".join(capsys.readouterr().err.split())
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(corrected.model.encode_image(x), clip.model.eval().encode_image(x))
    assert corrected.label == "hf-hub:toy/clic (peer:toy-clic)" and corrected.config["model_cfg"]["quick_gelu"]


def test_weights_holding_a_nan_or_an_infinity_are_refused_naming_the_file_and_the_tensor(tmp_path, capsys):
    """A checkpoint with one NaN weight scored 0.00 on every benchmark with exit 0 (NaN features, NaN similarities);
    wise-ft copied the NaN into its output and the leaderboard ranked it."""
    from safetensors.torch import load_file, save_file

    from concrete_jungle.cli import main
    from concrete_jungle.models import ModelError, load_model

    for value in (float("nan"), float("-inf")):
        weights = saved_checkpoint(tmp_path, f"ckpt-{value}") / "open_clip_model.safetensors"
        tensors = load_file(weights)
        tensors["visual.proj"][3, 1] = value
        save_file(tensors, weights)
        with pytest.raises(ModelError, match=re.escape(f"{weights}: tensor visual.proj holds 1 NaN or infinite "
                                                       "value(s) of ") + r"\d+, so every feature would be NaN"):
            load_model(checkpoint=weights.parent)
        save_file(tensors, tmp_path / "bare.safetensors")  # a weights file of others, loaded by name
        with pytest.raises(ModelError, match=re.escape(f"{tmp_path / 'bare.safetensors'}: tensor visual.proj")):
            load_model("cj-tiny", str(tmp_path / "bare.safetensors"))
    assert main(["wise-ft", "cj-tiny:none", str(weights.parent), "--alpha", "0.5", "--out",
                 str(tmp_path / "sweep")]) == 2
    assert "tensor visual.proj holds 1 NaN or infinite value(s)" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "sweep" / "alpha-0.5").exists()


def test_the_models_package_offers_the_factorys_names_on_first_use():
    import concrete_jungle.models as models
    from concrete_jungle.models import factory

    defined = {n for n, v in vars(factory).items()
               if not n.startswith("_") and getattr(v, "__module__", None) == factory.__name__}
    assert defined and defined <= models.FACTORY_NAMES, sorted(defined - models.FACTORY_NAMES)
    assert all(getattr(models, n) is getattr(factory, n) for n in models.FACTORY_NAMES)
    with pytest.raises(AttributeError, match="no attribute 'load_modle'"):
        models.load_modle
