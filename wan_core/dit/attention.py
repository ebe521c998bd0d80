"""Self- and cross-attention layers of the Wan block (wan_spec.md 2.4): q/k RMSNorm over the full width."""
from __future__ import annotations

import torch
import torch.nn as nn

from ..attention.dispatch import AttentionCall, AttentionDispatch
from .rope import apply_rope


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


class SelfAttention(nn.Module):
    """``self_attn``: q, k, v, o with bias; q/k RMSNorm across heads; 3D RoPE on q and k; no mask."""

    def __init__(self, dim: int, num_heads: int, qk_norm: bool = True, eps: float = 1e-6):
        super().__init__()
        self.num_heads = num_heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)
        self.norm_q = RMSNorm(dim, eps) if qk_norm else nn.Identity()
        self.norm_k = RMSNorm(dim, eps) if qk_norm else nn.Identity()

    def forward(self, h: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], attn: AttentionDispatch,
                layer: int) -> torch.Tensor:
        """``h [B, L, D]`` (weight dtype) -> ``[B, L, D]``."""
        n = self.num_heads
        q = self.norm_q(self.q(h)).unflatten(-1, (n, -1))
        k = self.norm_k(self.k(h)).unflatten(-1, (n, -1))
        v = self.v(h).unflatten(-1, (n, -1))
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        out = attn(q, k, v, AttentionCall("self", layer))
        return self.o(out.flatten(-2))


class CrossAttention(nn.Module):
    """``cross_attn``: queries from the video tokens, keys/values from the 512 context rows; no RoPE, no mask."""

    def __init__(self, dim: int, num_heads: int, qk_norm: bool = True, eps: float = 1e-6):
        super().__init__()
        self.num_heads = num_heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)
        self.norm_q = RMSNorm(dim, eps) if qk_norm else nn.Identity()
        self.norm_k = RMSNorm(dim, eps) if qk_norm else nn.Identity()

    def forward(self, h: torch.Tensor, ctx: torch.Tensor, attn: AttentionDispatch, layer: int) -> torch.Tensor:
        """``h [B, L, D]``, ``ctx [B, 512, D]`` -> ``[B, L, D]``."""
        n = self.num_heads
        q = self.norm_q(self.q(h)).unflatten(-1, (n, -1))
        k = self.norm_k(self.k(ctx)).unflatten(-1, (n, -1))
        v = self.v(ctx).unflatten(-1, (n, -1))
        out = attn(q, k, v, AttentionCall("cross", layer))
        return self.o(out.flatten(-2))
