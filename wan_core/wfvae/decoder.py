"""WF-VAE decoder: two upsampling stages and the energy flow back out: the last channels of the middle and of
the level-2 stage are turned into wavelet coefficients, inverted, and added to the next level's low band
(official parameter names).

``forward(z [B, latent, T', H', W'], state) -> [B, 3, 1 + t(T'-1), 8H', 8W']`` (not clamped). Streaming takes any
chunking of the latent frames; ``FrameAligner`` pairs the energy-flow frames with the main path's, which the
time upsampling delays by one frame.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .blocks import Chain, ChannelNorm, FrameConv2d, ResBlock3D
from .causal_conv import CausalConv3d, StreamState
from .config import WFVAEConfig
from .encoder import _mid
from .haar import InverseHaar2D, InverseHaar3D
from .resample import Upsample2D, Upsample3D


class FrameAligner(nn.Module):
    """Pairs two frame streams of one call: returns as many leading frames of each as both have, keeping the
    surplus of the one ahead for the next chunk. Whole-sequence calls pass equal lengths through."""

    def forward(self, a: torch.Tensor, b: torch.Tensor, state: StreamState | None):
        if state is None:
            return a, b
        held = state.get(self)
        if held is not None:
            a, b = torch.cat([held[0], a], dim=2), torch.cat([held[1], b], dim=2)
        n = min(a.shape[2], b.shape[2])
        state.set(self, (a[:, :, n:], b[:, :, n:]))
        return a[:, :, :n], b[:, :, :n]


def _connect(ef: int, out: int, n: int) -> Chain:
    return Chain([*(ResBlock3D(ef, ef) for _ in range(n)), FrameConv2d(ef, out, 3, padding=1)])


class Decoder(nn.Module):
    def __init__(self, cfg: WFVAEConfig):
        super().__init__()
        b, ef, n = cfg.base_channels, cfg.decoder_energy_flow, cfg.decoder_num_resblocks
        three_d = cfg.temporal_factor == 8
        self.energy_flow = ef
        self.conv_in = CausalConv3d(cfg.latent_dim, 4 * b, 3, padding=1)
        self.mid = _mid(4 * b, 4 * b, 4 * b + ef, cfg.use_attention)
        self.up2 = Chain([*(ResBlock3D(4 * b, 4 * b) for _ in range(n)), Upsample3D(4 * b, cfg.t_interpolation),
                          ResBlock3D(4 * b, 4 * b + ef)])
        self.up1 = Chain([*(ResBlock3D(4 * b if i == 0 else 2 * b, 2 * b) for i in range(n)),
                          Upsample3D(2 * b) if three_d else Upsample2D(2 * b), ResBlock3D(2 * b, 2 * b)])
        self.layer = Chain([ResBlock3D(2 * b, b), ResBlock3D(b, b)])
        self.connect_l1 = _connect(ef, cfg.l1_channels, cfg.connect_res_layer_num)
        self.connect_l2 = _connect(ef, 24, cfg.connect_res_layer_num)
        self.norm_out = ChannelNorm(b)
        self.conv_out = FrameConv2d(b, 24, 3, padding=1)
        self.inverse_wavelet_out = InverseHaar3D()
        self.inverse_wavelet_l1: nn.Module = InverseHaar3D() if three_d else InverseHaar2D()
        self.inverse_wavelet_l2 = InverseHaar3D()
        self.align_l2, self.align_l1 = FrameAligner(), FrameAligner()

    def forward(self, z: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        ef = self.energy_flow
        h = self.mid(self.conv_in(z, state), state)
        l2 = self.inverse_wavelet_l2(self.connect_l2(h[:, -ef:], state), state)
        h = self.up2(h[:, :-ef], state)
        l1_coeffs = self.connect_l1(h[:, -ef:], state)
        l2, l1_coeffs = self.align_l2(l2, l1_coeffs, state)
        l1_coeffs = torch.cat([l1_coeffs[:, :3] + l2, l1_coeffs[:, 3:]], dim=1)
        l1 = self.inverse_wavelet_l1(l1_coeffs, state)
        h = self.layer(self.up1(h[:, :-ef], state), state)
        h = self.conv_out(F.silu(self.norm_out(h)))
        l1, h = self.align_l1(l1, h, state)
        h = torch.cat([h[:, :3] + l1, h[:, 3:]], dim=1)
        return self.inverse_wavelet_out(h, state)
