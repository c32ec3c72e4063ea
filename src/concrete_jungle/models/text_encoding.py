"""Text encoding at the captions' length instead of the full context (77 tokens for ViT-B-32).

open_clip pads every caption to the context length. In a causal text transformer pooled at the end-of-text token
the padding after the pooled position changes nothing: no earlier token attends to a later one. So the tokens of
a batch can be cut after the last pooled position, with the positional embedding and the causal mask cut to
match, and every feature stays what open_clip's `encode_text` gives. Where that is not exact the full length is
kept: a text tower pooled elsewhere (``first``, ``last``, mean), one without a causal mask, an HF or custom text
tower (`trimmable`).

Lengths are rounded up to a multiple of `ROUND` so that `torch.compile` sees a handful of shapes, not one per
batch. Training cuts the tokens (`trim_tokens`) and wraps the model in `TrimmedTextCLIP` (open_clip's forward with
this text path), so data parallel and compile wrap one module as before; evaluation and analysis call
`encode_text`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

ROUND = 16  # 77 tokens: lengths 16, 32, 48, 64 and 77


def trimmable(model) -> bool:
    """Whether cutting the padding is exact for this model: open_clip's built-in text tower (`open_clip.CLIP`),
    with a causal mask, pooled at the end-of-text token (``argmax`` or ``eos`` pooling)."""
    import open_clip

    return (type(model) is open_clip.CLIP and getattr(model, "attn_mask", None) is not None
            and getattr(model, "text_pool_type", None) in ("argmax", "eos"))


def pooled_positions(model, tokens: torch.Tensor) -> torch.Tensor:
    """Where open_clip pools each row (`open_clip.model.text_global_pool`)."""
    if model.text_pool_type == "argmax":
        return tokens.argmax(dim=-1)
    return (tokens == model.text_eos_id).int().argmax(dim=-1)


def rounded_length(needed: int, context: int) -> int:
    """``needed`` positions rounded up to a multiple of `ROUND`, at most the ``context``."""
    return min(context, -(-needed // ROUND) * ROUND)


def trimmed_length(model, tokens: torch.Tensor) -> int:
    """The shortest length that keeps every row's pooled position, rounded up to a multiple of `ROUND`."""
    needed = int(pooled_positions(model, tokens).max()) + 1 if tokens.shape[0] else 1
    return rounded_length(needed, tokens.shape[1])


def trim_tokens(model, tokens: torch.Tensor) -> torch.Tensor:
    """The tokens up to the batch's last pooled position (rounded up), where that is exact; else all of them.
    Data-dependent, so training calls it before the compiled forward, which then sees a few fixed shapes."""
    return tokens[:, :trimmed_length(model, tokens)] if trimmable(model) else tokens


def encode_prefix(model, tokens: torch.Tensor, normalize: bool = False) -> torch.Tensor:
    """open_clip's ``encode_text`` for tokens of any length up to the context (a trimmable model only): the
    positional embedding and the causal mask cut to that length. At the full length it is open_clip's."""
    n = tokens.shape[1]
    cast_dtype = model.transformer.get_cast_dtype()
    x = model.token_embedding(tokens).to(cast_dtype)
    x = x + model.positional_embedding[:n].to(cast_dtype)
    x = model.transformer(x, attn_mask=model.attn_mask[:n, :n])
    x = model.ln_final(x)
    x = x[torch.arange(x.shape[0], device=x.device), pooled_positions(model, tokens)]
    if model.text_projection is not None:
        x = model.text_projection(x) if isinstance(model.text_projection, torch.nn.Linear) else \
            x @ model.text_projection
    return F.normalize(x, dim=-1) if normalize else x


def encode_text(model, tokens: torch.Tensor, normalize: bool = False, trim: bool = True) -> torch.Tensor:
    """open_clip's ``model.encode_text(tokens, normalize)``, on the tokens up to the batch's last pooled position
    where that is exact (`trimmable`), else on all of them."""
    if not (trim and trimmable(model)):
        return model.encode_text(tokens, normalize=normalize)
    return encode_prefix(model, trim_tokens(model, tokens), normalize)


class TrimmedTextCLIP(torch.nn.Module):
    """A trimmable open_clip model whose forward takes tokens already cut by `trim_tokens`; its output is the
    model's own forward's: (image features, text features, exp(logit scale)[, logit bias]), both normalised."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, image: torch.Tensor, text: torch.Tensor):
        out = (self.model.encode_image(image, normalize=True), encode_prefix(self.model, text, normalize=True),
               self.model.logit_scale.exp())
        bias = getattr(self.model, "logit_bias", None)
        return out + (bias,) if bias is not None else out
