"""Feature-cache streaming through time: encode frame 0 then 4 frames at a time, decode one latent frame at a time.

Implements docs/wan_spec.md sections 3.2 and 3.4: every causal layer carries its frames between chunks in a
TemporalState created here for one call, so memory does not grow with the video length.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ..progress import InterruptFn, ProgressCounter, check_interrupt
from .causal_conv import TemporalState
from .model import WanVAEModel

# sink(batch_index, first_output_frame, frames [1, C, t, h, w]) stores one decoded / encoded chunk
SinkFn = Callable[[int, int, torch.Tensor], None]


def encode_chunks(frames: int, temporal_factor: int = 4) -> list[tuple[int, int]]:
    """Pixel-frame ranges of the encode chunks: [0, 1), [1, 5), [5, 9), ..."""
    bounds = [(0, 1)]
    while bounds[-1][1] + temporal_factor <= frames:
        start = bounds[-1][1]
        bounds.append((start, start + temporal_factor))
    return bounds


def stream_encode(
    model: WanVAEModel,
    video: torch.Tensor,
    sink: SinkFn,
    progress: ProgressCounter | None = None,
    interrupt: InterruptFn | None = None,
    piece_frames: int | None = 1,
) -> None:
    """Encode ``video`` [B, 3, T, H, W] (T = 4n+1) chunk by chunk; ``sink(b, i, mu)`` gets latent frame i.

    Chunks are moved to the model's device and dtype one at a time (the video may stay on the CPU);
    inside the network they go ``piece_frames`` frames at a time (``WanVAEModel.encode_chunk``).
    """
    p = next(model.parameters())
    bounds = encode_chunks(video.shape[2], model.config.temporal_factor)
    for b in range(video.shape[0]):
        state = TemporalState()
        for i, (t0, t1) in enumerate(bounds):
            check_interrupt(interrupt, "VAE encode")
            x = video[b:b + 1, :, t0:t1].to(device=p.device, dtype=p.dtype)
            mu = model.encode_chunk(x, state, piece_frames)
            del x
            sink(b, i, mu)
            del mu
            if progress is not None:
                progress.step()


def stream_decode(
    model: WanVAEModel,
    z: torch.Tensor,
    sink: SinkFn,
    progress: ProgressCounter | None = None,
    interrupt: InterruptFn | None = None,
    piece_frames: int | None = 1,
) -> None:
    """Decode raw latents ``z`` [B, 16, T', H', W'] one latent frame at a time; ``sink(b, t, frames)`` gets
    the clamped video frames starting at frame t (1 frame for latent 0, 4 for each later one); after each
    temporal upsampling the network continues ``piece_frames`` frames at a time (None: all together)."""
    p = next(model.parameters())
    tf = model.config.temporal_factor
    for b in range(z.shape[0]):
        state = TemporalState()
        for i in range(z.shape[2]):
            check_interrupt(interrupt, "VAE decode")
            x = z[b:b + 1, :, i:i + 1].to(device=p.device, dtype=p.dtype)
            frames = model.decode_chunk(x, state, piece_frames)
            del x
            sink(b, 0 if i == 0 else 1 + (i - 1) * tf, frames)
            del frames
            if progress is not None:
                progress.step()
