"""Control videos and mask videos brought to the generation size as the official VACE loader does: scaled to cover
(aspect kept), bicubic with antialias, centre-cropped (Wan2.1 wan/utils/vace_processor.py
``VaceVideoProcessor.resize_crop``; docs/vace_conditioning.md section 5).

``vace_context`` itself refuses frames and masks of different sizes; callers that accept any video size (the CLI,
the nodes) resize with these first.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["resize_crop", "resize_mask"]


def resize_crop(video: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``video`` ``[B, C, T, H, W]`` -> ``[B, C, T, height, width]``: unchanged when the size matches, else scaled by
    ``max(height / H, width / W)`` (sizes rounded), bicubic with antialias, then the centre ``height x width``.

    The official loader resamples 8-bit frames (so its result is quantised to 1/127.5); this works on the float
    values, which differs from it by at most that step."""
    if height < 1 or width < 1:
        raise ValueError(f"resize_crop: expected a positive height and width, got {height}x{width}")
    b, c, t, ih, iw = video.shape
    if (ih, iw) == (height, width):
        return video
    scale = max(width / iw, height / ih)
    sh, sw = max(height, round(scale * ih)), max(width, round(scale * iw))
    flat = video.transpose(1, 2).reshape(b * t, c, ih, iw)
    flat = F.interpolate(flat.float(), size=(sh, sw), mode="bicubic", antialias=True)
    top, left = (sh - height) // 2, (sw - width) // 2
    flat = flat[:, :, top:top + height, left:left + width]
    return flat.reshape(b, t, c, height, width).transpose(1, 2).contiguous()


def resize_mask(masks: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``masks`` ``[B, 1, T, H, W]`` in [0, 1] -> ``resize_crop`` then clamped to [0, 1] (bicubic overshoots; the
    official loader clamps the mask after the same resize)."""
    return resize_crop(masks, height, width).clamp(0.0, 1.0)
