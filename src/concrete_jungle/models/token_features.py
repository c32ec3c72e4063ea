"""Per-patch and per-token features in the joint space, on open_clip's own modules (no fork), for the losses
that score captions token by token against an image's patches (FSC-CLIP's local hard-negative loss).

open_clip's towers already compute them: the vision transformer's patch tokens after its final layer norm
(returned when ``output_tokens`` is set) and the text transformer's token states after ``ln_final``. Projected
with the tower's own projection they live where the pooled features do. The pooled features come out of the
same calls, so they are exactly ``encode_image`` / ``encode_text`` (tests/test_token_features.py), and one
forward pass serves the loss's pooled and token inputs.

Supported: `open_clip.CLIP` and `open_clip.CustomTextCLIP` with a `VisionTransformer` (class-token or mean
pooling) and a causal text transformer pooled at the end-of-text token (OpenAI-style CLIP models). Others are
refused with what is missing.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F


class TokenFeaturesError(ValueError):
    """A model whose towers do not give patch or token features this module can read."""


@contextmanager
def _output_tokens(tower):
    """``tower.output_tokens`` on for the call (open_clip's own switch), restored afterwards."""
    before = tower.output_tokens
    tower.output_tokens = True
    try:
        yield tower
    finally:
        tower.output_tokens = before


def _project(x: torch.Tensor, projection) -> torch.Tensor:
    if projection is None:
        return x
    return projection(x) if isinstance(projection, torch.nn.Linear) else x @ projection


def encode_image_tokens(model, images: torch.Tensor, normalize_tokens: bool = True
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """(pooled features, normalised as ``model.encode_image(images, normalize=True)``; patch features B x P x D in
    the joint space, normalised unless ``normalize_tokens`` is False)."""
    from open_clip.transformer import VisionTransformer

    visual = model.visual
    if not isinstance(visual, VisionTransformer) or visual.attn_pool is not None or visual.final_ln_after_pool \
            or visual.pool_type not in ("tok", "avg"):
        raise TokenFeaturesError(f"patch features need an open_clip VisionTransformer pooled at its class token or "
                                 f"by a mean, with its final layer norm before pooling; this model's image tower is "
                                 f"{type(visual).__name__}")
    with _output_tokens(visual):
        pooled, patches = visual(images)
    patches = _project(patches, visual.proj)
    return F.normalize(pooled, dim=-1), F.normalize(patches, dim=-1) if normalize_tokens else patches


def _text_tower(model):
    """The module holding the text transformer's parts: the model itself (`open_clip.CLIP`) or ``model.text``."""
    from open_clip.transformer import TextTransformer

    tower = getattr(model, "text", model)
    pool = getattr(tower, "text_pool_type", getattr(tower, "pool_type", None))
    causal = getattr(tower, "attn_mask", None) is not None
    if (tower is not model and not isinstance(tower, TextTransformer)) or pool not in ("argmax", "eos") \
            or not causal or getattr(tower, "cls_emb", None) is not None:
        raise TokenFeaturesError(f"token features need open_clip's causal text transformer pooled at the end-of-text "
                                 f"token; this model's text tower is {type(tower).__name__} (pooling {pool!r}, "
                                 f"causal mask: {causal})")
    return tower, pool


def end_of_text_positions(tower, pool: str, texts: torch.Tensor) -> torch.Tensor:
    """Where open_clip pools each caption (`open_clip.transformer.text_global_pool`)."""
    if pool == "argmax":
        return texts.argmax(dim=-1)
    eos = getattr(tower, "text_eos_id", getattr(tower, "eos_id", None))
    return (texts == eos).int().argmax(dim=-1)


def encode_text_tokens(model, texts: torch.Tensor, normalize_tokens: bool = True
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(pooled features, normalised as ``model.encode_text(texts, normalize=True)``; token features T x L x D in the
    joint space, normalised unless ``normalize_tokens`` is False; the mask T x L of the tokens that carry the
    caption: its words and its end-of-text token, not the start token, whose state is the same for every caption
    under the causal mask, nor the padding). ``texts`` may be cut after the batch's last end-of-text token
    (`concrete_jungle.models.text_encoding.trim_tokens`): the tokens kept are the same."""
    tower, pool = _text_tower(model)
    if tower is not model:  # CustomTextCLIP: the TextTransformer returns its token states itself
        with _output_tokens(tower):
            pooled, states = tower(texts)
    else:  # open_clip.CLIP.encode_text, keeping every position; cut to the tokens' length where they are cut
        length = texts.shape[1]
        cast_dtype = model.transformer.get_cast_dtype()
        x = model.token_embedding(texts).to(cast_dtype) + model.positional_embedding[:length].to(cast_dtype)
        states = model.ln_final(model.transformer(x, attn_mask=model.attn_mask[:length, :length]))
        pooled = states[torch.arange(states.shape[0], device=states.device),
                        end_of_text_positions(model, pool, texts)]
        pooled = _project(pooled, model.text_projection)
    tokens = _project(states, tower.text_projection)
    positions = torch.arange(texts.shape[1], device=texts.device)
    mask = (positions >= 1) & (positions <= end_of_text_positions(tower, pool, texts)[:, None])
    return F.normalize(pooled, dim=-1), F.normalize(tokens, dim=-1) if normalize_tokens else tokens, mask


def token_features(model, images: torch.Tensor, texts: torch.Tensor, normalize_tokens: bool = True
                   ) -> dict[str, torch.Tensor]:
    """Pooled and token features of a batch, keyed as the losses' inputs: ``image_features``, ``text_features``
    (normalised, as the model's forward gives them), and the extras ``image_tokens``, ``text_tokens``,
    ``text_token_mask`` (`concrete_jungle.loss` ``needs``). FSC-CLIP's released code groups patches by the
    similarity of un-normalised projected features: ``normalize_tokens=False`` gives exactly those."""
    image_features, image_tokens = encode_image_tokens(model, images, normalize_tokens)
    text_features, text_tokens, mask = encode_text_tokens(model, texts, normalize_tokens)
    return {"image_features": image_features, "text_features": text_features, "image_tokens": image_tokens,
            "text_tokens": text_tokens, "text_token_mask": mask}
