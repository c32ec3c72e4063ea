"""LoRA adapters on open_clip's transformer blocks: a trainable low-rank path beside a frozen projection.

A projection ``y = x W^T + b`` becomes ``y = x W^T + b + (alpha / rank) * B A dropout(x)``, with A (rank x in)
drawn as `nn.Linear` draws its weight and B (out x rank) zero, so that an adapted model starts as its base model
(Hu et al., 2021). The adapted projections are those of a residual block (`open_clip.transformer
.ResidualAttentionBlock`): attention's query, key and value (three adapters on the fused ``in_proj_weight``) and its
``out_proj``, the MLP's ``c_fc`` and ``c_proj``.

``nn.MultiheadAttention`` reads its weights inside its forward (it never calls ``out_proj``), so an adapter there
cannot see the projection's input. `LoraAttention` therefore computes open_clip's self-attention itself
(projections, ``scaled_dot_product_attention``, output projection), with each adapter on its projection's input:
dropout on an adapter's input is exact everywhere. peft adapts ``nn.MultiheadAttention`` by merging its adapters
into the weights before each forward and subtracting them after, which leaves frozen weights changed by rounding.

Adapted modules keep their base parameters under their names (``...attn.in_proj_weight``) and add ``lora_*`` ones;
`merged` gives the plain open_clip model with every adapter folded into its weight, which `local-dir:` loading
reads as any checkpoint of ours.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

ADAPTER_KEY = ".lora_"  # in the name of every adapter tensor, and of no base one


class LowRank(nn.Module):
    """``parts`` adapters side by side (q, k and v of a fused projection: 3), each ``scale * B A dropout(x)``; the
    parts' outputs concatenated, as the fused projection's are."""

    def __init__(self, in_features: int, out_features: int, rank: int, scale: float, dropout: float,
                 parts: int = 1, like: torch.Tensor | None = None):
        super().__init__()
        where = {"device": like.device, "dtype": like.dtype} if like is not None else {}
        self.rank, self.parts, self.scale = rank, parts, scale
        self.down = nn.Parameter(torch.empty(parts * rank, in_features, **where))  # A of each part, stacked
        self.up = nn.Parameter(torch.zeros(parts, out_features, rank, **where))  # B of each part
        for a in self.down.data.split(rank):  # as nn.Linear(in_features, rank) draws its weight
            nn.init.kaiming_uniform_(a, a=math.sqrt(5))
        self.dropout = nn.Dropout(dropout) if dropout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.linear(self.dropout(x), self.down) * self.scale  # scaled at rank width, not at the output's
        return F.linear(h, self.up[0] if self.parts == 1 else torch.block_diag(*self.up))

    def delta(self) -> torch.Tensor:
        """The adapters as one weight update (parts * out x in): what `merged` adds to the base weight."""
        return torch.cat([b @ a for b, a in zip(self.up, self.down.split(self.rank))]) * self.scale


class LoraLinear(nn.Linear):
    """An ``nn.Linear`` with an adapter: the base weight and bias under their names, the adapter as ``lora_path``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.lora_path(x)


class LoraAttention(nn.MultiheadAttention):
    """open_clip's self-attention (query, key and value the same tensor, an additive or boolean mask, no key
    padding) with adapters on the q, k, v projections (``lora_qkv``) and on the output projection (``lora_out``)."""

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        if not (query is key and key is value) or key_padding_mask is not None or need_weights or is_causal \
                or query.dim() != 3:
            raise ValueError("LoRA attention computes open_clip's batched self-attention without attention weights "
                             "(query, key and value one tensor, need_weights=False, no key padding mask); this "
                             "block was called otherwise: leave its tower out of regime.lora.towers")
        x = query if self.batch_first else query.transpose(0, 1)
        n, length, _ = x.shape
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias) + self.lora_qkv(x)
        q, k, v = qkv.view(n, length, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if attn_mask is not None and attn_mask.dtype == torch.bool:  # True: not attended, as nn.MultiheadAttention
            attn_mask = torch.zeros_like(attn_mask, dtype=q.dtype).masked_fill_(attn_mask, float("-inf"))
        if attn_mask is not None and attn_mask.dim() == 3:  # (n * heads, L, S), as nn.MultiheadAttention takes it
            attn_mask = attn_mask.view(n, self.num_heads, *attn_mask.shape[1:])
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                           dropout_p=self.dropout if self.training else 0.0)
        o = o.transpose(1, 2).reshape(n, length, self.embed_dim)
        out = F.linear(o, self.out_proj.weight, self.out_proj.bias) + self.lora_out(o)
        return (out if self.batch_first else out.transpose(0, 1)), None


def adaptable(block: nn.Module) -> str | None:
    """Why LoRA cannot adapt ``block``, or None: it must be open_clip's residual block with a plain
    ``nn.MultiheadAttention`` (one fused projection, no extra key/value bias) and an MLP of ``c_fc`` and ``c_proj``."""
    attn, mlp = getattr(block, "attn", None), getattr(block, "mlp", None)
    if type(attn) is not nn.MultiheadAttention or not attn._qkv_same_embed_dim or attn.bias_k is not None \
            or attn.add_zero_attn:
        return f"its attention is {type(attn).__name__}, not a plain fused nn.MultiheadAttention"
    if not all(type(getattr(mlp, n, None)) is nn.Linear for n in ("c_fc", "c_proj")):
        return "its MLP is not open_clip's c_fc and c_proj nn.Linear layers"
    return None


def adapt_block(block: nn.Module, modules: list[str], rank: int, alpha: float, dropout: float) -> None:
    """Adapters on ``block``'s attention (``"attn"``) and/or MLP (``"mlp"``) projections, in place; the base
    parameters stay the same tensors (the block must pass `adaptable`)."""
    scale = alpha / rank
    if "attn" in modules:
        old = block.attn
        d, bias = old.embed_dim, old.in_proj_bias is not None
        new = LoraAttention(d, old.num_heads, dropout=old.dropout, bias=bias, batch_first=old.batch_first,
                            device="meta")
        new.in_proj_weight, new.in_proj_bias, new.out_proj = old.in_proj_weight, old.in_proj_bias, old.out_proj
        new.lora_qkv = LowRank(d, d, rank, scale, dropout, parts=3, like=old.in_proj_weight)
        new.lora_out = LowRank(d, d, rank, scale, dropout, like=old.out_proj.weight)
        new.train(old.training)
        block.attn = new
    if "mlp" in modules:
        for name in ("c_fc", "c_proj"):
            old = getattr(block.mlp, name)
            new = LoraLinear(old.in_features, old.out_features, bias=old.bias is not None, device="meta")
            new.weight, new.bias = old.weight, old.bias
            new.lora_path = LowRank(old.in_features, old.out_features, rank, scale, dropout, like=old.weight)
            new.train(old.training)
            setattr(block.mlp, name, new)


def fold(module: nn.Module) -> nn.Module:
    """The plain open_clip module an adapted one stands for, its adapters added into its weights (new tensors; the
    biases are the adapted module's)."""
    with torch.no_grad():
        if isinstance(module, LoraLinear):
            plain = nn.Linear(module.in_features, module.out_features, bias=module.bias is not None, device="meta")
            plain.weight = nn.Parameter(module.weight + module.lora_path.delta())
            plain.bias = module.bias
        else:
            plain = nn.MultiheadAttention(module.embed_dim, module.num_heads, dropout=module.dropout,
                                          bias=module.in_proj_bias is not None, batch_first=module.batch_first,
                                          device="meta")
            plain.in_proj_weight = nn.Parameter(module.in_proj_weight + module.lora_qkv.delta())
            plain.in_proj_bias = module.in_proj_bias
            plain.out_proj.weight = nn.Parameter(module.out_proj.weight + module.lora_out.delta())
            plain.out_proj.bias = module.out_proj.bias
    return plain.train(module.training)


def merged(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every adapter folded into its weights: a plain open_clip model (its state_dict
    has open_clip's keys alone), whose features equal the adapted model's up to rounding."""
    copied = copy.deepcopy(model)
    for parent in list(copied.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, (LoraLinear, LoraAttention)):
                setattr(parent, name, fold(child))
    return copied


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapters' tensors by name (``...attn.lora_qkv.down``): what a checkpoint keeps of them."""
    return {k: v for k, v in model.state_dict().items() if ADAPTER_KEY in k}


def base_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Everything of ``model`` but its adapters: the frozen weights the adapters were trained on."""
    return {k: v for k, v in model.state_dict().items() if ADAPTER_KEY not in k}
