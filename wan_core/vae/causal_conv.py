"""Causal 3-D convolution and the per-call temporal state that lets it stream through time.

Implements docs/wan_spec.md section 3.1 (CausalConv3d) and the cache rules of section 3.2.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F


class TemporalState:
    """What every causal layer carries from one time chunk to the next, for ONE encode or decode call.

    Created by the streaming loop, passed down through every layer, dropped when the call ends; layers
    keep nothing between calls. ``None`` in place of a state means "the whole sequence in one piece"
    (the full-sequence formulation of docs/wan_spec.md section 3.2).
    """

    __slots__ = ("_frames",)

    def __init__(self) -> None:
        self._frames: dict[int, Any] = {}

    def get(self, layer: nn.Module) -> Any:
        return self._frames.get(id(layer))

    def set(self, layer: nn.Module, value: Any) -> None:
        self._frames[id(layer)] = value

    def __len__(self) -> int:
        return len(self._frames)


class CausalConv3d(nn.Conv3d):
    """Conv3d that is causal in time: ``2 * p_t`` zero frames in front, none behind; H/W padded symmetrically.

    ``x``: [B, C_in, T, H, W] -> [B, C_out, T', H', W'].
    With ``state`` (streaming), the last ``2 * p_t`` input frames of the previous chunk replace the zero
    frames, so chunk-by-chunk output equals the whole-sequence output. Layers with ``p_t = 0`` are stateless.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, **kw):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding, **kw)
        self.front = 2 * self.padding[0]  # zero frames in front (whole sequence) / cached frames (streaming)
        self.spatial_padding = (0, self.padding[1], self.padding[2])

    def forward(self, x: torch.Tensor, state: TemporalState | None = None) -> torch.Tensor:
        if self.front:
            if state is None:
                x = F.pad(x, (0, 0, 0, 0, self.front, 0))
            else:
                prev = state.get(self)
                if prev is None:
                    prev = x.new_zeros(x.shape[0], x.shape[1], self.front, x.shape[3], x.shape[4])
                x = torch.cat([prev, x], dim=2)
                state.set(self, x[:, :, -self.front:].clone())
        return F.conv3d(x, self.weight, self.bias, self.stride, self.spatial_padding)
