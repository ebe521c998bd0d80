"""The Wan transformer block and output head (docs/wan_spec.md sections 2.4 and 2.6).

The residual stream stays float32 (the official code's gated updates run under fp32 autocast, which
promotes it); linear layers run in the weight dtype.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..attention.dispatch import AttentionDispatch
from .attention import CrossAttention, SelfAttention
from .image import ImageCrossAttention


def layer_norm(x: torch.Tensor, eps: float, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    """LayerNorm over the last dim in float32 (optionally affine)."""
    w = weight.float() if weight is not None else None
    b = bias.float() if bias is not None else None
    return F.layer_norm(x.float(), (x.shape[-1],), w, b, eps)


class WanBlock(nn.Module):
    """Self-attention (modulated), cross-attention (affine ``norm3``), FFN (modulated); gates in float32."""

    def __init__(self, dim: int, ffn_dim: int, num_heads: int, qk_norm: bool = True,
                 cross_attn_norm: bool = True, eps: float = 1e-6, image_text_len: int = 0):
        super().__init__()
        self.eps = eps
        self.self_attn = SelfAttention(dim, num_heads, qk_norm, eps)
        self.norm3 = nn.LayerNorm(dim, eps=eps, elementwise_affine=True) if cross_attn_norm else nn.Identity()
        # image_text_len > 0: Wan 2.1 I2V/FLF2V block, image rows before the text_len text rows (dit/image.py)
        self.cross_attn = (ImageCrossAttention(dim, num_heads, qk_norm, eps, image_text_len) if image_text_len
                           else CrossAttention(dim, num_heads, qk_norm, eps))
        self.ffn = nn.Sequential(nn.Linear(dim, ffn_dim), nn.GELU(approximate="tanh"), nn.Linear(ffn_dim, dim))
        self.modulation = nn.Parameter(torch.zeros(1, 6, dim))

    def forward(self, x: torch.Tensor, e0: torch.Tensor, ctx, freqs: torch.Tensor,
                attn: AttentionDispatch, layer: int, attention_cache=None) -> torch.Tensor:
        """``x [B, L, D]`` float32, ``e0 [B, 6, D]`` (or per token ``[B, L, 6, D]``) float32, ``ctx [B, 512, D]``
        (or the cross-attention's precomputed ``(k, v)``), ``freqs [L, d/2]`` RoPE -> ``[B, L, D]`` float32.

        ``attention_cache``: optional ``(layer, h, compute) -> out`` that may return a stored self-attention
        output instead of calling ``compute(h)`` (``wan_core.cache``'s attention cache)."""
        dtype = self.modulation.dtype  # the compute dtype (linear weights may be stored in fp8)

        def mod(i: int) -> torch.Tensor:
            """Term i of shift, scale, gate (self-attention), shift, scale, gate (FFN): ``[B, 1, D]``, or per token
            ``[B, L, D]`` (Wan 2.2 TI2V), made where it is used: per token, one ``[B, L, D]`` sum at a time
            instead of a ``[B, L, 6, D]`` copy per block."""
            m = self.modulation[:, i].float()  # [1, D]
            return (e0[:, i] + m).unsqueeze(1) if e0.dim() == 3 else e0[:, :, i] + m

        h = torch.addcmul(mod(0), layer_norm(x, self.eps), 1 + mod(1)).to(dtype)
        if attention_cache is None:
            y = self.self_attn(h, freqs, attn, layer)
        else:
            y = attention_cache(layer, h, lambda rows: self.self_attn(rows, freqs, attn, layer))
        x = torch.addcmul(x, y, mod(2))

        if isinstance(self.norm3, nn.LayerNorm):
            h = layer_norm(x, self.eps, self.norm3.weight, self.norm3.bias)
        else:
            h = x
        x = x + self.cross_attn(h.to(dtype), ctx, attn, layer)

        h = torch.addcmul(mod(3), layer_norm(x, self.eps), 1 + mod(4))
        return torch.addcmul(x, self.ffn(h.to(dtype)), mod(5))


class Head(nn.Module):
    """``head``: parameter-free LayerNorm modulated by the 256->D time embedding, then Linear(D -> 64)."""

    def __init__(self, dim: int, out_features: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.head = nn.Linear(dim, out_features)
        self.modulation = nn.Parameter(torch.zeros(1, 2, dim))

    def forward(self, x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """``x [B, L, D]`` float32, ``e [B, D]`` (or per token ``[B, L, D]``) float32 -> ``[B, L, out_features]``
        float32."""
        if e.dim() == 2:
            shift, scale = (self.modulation.float() + e[:, None]).unsqueeze(2).unbind(1)
        else:  # per-token timesteps: [1, 1, 2, D] + [B, L, 1, D]
            shift, scale = (self.modulation.float()[:, None] + e[:, :, None]).unbind(2)
        h = torch.addcmul(shift, layer_norm(x, self.eps), 1 + scale)
        return self.head(h.to(self.head.weight.dtype)).float()
