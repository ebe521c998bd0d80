"""WF-VAE resampling: 2x spatial down/up per frame, and 2x space-and-time down/up (causal; the upsampling looks
one frame ahead when it interpolates time linearly, which streaming handles by holding that frame back).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .blocks import per_frame
from .causal_conv import CausalConv3d, StreamState, is_last


class Downsample2D(nn.Module):
    """Each frame: zero pad right and bottom by one, 3x3 conv stride 2 (``.conv``)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, stride=2)

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        return per_frame(lambda f: self.conv(F.pad(f, (0, 1, 0, 1))), x)


class Downsample3D(nn.Module):
    """Zero pad right and bottom by one, causal 3x3x3 conv stride 2: T = 1 + 2n -> 1 + n frames."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = CausalConv3d(channels, channels, 3, stride=2)

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        return self.conv(F.pad(x, (0, 1, 0, 1)), state)


def _space_up(x: torch.Tensor) -> torch.Tensor:
    """Bilinear 2x of every frame (align_corners False), as the official ``(1, 2, 2)`` trilinear interpolation."""
    return per_frame(lambda f: F.interpolate(f, scale_factor=2.0, mode="bilinear"), x)


class Upsample2D(nn.Module):
    """Each frame: nearest 2x, 3x3 conv (``.conv``)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        return per_frame(lambda f: self.conv(F.interpolate(f, scale_factor=2.0, mode="nearest")), x)


class Upsample3D(nn.Module):
    """T -> 2T - 1 frames, 2x space, then a causal 3x3x3 conv. Frame 0 is upsampled in space only; frames
    1..T-1 are doubled in time as one sequence: ``nearest`` repeats each; ``trilinear`` (align_corners False)
    makes ``0.75 r_i + 0.25 r_{i-1}`` and ``0.75 r_i + 0.25 r_{i+1}``, clamped at the sequence ends.

    Streaming: the second output of a chunk's last frame needs the next chunk's first frame, so it is held back
    (with that frame) and emitted first in the next call, or by the final chunk (``state.last``) with the clamp.
    """

    def __init__(self, channels: int, t_interpolation: str = "trilinear"):
        super().__init__()
        self.conv = CausalConv3d(channels, channels, 3, padding=1)
        self.t_interpolation = t_interpolation

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        seen = None if state is None else state.get(self)  # None: frame 0 not seen yet; else the held frame or ()
        parts = []
        if seen is None:
            parts.append(_space_up(x[:, :, :1]))
            x, seen = x[:, :, 1:], ()
        doubled, held = self._double(x, seen, is_last(state))
        if state is not None:
            state.set(self, held)
        if doubled.shape[2]:
            parts.append(_space_up(doubled))
        return self.conv(torch.cat(parts, dim=2) if len(parts) > 1 else parts[0], state)

    def _double(self, r: torch.Tensor, held, last: bool):
        """Time-doubled frames for the new frames ``r`` (after frame 0) given the held frame; -> (frames, held)."""
        if self.t_interpolation == "nearest":
            return r.repeat_interleave(2, dim=2), ()
        prev = held[0] if held else None
        if not r.shape[2]:
            return (r if prev is None or not last else prev), (() if last else held)
        before = torch.cat([r[:, :, :1] if prev is None else prev, r[:, :, :-1]], dim=2)
        after = torch.cat([r[:, :, 1:], r[:, :, -1:]], dim=2)
        even, odd = 0.75 * r + 0.25 * before, 0.75 * r + 0.25 * after
        out = torch.stack([even, odd], dim=3).flatten(2, 3)
        if prev is not None:  # the held frame's second output, now that its right neighbour is here
            out = torch.cat([0.75 * prev + 0.25 * r[:, :, :1], out], dim=2)
        if last:
            return out, ()
        return out[:, :, :-1], (r[:, :, -1:],)
