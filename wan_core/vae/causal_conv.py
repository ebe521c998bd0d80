"""Causal 3-D convolution and the per-call temporal state that lets it stream through time.

Implements docs/wan_spec.md section 3.1 (CausalConv3d) and the cache rules of section 3.2.
"""
from __future__ import annotations

from typing import Any, cast

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


_ONES = (1, 1, 1)
CHANNELS_LAST = torch.channels_last_3d


def uses_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether ``conv3d`` runs this convolution on oneDNN (CPU float32, no gradient needed)."""
    return bool(x.device.type == "cpu" and x.dtype == torch.float32 and torch.backends.mkldnn.is_available()
                and torch.backends.mkldnn.enabled
                and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)))


def conv3d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride=_ONES,
           padding=(0, 0, 0)) -> torch.Tensor:
    """``F.conv3d`` that always takes oneDNN on CPU float32 when no gradient is needed.

    PyTorch's CPU dispatch sends a batch-1 convolution whose ``C * T * H`` is below 20480 to its im2col
    kernel, about 3x slower here: exactly the one-frame pieces of the streamed decode and the small
    tiles of a tiled one, while the whole-frame untiled convolutions go to oneDNN. Calling oneDNN directly
    keeps every layer on one backend whatever the tile or chunk size (so one tile still equals untiled).
    A channels-last input gives a channels-last output (oneDNN then needs no reordered copies).
    """
    if uses_onednn(x, weight):
        return torch.mkldnn_convolution(x, weight, bias, padding, stride, _ONES, 1)
    return F.conv3d(x, weight, bias, stride, padding)


def is_channels_last(x: torch.Tensor) -> bool:
    return x.is_contiguous(memory_format=CHANNELS_LAST) and not x.is_contiguous()


class CausalConv3d(nn.Conv3d):
    """Conv3d that is causal in time: ``2 * p_t`` zero frames in front, none behind; H/W padded symmetrically.

    ``x``: [B, C_in, T, H, W] -> [B, C_out, T', H', W'].
    With ``state`` (streaming), the last ``2 * p_t`` input frames of the previous chunk replace the zero
    frames, so chunk-by-chunk output equals the whole-sequence output. Layers with ``p_t = 0`` are stateless.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, **kw):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding, **kw)
        pad = cast(tuple[int, int, int], self.padding)  # nn.Conv3d stores an int/tuple padding as a 3-tuple
        self.front = 2 * pad[0]  # zero frames in front (whole sequence) / cached frames (streaming)
        self.spatial_padding = (0, pad[1], pad[2])

    def forward(self, x: torch.Tensor, state: TemporalState | None = None) -> torch.Tensor:
        if not self.front:
            return conv3d(x, self.weight, self.bias, self.stride, self.spatial_padding)
        window, frames = self.window(x, state)
        frames.copy_(x)
        return self.convolve(window, state)

    def window(self, x: torch.Tensor, state: TemporalState | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(window, frames)``: a new [B, C, front + T, H, W] buffer whose first ``front`` frames are the cached
        (or zero) ones, and the view of its last T frames, where the caller writes this chunk's input.

        Writing the input there directly (``norm_silu_conv`` writes its activation) replaces a concatenation
        and spares a separate input tensor. ``x`` only gives the shape, dtype and device.
        """
        b, c, t, h, w = x.shape
        fmt = CHANNELS_LAST if is_channels_last(x) else torch.contiguous_format
        window = torch.empty(b, c, self.front + t, h, w, dtype=x.dtype, device=x.device, memory_format=fmt)
        prev = None if state is None else state.get(self)
        if prev is None:
            window[:, :, :self.front].zero_()
        else:
            window[:, :, :self.front].copy_(prev)
        return window, window[:, :, self.front:]

    def convolve(self, window: torch.Tensor, state: TemporalState | None) -> torch.Tensor:
        """Convolve a filled ``window``; with a state its last ``front`` frames become the cache, written over
        the previous cache in place (a new one would briefly hold both)."""
        if state is not None:
            prev = state.get(self)
            last = window[:, :, -self.front:]
            if prev is None:
                state.set(self, last.clone())
            else:
                prev.copy_(last)
        return conv3d(window, self.weight, self.bias, self.stride, self.spatial_padding)

    def stream_taps(self, x: torch.Tensor, state: TemporalState) -> torch.Tensor:
        """Streaming form of a 3-tap causal conv that carries partial sums instead of input frames.

        ``y_t = b + W0 x_{t-2} + W1 x_{t-1} + W2 x_t``: after frame t the state keeps ``A = W0 x_{t-1} + W1 x_t``
        and ``C = W0 x_t`` (zero before frame 0), so ``y_{t+1} = A + W2 x_{t+1} + b``. The same sums in another
        order (equal up to float rounding); the state is 2 frames of the *output* channels, which for a
        wide-to-narrow conv (the decoder head, 96 -> 3) is a fraction of 2 input frames.
        """
        if self.kernel_size[0] != 3 or self.stride[0] != 1 or self.front != 2:
            raise ValueError("stream_taps needs a 3-tap causal conv with temporal stride 1")
        o, c, _, kh, kw = self.weight.shape
        # one spatial conv of every frame with the three taps stacked: channels [tap 0 | tap 1 | tap 2]
        w = self.weight.permute(2, 0, 1, 3, 4).reshape(3 * o, c, 1, kh, kw)
        taps = conv3d(x, w, None, _ONES, self.spatial_padding)  # [B, 3 * o, T, H', W']
        a, c_ = state.get(self) or (taps.new_zeros(taps[:, :o, 0].shape),) * 2
        bias = None if self.bias is None else self.bias.view(1, o, 1, 1)
        out = taps.new_empty(taps.shape[0], o, *taps.shape[2:])
        for t in range(taps.shape[2]):
            y = torch.add(a, taps[:, 2 * o:, t], out=out[:, :, t])
            if bias is not None:
                y.add_(bias)
            a, c_ = c_ + taps[:, o:2 * o, t], taps[:, :o, t].clone()
        state.set(self, (a, c_))
        return out

