"""WF-VAE streaming through time and spatial tiling: encode frame 0 then ``t`` frames at a time, decode one latent
frame at a time, each call carrying its layers' frames in a StreamState (memory flat in length); tiles of the
latent grid blended linearly (memory flat in area), as the Wan VAE does (``wan_core.vae.tiling``).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ..numerics import check_finite
from ..progress import InterruptFn, ProgressCounter, check_interrupt
from ..vae.tiling import blend_weights, tile_grid
from .causal_conv import StreamState
from .model import WFVAEModel

# sink(batch_index, first_frame, frames [1, C, t, h, w])
SinkFn = Callable[[int, int, torch.Tensor], None]


def stream_encode(model: WFVAEModel, video: torch.Tensor, sink: SinkFn, progress: ProgressCounter | None = None,
                  interrupt: InterruptFn | None = None) -> None:
    """``video`` [B, 3, 1 + k t, H, W] -> ``sink(b, i, mean [1, latent, 1, H/8, W/8])`` for latent frame i."""
    p = next(model.parameters())
    tf = model.config.temporal_factor
    starts = [0, *range(1, video.shape[2], tf)]
    for b in range(video.shape[0]):
        state = StreamState()
        for i, t0 in enumerate(starts):
            check_interrupt(interrupt, "WF-VAE encode")
            x = video[b:b + 1, :, t0:1 if i == 0 else t0 + tf].to(device=p.device, dtype=p.dtype)
            sink(b, i, model.encode_mean(x, state))
            if progress is not None:
                progress.step()


def stream_decode(model: WFVAEModel, z: torch.Tensor, sink: SinkFn, progress: ProgressCounter | None = None,
                  interrupt: InterruptFn | None = None, source: str = "<model>") -> None:
    """Raw latents ``z`` [B, latent, T', H', W'] -> ``sink(b, t, frames)`` with the video frames from frame t;
    the decoder holds one frame back per time upsampling until the next latent frame (or the last) arrives.
    Each chunk is checked for NaN/Inf as it comes (a check of the whole output would cost memory that grows
    with length and area)."""
    p = next(model.parameters())
    for b in range(z.shape[0]):
        state, done = StreamState(), 0
        for i in range(z.shape[2]):
            check_interrupt(interrupt, "WF-VAE decode")
            state.last = i == z.shape[2] - 1
            frames = model.decode(z[b:b + 1, :, i:i + 1].to(device=p.device, dtype=p.dtype), state)
            check_finite(frames, f"WF-VAE decode output of {source}", "the weights or the latents are corrupt")
            sink(b, done, frames)
            done += frames.shape[2]
            if progress is not None:
                progress.step()


def _tiles(rows, cols, scale: int):
    wy, wx = blend_weights(rows, scale), blend_weights(cols, scale)
    for (y0, y1), wr in zip(rows, wy):
        for (x0, x1), wc in zip(cols, wx):
            yield (y0, y1), (x0, x1), (wr[:, None] * wc[None, :]).to(torch.float32)


def tiled_decode(model: WFVAEModel, z: torch.Tensor, out: torch.Tensor, tile, overlap, progress=None,
                 interrupt: InterruptFn | None = None, source: str = "<model>") -> torch.Tensor:
    """Decode ``z`` tile by tile (latent units) into the zero-filled ``out`` [B, 3, T, 8H', 8W'], blending the
    overlaps linearly (weights sum to one: a single tile is the untiled decode)."""
    rows, cols = tile_grid(z.shape[3], z.shape[4], tile, overlap)
    prog = ProgressCounter(progress, z.shape[0] * z.shape[2] * len(rows) * len(cols))
    for (y0, y1), (x0, x1), w in _tiles(rows, cols, 8):
        w = w.to(out.device)

        def sink(b: int, t: int, frames: torch.Tensor, y0=y0, y1=y1, x0=x0, x1=x1, w=w) -> None:
            dst = out[b:b + 1, :, t:t + frames.shape[2], 8 * y0:8 * y1, 8 * x0:8 * x1]
            dst.addcmul_(frames.to(device=out.device, dtype=out.dtype), w)

        stream_decode(model, z[:, :, :, y0:y1, x0:x1], sink, prog, interrupt, source)
    return out


def tiled_encode(model: WFVAEModel, video: torch.Tensor, out: torch.Tensor, tile, overlap, progress=None,
                 interrupt: InterruptFn | None = None) -> torch.Tensor:
    """Encode ``video`` tile by tile into the zero-filled ``out`` [B, latent, T', H/8, W/8], blending on the
    latent grid."""
    rows, cols = tile_grid(out.shape[3], out.shape[4], tile, overlap)
    prog = ProgressCounter(progress, video.shape[0] * out.shape[2] * len(rows) * len(cols))
    for (y0, y1), (x0, x1), w in _tiles(rows, cols, 1):
        w = w.to(out.device)

        def sink(b: int, i: int, mu: torch.Tensor, y0=y0, y1=y1, x0=x0, x1=x1, w=w) -> None:
            out[b:b + 1, :, i:i + 1, y0:y1, x0:x1].addcmul_(mu.to(device=out.device, dtype=out.dtype), w)

        stream_encode(model, video[:, :, :, 8 * y0:8 * y1, 8 * x0:8 * x1], sink, prog, interrupt)
    return out
