"""The WF-VAE network: encoder + decoder under the official parameter names (``encoder.*``, ``decoder.*``).

The wavelet filters are constants here (the official files store the forward ones as frozen parameters and
the inverse ones as buffers; EMA files lack them): ``loader.py`` checks and drops them.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .causal_conv import StreamState
from .config import WFVAEConfig
from .decoder import Decoder
from .encoder import Encoder


class WFVAEModel(nn.Module):
    def __init__(self, cfg: WFVAEConfig):
        super().__init__()
        self.config = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)

    def encode_mean(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        """[B, 3, T, H, W] -> the posterior mean [B, latent, T', H/8, W/8] (raw: no scale, no shift)."""
        return self.encoder(x, state)[:, :self.config.latent_dim]

    def decode(self, z: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        """Raw latents [B, latent, T', H', W'] -> video [B, 3, T, 8H', 8W'] (not clamped)."""
        return self.decoder(z, state)


def build_model(cfg: WFVAEConfig, device: torch.device | str = "cpu") -> WFVAEModel:
    with torch.device(device):
        return WFVAEModel(cfg)
