"""WF-VAE encoder: a 3-D Haar step in, two downsampling stages, and the energy flow that feeds the low-frequency
wavelet bands of the input straight into the deeper stages (official parameter names).

``forward(x [B, 3, T, H, W], state) -> [B, 2 * latent, 1 + (T-1)/t, H/8, W/8]`` (mean, then log-variance).
Streaming: the first chunk is frame 0 alone, later chunks hold ``t`` frames (4 or 8).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .blocks import Chain, ChannelNorm, FrameAttention, FrameConv2d, ResBlock2D, ResBlock3D
from .causal_conv import CausalConv3d, StreamState
from .config import WFVAEConfig
from .haar import Haar2D, Haar3D
from .resample import Downsample2D, Downsample3D


def _mid(cin: int, width: int, out: int, attention: bool) -> Chain:
    """The middle: residual block, attention (optional), residual block."""
    layers: list[nn.Module] = [ResBlock3D(cin, width), ResBlock3D(width, out)]
    if attention:
        layers.insert(1, FrameAttention(width))
    return Chain(layers)


class Encoder(nn.Module):
    def __init__(self, cfg: WFVAEConfig):
        super().__init__()
        b, ef, n = cfg.base_channels, cfg.encoder_energy_flow, cfg.encoder_num_resblocks
        three_d = cfg.temporal_factor == 8
        self.down1 = Chain([FrameConv2d(24, b, 3, padding=1), *(ResBlock2D(b, b) for _ in range(n)),
                            Downsample3D(b) if three_d else Downsample2D(b)])
        self.down2 = Chain([FrameConv2d(b + ef, 2 * b, 3, padding=1), *(ResBlock3D(2 * b, 2 * b) for _ in range(n)),
                            Downsample3D(2 * b)])
        self.connect_l1 = FrameConv2d(cfg.l1_channels, ef, 3, padding=1)
        self.connect_l2 = FrameConv2d(24, ef, 3, padding=1)
        self.mid = _mid(2 * b + ef, 4 * b, 4 * b, cfg.use_attention)
        self.norm_out = ChannelNorm(4 * b)
        self.conv_out = CausalConv3d(4 * b, 2 * cfg.latent_dim, 3, padding=1)
        self.wavelet_in = Haar3D()
        self.wavelet_l1: nn.Module = Haar3D() if three_d else Haar2D()
        self.wavelet_l2 = Haar3D()

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        coeffs = self.wavelet_in(x, state)
        l1_coeffs = self.wavelet_l1(coeffs[:, :3], state)
        l2 = self.connect_l2(self.wavelet_l2(l1_coeffs[:, :3], state))
        h = torch.cat([self.down1(coeffs, state), self.connect_l1(l1_coeffs)], dim=1)
        h = torch.cat([self.down2(h, state), l2], dim=1)
        h = self.mid(h, state)
        return self.conv_out(F.silu(self.norm_out(h)), state)
