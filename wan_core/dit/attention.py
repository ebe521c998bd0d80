"""Self- and cross-attention layers of the Wan block (docs/wan_spec.md section 2.4): q/k RMSNorm over the full width."""
from __future__ import annotations

import torch
import torch.nn as nn

from ..attention.dispatch import AttentionCall, AttentionDispatch
from .rope import apply_rope


def heads_first(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``[B, L, N*d] -> [B, N, L, d]`` contiguous (the attention dispatch layout)."""
    return x.unflatten(-1, (num_heads, -1)).transpose(1, 2).contiguous()


def heads_last(x: torch.Tensor) -> torch.Tensor:
    """``[B, N, L, d] -> [B, L, N*d]``."""
    return x.transpose(1, 2).flatten(2)


class RMSNorm(nn.Module):
    """``y / sqrt(mean(y^2) + eps) * weight`` over the last dim, statistics and product in float32."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()
        return y.to(x.dtype)


class _Projections(nn.Module):
    """The parameters both attentions share: q, k, v, o with bias and the q/k RMSNorms (official names)."""

    def __init__(self, dim: int, num_heads: int, qk_norm: bool = True, eps: float = 1e-6):
        super().__init__()
        self.num_heads = num_heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)
        self.norm_q = RMSNorm(dim, eps) if qk_norm else nn.Identity()
        self.norm_k = RMSNorm(dim, eps) if qk_norm else nn.Identity()


class SelfAttention(_Projections):
    """``self_attn``: q/k RMSNorm across heads, 3D RoPE on q and k, no mask."""

    def forward(self, h: torch.Tensor, freqs: torch.Tensor, attn: AttentionDispatch, layer: int) -> torch.Tensor:
        """``h [B, L, D]`` (weight dtype), ``freqs [L, d/2]`` complex RoPE rotations -> ``[B, L, D]``."""
        n = self.num_heads
        q = apply_rope(self.norm_q(self.q(h)).unflatten(-1, (n, -1)), freqs)  # [B, N, L, d]
        k = apply_rope(self.norm_k(self.k(h)).unflatten(-1, (n, -1)), freqs)
        v = heads_first(self.v(h), n)
        out = attn(q, k, v, AttentionCall("self", layer))
        return self.o(heads_last(out))


class CrossAttention(_Projections):
    """``cross_attn``: queries from the video tokens, keys/values from the 512 context rows; no RoPE, no mask."""

    def text_kv(self, ctx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of the embedded text: ``ctx [B, 512, D]`` -> ``(k, v)``, each ``[B, N, 512, d]``.

        They depend on the text only, so a sampler may compute them once per prompt and pass them back as
        ``ctx`` at every step (``wan_core.cache``'s text-KV cache); the result is the same computation."""
        n = self.num_heads
        return heads_first(self.norm_k(self.k(ctx)), n), heads_first(self.v(ctx), n)

    def forward(self, h: torch.Tensor, ctx, attn: AttentionDispatch, layer: int) -> torch.Tensor:
        """``h [B, L, D]``, ``ctx [B, 512, D]`` or its precomputed ``text_kv(ctx)`` -> ``[B, L, D]``."""
        n = self.num_heads
        q = heads_first(self.norm_q(self.q(h)), n)
        k, v = ctx if isinstance(ctx, tuple) else self.text_kv(ctx)
        out = attn(q, k, v, AttentionCall("cross", layer))
        return self.o(heads_last(out))
