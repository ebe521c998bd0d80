"""Reference images for VACE: fitted onto the video's canvas as the official code does, and how many a video may
carry (docs/vace_conditioning.md section 3).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["CANVAS_FILL", "fit_reference", "max_reference_images"]

# Wan2.1 wan/utils/vace_processor.py ``prepare_source``: a reference of another size is scaled to fit inside the
# canvas (aspect kept, bilinear, no antialias) and centred on a white canvas (1.0 in [-1, 1]).
CANVAS_FILL = 1.0


def fit_reference(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``image`` ``[3, h, w]`` in [-1, 1] -> ``[3, height, width]``: unchanged when the size matches, else scaled by
    ``min(height / h, width / w)`` (sizes truncated to ints), bilinear with ``align_corners=False``, centred on white.
    """
    ih, iw = image.shape[-2:]
    if (ih, iw) == (height, width):
        return image
    scale = min(height / ih, width / iw)
    nh, nw = int(ih * scale), int(iw * scale)
    resized = F.interpolate(image[None], size=(nh, nw), mode="bilinear", align_corners=False)[0]
    canvas = torch.full((image.shape[0], height, width), CANVAS_FILL, dtype=image.dtype, device=image.device)
    top, left = (height - nh) // 2, (width - nw) // 2
    canvas[:, top:top + nh, left:left + nw] = resized
    return canvas


def max_reference_images(latent_frames: int) -> int:
    """The cap on reference images per video: as many as the video has latent frames.

    The official code sets none; each reference adds one latent frame (a full frame of tokens to every VACE and
    main block), and the released models were trained with a few references. Past the video's own length the
    references would outweigh the video, so more are refused as a likely mistake (a folder of frames passed as
    references)."""
    return latent_frames
