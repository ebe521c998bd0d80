"""Spatial (and temporal) down/upsampling layers of the Wan VAE, with the first-frame rules.

Implements docs/wan_spec.md sections 3.1 (Resample) and 3.2 (temporal semantics: frame 0 passes through).
"""
from __future__ import annotations

from typing import cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from .causal_conv import CHANNELS_LAST, CausalConv3d, TemporalState, conv3d, uses_onednn

MODES = ("downsample2d", "downsample3d", "upsample2d", "upsample3d")


class _FrameConv(nn.Conv2d):
    """A Conv2d applied to every frame of a [B, C, T, H, W] video (as a 1xkxk Conv3d, no reshapes)."""

    def frames(self, x: torch.Tensor) -> torch.Tensor:
        padding = cast(tuple[int, int], self.padding)  # nn.Conv2d stores an int/tuple padding as a 2-tuple
        return conv3d(x, self.weight.unsqueeze(2), self.bias, (1,) + self.stride, (0,) + padding)


def interleave_pairs(y: torch.Tensor) -> torch.Tensor:
    """[B, 2C, T, H, W] -> [B, C, 2T, H, W]: frame 2t = channel group 0 at t, frame 2t+1 = group 1 at t."""
    b, c2, t, h, w = y.shape
    c = c2 // 2
    return y.view(b, 2, c, t, h, w).permute(0, 2, 3, 1, 4, 5).reshape(b, c, 2 * t, h, w)


class Resample(nn.Module):
    """Resample(dim, mode). ``x``: [B, dim, T, H, W] ->

    * ``downsample2d``: [B, dim, T, H/2, W/2] (pad right/bottom by 1, 3x3 conv, stride 2);
    * ``downsample3d``: the same, then in time ``[frame 0] ++ time_conv(frames)`` (kernel 3, stride 2, no
      padding; windows start at frames 0, 2, 4, ...): T -> 1 + (T-1)/2;
    * ``upsample2d``: [B, dim/2, T, 2H, 2W] (nearest x2, 3x3 conv);
    * ``upsample3d``: frame 0 passes through, frames 1.. go through the causal ``time_conv`` (dim -> 2*dim,
      2 zero frames in front, frame 0 never in a window) and each becomes two frames; then as upsample2d:
      T -> 1 + 2(T-1).

    With ``state`` the input is one time chunk of a stream; results equal the whole-sequence ones.
    """

    def __init__(self, dim: int, mode: str, out_dim: int | None = None):
        """``out_dim``: width of an upsampling conv (None: ``dim // 2`` as in Wan 2.1; Wan 2.2 keeps ``dim``)."""
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"unknown resample mode {mode!r}; expected one of {MODES}")
        self.mode = mode
        # set by the decoder on its last upsampling: on oneDNN the full-resolution layers after it then work
        # channels-last, which oneDNN convolves without reordered copies of input and output
        self.channels_last = False
        if mode.startswith("up"):
            conv = _FrameConv(dim, dim // 2 if out_dim is None else out_dim, 3, padding=1)
        else:
            conv = _FrameConv(dim, dim, 3, stride=2)
        # index 0 (upsample / zero pad) holds no parameters: keeps the official key `resample.1`
        self.resample = nn.ModuleList([nn.Identity(), conv])
        if mode == "upsample3d":
            self.time_conv = CausalConv3d(dim, dim * 2, (3, 1, 1), padding=(1, 0, 0))
        elif mode == "downsample3d":
            self.time_conv = CausalConv3d(dim, dim, (3, 1, 1), stride=(2, 1, 1), padding=0)

    def forward(self, x: torch.Tensor, state: TemporalState | None = None) -> torch.Tensor:
        if self.mode.startswith("up"):
            if self.mode == "upsample3d":
                x = self._time_upsample(x, state)
            return self._space_upsample(x, state)
        x = self._conv.frames(F.pad(x, (0, 1, 0, 1)))
        if self.mode == "downsample3d":
            x = self._time_downsample(x, state)
        return x

    def steps(self) -> list:
        """This layer as steps for ``model.run_steps``: an upsample3d is two, time then space, so a stream can
        continue frame by frame before the frames grow 4x in area (``forward`` = the steps in order)."""
        if self.mode == "upsample3d":
            return [self._time_upsample, self._space_upsample]
        return [self]

    @property
    def _conv(self) -> _FrameConv:
        return cast(_FrameConv, self.resample[1])

    def _space_upsample(self, x: torch.Tensor, state: TemporalState | None = None) -> torch.Tensor:
        conv = self._conv
        if self.channels_last and uses_onednn(x, conv.weight):
            x = x.contiguous(memory_format=CHANNELS_LAST)  # the interpolation and conv keep the format
        # nearest-exact x2 copies each value into a 2x2 block: exact in any dtype
        x = F.interpolate(x, scale_factor=(1.0, 2.0, 2.0), mode="nearest-exact")
        return conv.frames(x)

    def _time_upsample(self, x: torch.Tensor, state: TemporalState | None) -> torch.Tensor:
        first = state is None or state.get(self) is None
        if state is not None:
            state.set(self, True)
        head = None
        if first:  # frame 0 of the video passes through unchanged
            head, x = x[:, :, :1], x[:, :, 1:]
        if x.shape[2] == 0:
            return x if head is None else head  # a stream chunk with no frames gives no frames
        y = interleave_pairs(self.time_conv(x, state))
        return y if head is None else torch.cat([head, y], dim=2)

    def _time_downsample(self, x: torch.Tensor, state: TemporalState | None) -> torch.Tensor:
        prev = None if state is None else state.get(self)
        head = x[:, :, :1] if prev is None else None  # frame 0 passes through; it also opens window 0
        buf = x if prev is None else torch.cat([prev, x], dim=2)
        n = (buf.shape[2] - 1) // 2  # complete windows [2i, 2i+1, 2i+2]
        if state is not None:
            state.set(self, buf[:, :, 2 * n:].clone())
        if n == 0:
            return head if head is not None else buf[:, :, :0]
        y = self.time_conv(buf[:, :, : 2 * n + 1])
        return y if head is None else torch.cat([head, y], dim=2)
