"""Patch and token features on open_clip's own modules (models/token_features.py): the pooled features are exactly the
model's, the tokens live in the joint space, the token mask, cut captions, other towers refused."""

import json

import open_clip
import pytest
import torch
import torch.nn.functional as F

from concrete_jungle.models import CONFIG_DIR, load_model
from concrete_jungle.models.text_encoding import trim_tokens
from concrete_jungle.models.token_features import (
    TokenFeaturesError,
    encode_image_tokens,
    encode_text_tokens,
    token_features,
)

CAPTIONS = ["a red cube left of a blue ball", "two cats", "a dog under a wooden table near the window", "x"]


@pytest.fixture(scope="module")
def tiny():
    clip = load_model("cj-tiny", "none", seed=0)
    torch.manual_seed(0)
    return clip.model, torch.randn(3, 3, 64, 64), clip.tokenizer(CAPTIONS)


def tiny_config():
    return json.loads((CONFIG_DIR / "cj-tiny.json").read_text())


def test_pooled_features_are_exactly_encode_image_and_encode_text(tiny):
    model, images, texts = tiny
    with torch.no_grad():
        out = token_features(model, images, texts)
        assert torch.equal(out["image_features"], model.encode_image(images, normalize=True))
        assert torch.equal(out["text_features"], model.encode_text(texts, normalize=True))
    assert out["image_tokens"].shape == (3, 16, 64)  # 64 px / 16 px patches: 4 x 4, embed dim 64
    assert out["text_tokens"].shape == (4, 77, 64) and out["text_token_mask"].shape == (4, 77)
    assert model.visual.output_tokens is False  # open_clip's switch is restored


def test_tokens_are_in_the_joint_space(tiny):
    """The end-of-text token's feature is the pooled caption feature; with mean pooling the patches' mean is the
    pooled picture feature (both before normalisation): same projection, same space."""
    model, images, texts = tiny
    with torch.no_grad():
        _, tokens, mask = encode_text_tokens(model, texts, normalize_tokens=False)
        end = texts.argmax(dim=-1)
        torch.testing.assert_close(tokens[torch.arange(4), end], model.encode_text(texts), atol=1e-6, rtol=1e-5)
        normalised = encode_text_tokens(model, texts)[1]
        torch.testing.assert_close(normalised, F.normalize(tokens, dim=-1), atol=1e-6, rtol=0)
        config = tiny_config()
        torch.manual_seed(1)
        mean_pooled = open_clip.CLIP(config["embed_dim"], config["vision_cfg"] | {"pool_type": "avg"},
                                     config["text_cfg"]).eval()
        _, patches = encode_image_tokens(mean_pooled, images, normalize_tokens=False)
        torch.testing.assert_close(patches.mean(dim=1), mean_pooled.encode_image(images), atol=1e-6, rtol=1e-5)


def test_the_token_mask_is_the_caption_and_its_end_not_the_start_nor_the_padding(tiny):
    model, _, texts = tiny
    _, _, mask = encode_text_tokens(model, texts)
    end = texts.argmax(dim=-1)
    for i in range(len(CAPTIONS)):
        expected = torch.zeros(77, dtype=torch.bool)
        expected[1:end[i] + 1] = True
        assert torch.equal(mask[i], expected)
    assert not mask[:, 0].any() and mask[3].sum() == 2  # "x": one word and its end-of-text token


def test_captions_cut_after_their_last_end_of_text_keep_every_token(tiny):
    model, _, texts = tiny
    cut = trim_tokens(model, texts)
    assert cut.shape[1] < texts.shape[1]
    with torch.no_grad():
        full, cut_out = encode_text_tokens(model, texts), encode_text_tokens(model, cut)
    length = cut.shape[1]
    torch.testing.assert_close(cut_out[0], full[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(cut_out[1], full[1][:, :length], atol=1e-6, rtol=0)
    assert torch.equal(cut_out[2], full[2][:, :length]) and not full[2][:, length:].any()


def test_custom_text_clip_gives_the_same_exactness(tiny):
    _, images, texts = tiny
    config = tiny_config()
    torch.manual_seed(2)
    model = open_clip.CustomTextCLIP(config["embed_dim"], config["vision_cfg"], config["text_cfg"]).eval()
    with torch.no_grad():
        out = token_features(model, images, texts)
        assert torch.equal(out["text_features"], model.encode_text(texts, normalize=True))
        assert torch.equal(out["image_features"], model.encode_image(images, normalize=True))
    assert out["text_tokens"].shape == (4, 77, 64) and model.text.output_tokens is False


def test_gradients_reach_the_towers_through_the_tokens(tiny):
    model, images, texts = tiny
    out = token_features(model, images, texts)
    (out["image_tokens"].sum() + out["text_tokens"][out["text_token_mask"]].sum()).backward()
    assert model.visual.conv1.weight.grad.abs().sum() > 0 and model.token_embedding.weight.grad.abs().sum() > 0
    model.zero_grad()


def test_other_towers_are_refused_with_what_is_missing(tiny):
    _, images, texts = tiny
    config = tiny_config()
    resnet = open_clip.CLIP(config["embed_dim"], {"image_size": 64, "layers": [1, 1, 1, 1], "width": 16},
                            config["text_cfg"])
    with pytest.raises(TokenFeaturesError, match="VisionTransformer"):
        encode_image_tokens(resnet, images)
    first_token = open_clip.CustomTextCLIP(config["embed_dim"], config["vision_cfg"],
                                           config["text_cfg"] | {"pool_type": "first"})
    with pytest.raises(TokenFeaturesError, match="end-of-text"):
        encode_text_tokens(first_token, texts)
