"""VAE building blocks: channel RMS norm, residual block, per-frame attention block.

Implements docs/wan_spec.md section 3.1 (RMS_norm, ResidualBlock, AttentionBlock).
"""
from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from .causal_conv import CausalConv3d, TemporalState

_HALF = (torch.float16, torch.bfloat16)


class RMSNorm(nn.Module):
    """``y = x / max(||x||_2 over channels, 1e-12) * sqrt(C) * gamma`` (no epsilon inside the root, no bias).

    ``x``: [B, C, T, H, W] (``images=False``, gamma [C,1,1,1]) or [N, C, H, W] (``images=True``, gamma [C,1,1]).
    The norm is computed in float32 for half-precision inputs.
    """

    def __init__(self, dim: int, images: bool = False):
        super().__init__()
        self.scale = math.sqrt(dim)
        self.gamma = nn.Parameter(torch.empty((dim, 1, 1) if images else (dim, 1, 1, 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype in _HALF:
            norm = torch.linalg.vector_norm(x, dim=1, keepdim=True, dtype=torch.float32).clamp_min_(1e-12)
            return x * (norm.reciprocal_().to(x.dtype)) * (self.gamma * self.scale).to(x.dtype)
        norm = torch.linalg.vector_norm(x, dim=1, keepdim=True).clamp_min_(1e-12)
        return x / norm * (self.gamma * self.scale)

    def write(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``forward(x)`` written into ``out`` (same values, no temporaries of x's size); no autograd."""
        if x.dtype in _HALF:
            norm = torch.linalg.vector_norm(x, dim=1, keepdim=True, dtype=torch.float32).clamp_min_(1e-12)
            torch.mul(x, norm.reciprocal_().to(x.dtype), out=out)
            return out.mul_((self.gamma * self.scale).to(x.dtype))
        norm = torch.linalg.vector_norm(x, dim=1, keepdim=True).clamp_min_(1e-12)
        torch.div(x, norm, out=out)
        return out.mul_(self.gamma * self.scale)


def _needs_grad(x: torch.Tensor, module: nn.Module) -> bool:
    return torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in module.parameters()))


def norm_silu_conv(norm: RMSNorm, conv: CausalConv3d, x: torch.Tensor, state: TemporalState | None) -> torch.Tensor:
    """``conv(silu(norm(x)), state)``. Without autograd the activation is written straight into the conv's
    time window: the same values, without a separate activation tensor or a concatenation copy."""
    if _needs_grad(x, conv) or not conv.front:
        return conv(F.silu(norm(x), inplace=True), state)
    window, frames = conv.window(x, state)
    F.silu(norm.write(x, frames), inplace=True)
    return conv.convolve(window, state)


class ResidualBlock(nn.Module):
    """``residual(x) + shortcut(x)``; residual = [norm, SiLU, conv3, norm, SiLU, (dropout), conv3].

    ``x``: [B, in_dim, T, H, W] -> [B, out_dim, T, H, W]. Parameter names follow the official
    ``residual.{0,2,3,6}`` / ``shortcut`` indices (index 1, 4, 5 hold no parameters).
    """

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.residual = nn.ModuleList([
            RMSNorm(in_dim), nn.SiLU(), CausalConv3d(in_dim, out_dim, 3, padding=1),
            RMSNorm(out_dim), nn.SiLU(), nn.Identity(),  # dropout is 0 in every released Wan VAE
            CausalConv3d(out_dim, out_dim, 3, padding=1),
        ])
        self.shortcut = CausalConv3d(in_dim, out_dim, 1) if in_dim != out_dim else None

    def forward(self, x: torch.Tensor, state: TemporalState | None = None) -> torch.Tensor:
        r = self.residual  # typed views of the checkpoint-indexed layers (ModuleList indexing gives Module)
        norm1, conv1 = cast(RMSNorm, r[0]), cast(CausalConv3d, r[2])
        norm2, conv2 = cast(RMSNorm, r[3]), cast(CausalConv3d, r[6])
        h = norm_silu_conv(norm1, conv1, x, state)
        if _needs_grad(h, conv2):
            h = conv2(F.silu(norm2(h), inplace=True), state)
        else:  # as norm_silu_conv, and h is released before the convolution
            window, frames = conv2.window(h, state)
            F.silu(norm2.write(h, frames), inplace=True)
            del h
            h = conv2.convolve(window, state)
        return h.add_(self.shortcut(x) if self.shortcut is not None else x)


class AttentionBlock(nn.Module):
    """Single-head self-attention over the H*W positions of each frame (time folded into batch), + input.

    ``x``: [B, C, T, H, W] -> same shape. q, k, v are channel groups 0..C-1, C..2C-1, 2C..3C-1 of ``to_qkv``;
    scale 1/sqrt(C). Frames are processed ``frames_per_step`` at a time to bound memory.
    """

    frames_per_step = 4

    def __init__(self, dim: int):
        super().__init__()
        self.norm = RMSNorm(dim, images=True)
        self.to_qkv = nn.Conv2d(dim, dim * 3, 1)
        self.proj = nn.Conv2d(dim, dim, 1)

    def _frames(self, x: torch.Tensor) -> torch.Tensor:  # [N, C, H, W] -> [N, C, H, W]
        n, c, h, w = x.shape
        qkv = self.to_qkv(self.norm(x)).reshape(n, 3 * c, h * w).transpose(1, 2)  # [N, HW, 3C]
        q, k, v = qkv.unsqueeze(1).chunk(3, dim=-1)  # each [N, 1, HW, C]
        y = F.scaled_dot_product_attention(q, k, v)
        y = y.squeeze(1).transpose(1, 2).reshape(n, c, h, w)
        return self.proj(y)

    def forward(self, x: torch.Tensor, state: TemporalState | None = None) -> torch.Tensor:
        b, c, t, h, w = x.shape
        frames = x.transpose(1, 2).reshape(b * t, c, h, w)
        out = torch.cat([self._frames(f) for f in frames.split(self.frames_per_step)]) if b * t else frames
        return out.reshape(b, t, c, h, w).transpose(1, 2).add_(x)
