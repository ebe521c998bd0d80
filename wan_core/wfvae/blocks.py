"""WF-VAE building blocks: channel LayerNorm, per-frame 2-D convs, 2-D and causal 3-D residual blocks, per-frame
single-head attention, and ``Chain`` (a sequence that passes the stream state down). Every forward takes
``(x [B, C, T, H, W], state)``; 2-D layers work on each frame alone and ignore the state.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .causal_conv import CausalConv3d, StreamState

EPS = 1e-6


class ChannelNorm(nn.Module):
    """LayerNorm over the channel dim of [B, C, ...] (eps 1e-6, affine; parameters in ``.norm``)."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.LayerNorm(channels, eps=EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.movedim(1, -1)).movedim(-1, 1)


def per_frame(fn, x: torch.Tensor) -> torch.Tensor:
    """Apply a 2-D ``fn`` ([N, C, H, W] -> [N, C', H', W']) to every frame of [B, C, T, H, W]."""
    b, c, t, h, w = x.shape
    y = fn(x.transpose(1, 2).reshape(b * t, c, h, w))
    return y.reshape(b, t, *y.shape[1:]).transpose(1, 2)


class FrameConv2d(nn.Conv2d):
    """``nn.Conv2d`` on each frame of a video [B, C, T, H, W]."""

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        return per_frame(super().forward, x)


class ResBlock2D(nn.Module):
    """Per-frame residual block: norm, SiLU, 3x3 conv, norm, SiLU, 3x3 conv; 1x1 ``nin_shortcut`` when widths differ."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.norm1, self.norm2 = ChannelNorm(cin), ChannelNorm(cout)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.nin_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def _frames(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv2(F.silu(self.norm2(self.conv1(F.silu(self.norm1(x))))))
        return (x if self.nin_shortcut is None else self.nin_shortcut(x)) + h

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        return per_frame(self._frames, x)


class ResBlock3D(nn.Module):
    """Causal residual block: norm, SiLU, causal 3x3x3 conv, norm, SiLU, causal 3x3x3 conv; causal 1x1x1
    ``nin_shortcut`` when widths differ."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.norm1, self.norm2 = ChannelNorm(cin), ChannelNorm(cout)
        self.conv1 = CausalConv3d(cin, cout, 3, padding=1)
        self.conv2 = CausalConv3d(cout, cout, 3, padding=1)
        self.nin_shortcut = CausalConv3d(cin, cout, 1) if cin != cout else None

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)), state)
        h = self.conv2(F.silu(self.norm2(h)), state)
        return (x if self.nin_shortcut is None else self.nin_shortcut(x, state)) + h


class FrameAttention(nn.Module):
    """Single-head self-attention over the positions of each frame (scale 1/sqrt(C)), residual."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = ChannelNorm(channels)
        self.q, self.k, self.v, self.proj_out = (CausalConv3d(channels, channels, 1) for _ in range(4))

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        h = self.norm(x)
        b, c, t, hh, ww = x.shape

        def tokens(conv: CausalConv3d) -> torch.Tensor:  # [B*T, 1, H*W, C]
            return conv(h).permute(0, 2, 3, 4, 1).reshape(b * t, 1, hh * ww, c)

        out = F.scaled_dot_product_attention(tokens(self.q), tokens(self.k), tokens(self.v))
        out = out.reshape(b, t, hh, ww, c).permute(0, 4, 1, 2, 3)
        return x + self.proj_out(out)


class Chain(nn.ModuleList):
    """Modules applied in order, each with the stream state (official ``nn.Sequential`` indices)."""

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        for m in self:
            x = m(x, state)
        return x
