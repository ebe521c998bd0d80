"""The Wan 2.2 VAE layers: 2x2 patchify, residual down/up stages with parameter-free shortcuts, encoder, decoder.

Implements docs/wan22.md section 3 (official names: Wan2.2 wan/modules/vae2_2.py ``Encoder3d`` / ``Decoder3d``).
Every layer takes the same ``state`` as the Wan 2.1 layers (None = whole sequence, a TemporalState = one time
chunk of a stream), so ``streaming.py`` and ``tiling.py`` drive both VAEs alike.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .blocks import ResidualBlock
from .causal_conv import CausalConv3d, TemporalState
from .config import VAEConfig
from .resample import Resample


def patchify(x: torch.Tensor, p: int) -> torch.Tensor:
    """[B, C, T, p*H, p*W] -> [B, C*p*p, T, H, W]; channel ``c*p*p + j*p + i`` holds pixel (row i, column j) of
    each p x p square (einops ``b c f (h q) (w r) -> b (c r q) f h w``: vae2_2.py lines 284-289)."""
    if p == 1:
        return x
    b, c, t, h, w = x.shape
    x = x.view(b, c, t, h // p, p, w // p, p)  # b c t h q w r
    return x.permute(0, 1, 6, 4, 2, 3, 5).reshape(b, c * p * p, t, h // p, w // p)


def unpatchify(x: torch.Tensor, p: int) -> torch.Tensor:
    """Inverse of :func:`patchify`: [B, C*p*p, T, H, W] -> [B, C, T, p*H, p*W]."""
    if p == 1:
        return x
    b, cpp, t, h, w = x.shape
    c = cpp // (p * p)
    x = x.view(b, c, p, p, t, h, w)  # b c r q t h w
    return x.permute(0, 1, 4, 5, 3, 6, 2).reshape(b, c, t, h * p, w * p)


class SpaceTimeToChannelMean(nn.Module):
    """Shortcut of a downsampling stage (official ``AvgDown3D``, vae2_2.py lines 312-366): fold ``ft`` frames and
    ``fs x fs`` pixels into channels, then average groups of channels down to ``out_dim``.

    Time is grouped from the end of the sequence: the whole sequence gets ``(ft - T % ft) % ft`` zero frames in
    front. Streaming, the first chunk gets ``ft - 1`` (the same for the 1 + ft*n frames every stage sees) and
    incomplete groups wait in ``state`` for the next chunk, so the frames out match the main path's.
    """

    def __init__(self, in_dim: int, out_dim: int, ft: int, fs: int):
        super().__init__()
        self.in_dim, self.out_dim, self.ft, self.fs = in_dim, out_dim, ft, fs
        if in_dim * ft * fs * fs % out_dim:
            raise ValueError(f"in_dim {in_dim} x factor {ft * fs * fs} is not a multiple of out_dim {out_dim}")
        self.group = in_dim * ft * fs * fs // out_dim

    def forward(self, x: torch.Tensor, state: TemporalState | None = None) -> torch.Tensor:
        ft, fs = self.ft, self.fs
        if ft > 1:
            if state is None:
                pad = (ft - x.shape[2] % ft) % ft
            else:
                prev = state.get(self)
                pad = ft - 1 if prev is None else 0
                if prev is not None:
                    x = torch.cat([prev, x], dim=2)
            if pad:
                x = F.pad(x, (0, 0, 0, 0, pad, 0))
            n = x.shape[2] // ft
            if state is not None:
                state.set(self, x[:, :, n * ft:].clone())
            x = x[:, :, : n * ft]
        b, c, t, h, w = x.shape
        x = x.reshape(b, c, t // ft, ft, h // fs, fs, w // fs, fs).permute(0, 1, 3, 5, 7, 2, 4, 6)
        x = x.reshape(b, self.out_dim, self.group, t // ft, h // fs, w // fs)
        return x.mean(dim=2)


class ChannelToSpaceTimeCopy(nn.Module):
    """Shortcut of an upsampling stage (official ``DupUp3D``, vae2_2.py lines 369-416): repeat each channel, then
    unfold channels into ``ft`` frames and ``fs x fs`` pixels; the stream's first chunk (and the whole sequence)
    drops its first ``ft - 1`` frames, as the main path lets frame 0 through without doubling it."""

    def __init__(self, in_dim: int, out_dim: int, ft: int, fs: int):
        super().__init__()
        self.in_dim, self.out_dim, self.ft, self.fs = in_dim, out_dim, ft, fs
        if out_dim * ft * fs * fs % in_dim:
            raise ValueError(f"out_dim {out_dim} x factor {ft * fs * fs} is not a multiple of in_dim {in_dim}")
        self.repeats = out_dim * ft * fs * fs // in_dim

    def forward(self, x: torch.Tensor, state: TemporalState | None = None) -> torch.Tensor:
        ft, fs = self.ft, self.fs
        first = state is None or state.get(self) is None
        if state is not None:
            state.set(self, True)
        b, _, t, h, w = x.shape
        x = x.repeat_interleave(self.repeats, dim=1).view(b, self.out_dim, ft, fs, fs, t, h, w)
        x = x.permute(0, 1, 5, 2, 6, 3, 7, 4).reshape(b, self.out_dim, t * ft, h * fs, w * fs)
        return x[:, :, ft - 1:] if first and ft > 1 else x


class DownStage(nn.Module):
    """Encoder stage (official ``Down_ResidualBlock``): ``num_res_blocks`` residual blocks and an optional
    (2d or 3d) downsampling in ``downsamples``, plus the parameter-free shortcut of the stage input."""

    def __init__(self, in_dim: int, out_dim: int, num_res_blocks: int, temporal: bool, down: bool):
        super().__init__()
        layers: list[nn.Module] = []
        d = in_dim
        for _ in range(num_res_blocks):
            layers.append(ResidualBlock(d, out_dim))
            d = out_dim
        if down:
            layers.append(Resample(out_dim, "downsample3d" if temporal else "downsample2d"))
        self.downsamples = nn.ModuleList(layers)
        self.avg_shortcut = SpaceTimeToChannelMean(in_dim, out_dim, 2 if temporal else 1, 2 if down else 1)

    def forward(self, x: torch.Tensor, state: TemporalState | None = None) -> torch.Tensor:
        shortcut = self.avg_shortcut(x, state)
        for layer in self.downsamples:
            x = layer(x, state)
        return x.add_(shortcut)


class UpStage(nn.Module):
    """Decoder stage (official ``Up_ResidualBlock``): ``num_res_blocks + 1`` residual blocks and an optional
    upsampling whose conv keeps the width (unlike Wan 2.1's, which halves it), plus the parameter-free
    shortcut of the stage input when it upsamples."""

    def __init__(self, in_dim: int, out_dim: int, num_blocks: int, temporal: bool, up: bool):
        super().__init__()
        layers: list[nn.Module] = []
        d = in_dim
        for _ in range(num_blocks):
            layers.append(ResidualBlock(d, out_dim))
            d = out_dim
        if up:
            layers.append(Resample(out_dim, "upsample3d" if temporal else "upsample2d", out_dim=out_dim))
        self.upsamples = nn.ModuleList(layers)
        self.avg_shortcut = ChannelToSpaceTimeCopy(in_dim, out_dim, 2 if temporal else 1, 2) if up else None

    def forward(self, x: torch.Tensor, state: TemporalState | None = None) -> torch.Tensor:
        shortcut = self.avg_shortcut(x, state) if self.avg_shortcut is not None else None
        for layer in self.upsamples:
            x = layer(x, state)
        return x if shortcut is None else x.add_(shortcut)


def build_encoder_layers(cfg: VAEConfig) -> nn.ModuleList:
    """``encoder.downsamples``: one DownStage per ``dim_mult`` entry, the last without downsampling
    (vae2_2.py ``Encoder3d.__init__``)."""
    dims = cfg.encoder_dims
    last = len(cfg.dim_mult) - 1
    return nn.ModuleList(
        DownStage(i_d, o_d, cfg.num_res_blocks, i < last and cfg.temporal_downsample[i], i != last)
        for i, (i_d, o_d) in enumerate(zip(dims[:-1], dims[1:]))
    )


def build_decoder_layers(cfg: VAEConfig) -> nn.ModuleList:
    """``decoder.upsamples``: one UpStage per ``dim_mult`` entry, the last without upsampling
    (vae2_2.py ``Decoder3d.__init__``)."""
    dims = cfg.decoder_dims
    last = len(cfg.dim_mult) - 1
    return nn.ModuleList(
        UpStage(i_d, o_d, cfg.num_res_blocks + 1, i < last and cfg.temporal_upsample[i], i != last)
        for i, (i_d, o_d) in enumerate(zip(dims[:-1], dims[1:]))
    )


def conv_in(cfg: VAEConfig, out_dim: int) -> CausalConv3d:
    """The encoder's first conv on the patchified input (3 * p * p channels)."""
    return CausalConv3d(cfg.in_channels * cfg.patch_size ** 2, out_dim, 3, padding=1)
