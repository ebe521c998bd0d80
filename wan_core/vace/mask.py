"""The VACE mask channels: a pixel mask ``[B, 1, T, H, W]`` folded into 64 channels per latent pixel and resampled
to the latent frames (docs/vace_conditioning.md section 2).

The official recipe (Wan2.1 wan/vace.py ``vace_encode_masks``) keeps the mask values as given (a soft mask stays
soft here); only the split of the frames into inactive / reactive parts binarises (``reactive_mask``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import latent_format

__all__ = ["MASK_CHANNELS", "STRIDE", "fold_mask", "latent_frames", "reactive_mask"]

STRIDE = latent_format.SPATIAL_FACTOR  # 8: one latent pixel covers 8 x 8 pixels
MASK_CHANNELS = STRIDE * STRIDE  # 64: channel 8 * dy + dx holds pixel (8y + dy, 8x + dx)
THRESHOLD = 0.5  # a pixel is reactive (to be generated) where mask > 0.5, strictly


def latent_frames(frames: int) -> int:
    """Latent frames of a ``frames``-frame video (``frames`` = 4n+1 -> n+1), as the official ``(T + 3) // 4``."""
    return (frames + latent_format.TEMPORAL_FACTOR - 1) // latent_format.TEMPORAL_FACTOR


def reactive_mask(masks: torch.Tensor) -> torch.Tensor:
    """``masks`` in [0, 1] -> 1.0 where ``masks > 0.5`` else 0.0 (same shape and float dtype)."""
    return (masks > THRESHOLD).to(masks.dtype)


def fold_mask(masks: torch.Tensor) -> torch.Tensor:
    """``masks`` ``[B, 1, T, H, W]`` (H, W multiples of 8) -> ``[B, 64, (T + 3) // 4, H / 8, W / 8]``.

    Space: each 8 x 8 block becomes 64 channels, channel ``8 * dy + dx`` (``F.pixel_unshuffle(mask, 8)``'s order).
    Time: nearest-exact resampling to the latent frames (9 frames -> pixel frames 1, 4, 7), as ``F.interpolate``
    with ``mode="nearest-exact"`` picks them in the official code.
    """
    b, _, t, h, w = masks.shape
    hh, ww = h // STRIDE, w // STRIDE
    folded = masks.reshape(b, t, hh, STRIDE, ww, STRIDE).permute(0, 3, 5, 1, 2, 4)
    folded = folded.reshape(b, MASK_CHANNELS, t, hh, ww)
    return F.interpolate(folded, size=(latent_frames(t), hh, ww), mode="nearest-exact")
