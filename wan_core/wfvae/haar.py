"""Haar wavelet transforms of WF-VAE: 3-D (causal in time) and 2-D (per frame), forward and inverse.

Channels are grouped by subband: output channel ``s * C + c`` is subband ``s`` of input channel ``c``. 3-D subband
order: all-low, W high, H high, H+W high, then the same four with T high. 2-D order: aa, ad (H high), da (W high),
dd. The 3-D filters are +-0.3536 (the official constant, not 1/sqrt(8)); the 2-D ones +-1/2.
"""
from __future__ import annotations

import functools

import torch
import torch.nn as nn
import torch.nn.functional as F

HAAR3D_GAIN = 0.3536


def _signs(axes: int) -> torch.Tensor:
    """[2**axes, 2, ..., 2] +-1 filters; filter ``s`` is high-pass along axis ``a`` where bit ``a`` of ``s`` is set,
    axes counted from the last (W) one."""
    filters = []
    for s in range(2 ** axes):
        f = torch.ones((2,) * axes)
        for a in range(axes):
            if s >> a & 1:
                f = f * torch.tensor([1.0, -1.0]).view([2 if i == axes - 1 - a else 1 for i in range(axes)])
        filters.append(f)
    return torch.stack(filters)


def haar3d_filters() -> torch.Tensor:
    """[8, 1, 2, 2, 2] (T, H, W) analysis = synthesis filters."""
    return (_signs(3) * HAAR3D_GAIN).unsqueeze(1)


def haar2d_filters() -> torch.Tensor:
    """[4, 1, 2, 2]: aa, ad (H high), da (W high), dd; the official order swaps the W- and H-high filters."""
    return (_signs(2)[[0, 2, 1, 3]] / 2).unsqueeze(1)


@functools.cache
def _cpu_filters(dims: int) -> torch.Tensor:
    with torch.device("cpu"):  # not the meta device a model may be built on
        return haar3d_filters() if dims == 3 else haar2d_filters()


def _filters(dims: int, like: torch.Tensor) -> torch.Tensor:
    """The constant filters on ``like``'s device and dtype (not parameters: the model's files may lack them)."""
    return _cpu_filters(dims).to(device=like.device, dtype=like.dtype)


def _by_subband(y: torch.Tensor, b: int) -> torch.Tensor:
    """[B*C, S, ...] -> [B, S*C, ...] subband-major."""
    bc, s = y.shape[:2]
    return y.reshape(b, bc // b, s, *y.shape[2:]).transpose(1, 2).reshape(b, s * (bc // b), *y.shape[2:])


def _by_channel(c: torch.Tensor, subbands: int) -> torch.Tensor:
    """[B, S*C, ...] -> [B*C, S, ...]."""
    b, sc = c.shape[:2]
    return c.reshape(b, subbands, sc // subbands, *c.shape[2:]).transpose(1, 2).reshape(-1, subbands, *c.shape[2:])


class Haar3D(nn.Module):
    """[B, C, T, H, W] -> [B, 8C, T', H/2, W/2]: the first frame of a sequence is paired with itself, later frames
    in pairs (so T = 1 + 2n gives T' = 1 + n). Streaming: chunks after the first must hold an even frame count."""

    def forward(self, x: torch.Tensor, state=None) -> torch.Tensor:
        first = state is None or state.get(self) is None
        if state is not None:
            state.set(self, True)
        b = x.shape[0]
        x = x.reshape(-1, 1, *x.shape[2:])
        if first:
            x = torch.cat([x[:, :, :1], x], dim=2)
        return _by_subband(F.conv3d(x, _filters(3, x), stride=2), b)


class InverseHaar3D(nn.Module):
    """[B, 8C, T', H, W] -> [B, C, 2T' - 1, 2H, 2W] (the first coefficient frame gives one frame, the others two)."""

    def forward(self, c: torch.Tensor, state=None) -> torch.Tensor:
        first = state is None or state.get(self) is None
        if state is not None:
            state.set(self, True)
        b = c.shape[0]
        y = F.conv_transpose3d(_by_channel(c, 8), _filters(3, c), stride=2)
        if first:
            y = y[:, :, 1:]
        return y.reshape(b, -1, *y.shape[2:])


class Haar2D(nn.Module):
    """[B, C, T, H, W] -> [B, 4C, T, H/2, W/2], each frame alone."""

    def forward(self, x: torch.Tensor, state=None) -> torch.Tensor:
        b, _, t, h, w = x.shape
        frames = x.transpose(1, 2).reshape(-1, 1, h, w)  # [(B T C), 1, H, W]
        y = F.conv2d(frames, _filters(2, x), stride=2)  # [(B T C), 4, H/2, W/2]
        y = y.reshape(b, t, -1, 4, h // 2, w // 2).transpose(2, 3).reshape(b, t, -1, h // 2, w // 2)
        return y.transpose(1, 2)


class InverseHaar2D(nn.Module):
    """[B, 4C, T, H, W] -> [B, C, T, 2H, 2W], each frame alone."""

    def forward(self, c: torch.Tensor, state=None) -> torch.Tensor:
        b, sc, t, h, w = c.shape
        frames = c.transpose(1, 2).reshape(b * t, 4, sc // 4, h, w).transpose(1, 2).reshape(-1, 4, h, w)
        y = F.conv_transpose2d(frames, _filters(2, c), stride=2)  # [(B T C), 1, 2H, 2W]
        return y.reshape(b, t, sc // 4, 2 * h, 2 * w).transpose(1, 2)
