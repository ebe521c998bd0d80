"""A control video and its masks fitted to the run's size and length (docs/vace.md section 3), as ComfyUI's
``WanVaceToVideo`` fits them: cropped to the run's aspect ratio around the centre, resized bilinear, cut to the
run's length; a shorter video is padded with grey frames that are generated (mask 1); a mask of one frame
applies to every frame (an inpainting mask drawn once). Each change is said.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["fit_video"]

GREY = 0.0  # [-1, 1]: ComfyUI pads with 0.5 in [0, 1] pixels


def _crop_resize(x: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``x`` ``[B, C, T, H, W]`` -> ``[B, C, T, height, width]``: centre crop to the aspect, then bilinear."""
    b, c, t, h, w = x.shape
    if (h, w) == (height, width):
        return x
    if h * width > w * height:  # too tall: crop rows
        nh = max(1, round(w * height / width))
        top = (h - nh) // 2
        x = x[:, :, :, top:top + nh]
    elif h * width < w * height:
        nw = max(1, round(h * width / height))
        left = (w - nw) // 2
        x = x[:, :, :, :, left:left + nw]
    flat = x.transpose(1, 2).reshape(b * t, c, *x.shape[3:])
    out = F.interpolate(flat.float(), size=(height, width), mode="bilinear", align_corners=False)
    return out.reshape(b, t, c, height, width).transpose(1, 2)


def _fit_length(x: torch.Tensor, length: int, fill: float) -> torch.Tensor:
    t = x.shape[2]
    if t >= length:
        return x[:, :, :length]
    pad = x.new_full((*x.shape[:2], length - t, *x.shape[3:]), fill)
    return torch.cat([x, pad], dim=2)


def fit_video(frames: torch.Tensor | None, masks: torch.Tensor | None, length: int, height: int,
              width: int) -> tuple[torch.Tensor | None, torch.Tensor | None, list[str]]:
    """``frames`` ``[B, 3, T, H, W]`` in [-1, 1] and / or ``masks`` ``[B, 1, T', H', W']`` in [0, 1] (either may be
    None) -> both of ``length`` frames of ``height`` x ``width`` and the notes saying what was changed. Masks are
    resized bilinear too (soft edges stay soft; the VACE split binarises them at 0.5)."""
    notes: list[str] = []
    out: list[torch.Tensor | None] = []
    for name, x, fill in (("control video", frames, GREY), ("mask video", masks, 1.0)):
        if x is None:
            out.append(None)
            continue
        if x.dim() != 5 or x.shape[1] not in (1, 3):
            raise ValueError(f"{name}: expected [B, {3 if fill == GREY else 1}, T, H, W], got {list(x.shape)}")
        t, h, w = x.shape[2:]
        if fill != GREY and t == 1 and length > 1:
            notes.append(f"mask video: one mask, used for all {length} frames")
            x, t = x.expand(-1, -1, length, -1, -1), length
        if (h, w) != (height, width):
            notes.append(f"{name}: {w}x{h} resized to the run's {width}x{height} (centre crop to the aspect ratio, "
                         f"bilinear)")
            x = _crop_resize(x, height, width)
        if t != length:
            notes.append(f"{name}: {t} frames {'cut' if t > length else 'padded'} to the run's {length}"
                         + ("" if t > length else (" (grey frames, generated)" if fill == GREY else " (mask 1)")))
            x = _fit_length(x, length, fill)
        out.append(x.clamp(0, 1) if fill != GREY else x)
    return out[0], out[1], notes
