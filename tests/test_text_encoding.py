"""Text at the captions' length (models/text_encoding.py): the same features, losses, gradients and benchmark
decisions as open_clip's full-context encoding, and the full context kept wherever cutting would not be exact."""

import json

import open_clip
import pytest
import torch

from benchmark_fixtures import write_winoground
from concrete_jungle.evaluation.benchmarks import sugarcrepe, sugarcrepe_pp, winoground
from concrete_jungle.evaluation.encoding import Encoder
from concrete_jungle.models import load_model
from concrete_jungle.models.text_encoding import ROUND, encode_prefix, encode_text, trimmable, trimmed_length

CAPTIONS = ["a dog", "two", "a man holding an umbrella next to a red car on a rainy street in the city at night",
            "a cat sitting on a wooden table beside a bowl of fruit", "",
            " ".join(["very"] * 70) + " long"]  # longer than the context: open_clip cuts it at 77


@pytest.mark.parametrize("name", ["cj-tiny", "ViT-B-32"])
def test_features_equal_open_clip_s_for_mixed_lengths_in_any_order(name):
    clip = load_model(name, "none")
    model = clip.model
    assert trimmable(model)
    tokens = clip.tokenizer(CAPTIONS * 3)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # the normalised features every caller uses
        full = model.encode_text(tokens, normalize=True)
        for _ in range(3 if name == "cj-tiny" else 1):  # ViT-B-32's width in one random order (its batches cost most)
            order = torch.randperm(len(tokens), generator=generator)
            for size in (1, 4, len(tokens)):
                for i in range(0, len(tokens), size):
                    at = order[i: i + size]
                    assert (encode_text(model, tokens[at], normalize=True) - full[at]).abs().max() <= 1e-6
        short = clip.tokenizer(["a dog", "two cats"])
        assert trimmed_length(model, short) == ROUND  # rounded up: a few shapes for torch.compile
        assert trimmed_length(model, tokens) == 77  # the longest caption needs the whole context
        assert torch.equal(encode_prefix(model, tokens, normalize=True), full)  # at 77 it is open_clip's path


def tiny_variant(tmp_path, name, custom=False, **text_cfg):
    """cj-tiny with other text-tower settings, registered under ``name`` (``custom``: a CustomTextCLIP)."""
    cfg = open_clip.get_model_config("cj-tiny")  # a copy
    cfg["text_cfg"].update(text_cfg)
    if custom:
        cfg["custom_text"] = True
    (tmp_path / f"{name}.json").write_text(json.dumps(cfg))
    open_clip.add_model_config(tmp_path / f"{name}.json")
    torch.manual_seed(0)
    return open_clip.create_model(name).eval()


@pytest.mark.parametrize("kind, custom, text_cfg", [
    ("last", False, {"pool_type": "last"}),
    ("first", False, {"pool_type": "first"}),
    ("noncausal", False, {"no_causal_mask": True}),
    ("custom", True, {}),  # a text tower of its own (CustomTextCLIP, as HF towers are), even if pooled at EOT
])
def test_a_model_where_cutting_would_not_be_exact_keeps_the_full_context(tmp_path, kind, custom, text_cfg):
    model = tiny_variant(tmp_path, f"cj-tiny-{kind}", custom, **text_cfg)
    assert type(model).__name__ == ("CustomTextCLIP" if custom else "CLIP")
    assert not trimmable(model)
    tokens = open_clip.get_tokenizer("cj-tiny")(CAPTIONS[:4])
    with torch.no_grad():
        assert torch.equal(encode_text(model, tokens), model.encode_text(tokens))


def test_training_steps_give_the_untrimmed_losses_and_gradients(tmp_path):
    from concrete_jungle.loss import CementLoss
    from concrete_jungle.models.text_encoding import TrimmedTextCLIP, trim_tokens
    from concrete_jungle.train.objective import StepContext, training_step

    clip = load_model("cj-tiny", "none", seed=3)
    losses, grads = [], []
    for trim in (False, True):
        torch.manual_seed(0)
        model = load_model("cj-tiny", "none", seed=3).model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        forward = TrimmedTextCLIP(model) if trim else model
        generator = torch.Generator().manual_seed(1)
        run = []
        for step in range(4):
            caps = [CAPTIONS[(step + k) % 4] + f" {k}" for k in range(8)]
            batch = (torch.randn(8, 3, 64, 64, generator=generator),
                     torch.randn(8, 1, 3, 64, 64, generator=generator), clip.tokenizer(caps),
                     clip.tokenizer([c + " again" for c in caps])[:, None], torch.full((8, 1), 4.5),
                     torch.ones(8, 1, dtype=torch.bool), torch.ones(8, 1, dtype=torch.bool),
                     torch.zeros(8, 1, dtype=torch.bool))
            step = StepContext(forward, model, CementLoss("cement"), optimizer, "cpu", grad_clip=1.0, trim_text=trim)
            out = training_step(step, batch, 1e-3)
            run.append(out["contrastive_loss"].item())
            grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        assert trim_tokens(model, batch[2]).shape[1] < 77  # the captions were cut
        losses.append(run)
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)
    for untrimmed, trimmed in zip(grads[:4], grads[4:]):  # every step's gradients
        for name in untrimmed:
            assert (untrimmed[name] - trimmed[name]).abs().max() <= 1e-5, name
    # (the weights themselves are not compared: AdamW divides by the gradient's size, so the float noise of a
    # gradient that is zero in exact arithmetic, such as an attention key bias's, becomes a full step either way)


def test_benchmark_decisions_are_identical_item_by_item(data_root, tmp_path):
    clip = load_model("cj-tiny", "none", seed=5)
    write_winoground(tmp_path, "a dog {} on top of a small wooden cat", "a cat {}")  # captions of two lengths
    data = {"sugarcrepe": sugarcrepe.load(data_root / "sugarcrepe", data_root / "coco" / "val2017"),
            "sugarcrepe_pp": sugarcrepe_pp.load(data_root / "sugarcrepe_pp", data_root / "coco" / "val2017"),
            "winoground": winoground.load(tmp_path)}
    modules = {"sugarcrepe": sugarcrepe, "sugarcrepe_pp": sugarcrepe_pp, "winoground": winoground}
    results = {}
    for trim in (False, True):
        encoder = Encoder(clip, batch_size=7, progress=False, trim_text=trim)
        results[trim] = {name: modules[name].evaluate(encoder, d) for name, d in data.items()}
        texts = [it[2] for items in data["sugarcrepe"]["items"].values() for it in items]
        results[trim]["features"] = encoder.texts(texts)
    assert results[False]["sugarcrepe"]["outcomes"] == results[True]["sugarcrepe"]["outcomes"]
    for name in modules:
        assert results[False][name]["metrics"] == results[True][name]["metrics"], name
    assert (results[False]["features"] - results[True]["features"]).abs().max() <= 1e-6
