"""WF-VAE's causal 3-D convolution: the first frame is repeated in front (not zeros as in the Wan VAE), and the
per-call stream state that lets every layer run chunk by chunk through time.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..vae.causal_conv import TemporalState, conv3d


class StreamState(TemporalState):
    """The per-layer carry of ONE streamed encode/decode call (``None`` in its place: the whole sequence at once).

    ``last`` is set by the driver before the final chunk: the decoder's trilinear time upsampling holds back one
    output frame until it knows its right neighbour, and the final chunk releases it.
    """

    __slots__ = ("last",)

    def __init__(self) -> None:
        super().__init__()
        self.last = False


def is_last(state: StreamState | None) -> bool:
    return state is None or state.last


class CausalConv3d(nn.Module):
    """[B, C_in, T, H, W] -> [B, C_out, T', H', W']: ``kernel_t - 1`` copies of the first frame in front, none
    behind; H/W padded with zeros. Streaming keeps the input frames the next output window starts with, so a
    stride-2 layer needs chunks (after the first) of even length. Parameters live in ``.conv`` (official names).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 bias: bool = True):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, stride=stride, padding=(0, padding, padding),
                              bias=bias)
        self.front = kernel_size - 1

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        prev = None if state is None else state.get(self)
        if self.front:
            pad = x[:, :, :1].expand(-1, -1, self.front, -1, -1) if prev is None else prev
            x = torch.cat([pad, x], dim=2)
        kt, st = self.conv.kernel_size[0], self.conv.stride[0]
        if state is not None and self.front:
            done = ((x.shape[2] - kt) // st + 1) * st  # where the next chunk's first window starts
            state.set(self, x[:, :, done:].clone())
        return conv3d(x, self.conv.weight, self.conv.bias, self.conv.stride, self.conv.padding)
