"""Frames and masks for the common VACE tasks, ready for ``vace_context``: extend a clip, first / last frame,
inpaint, outpaint, reference only (docs/vace_conditioning.md section 4).

Mask convention: 1 = generate, 0 = keep. Fill colours follow the official VACE preprocessors (ali-vilab/VACE
vace/annotators: ``frameref.py`` grey 127.5, ``inpainting.py`` 128, ``outpainting.py`` black 0), mapped to [-1, 1].
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .checks import check_frames, check_masks, check_pixels, check_size
from .mask import reactive_mask

__all__ = ["EXTEND_FILL", "INPAINT_FILL", "OUTPAINT_FILL", "VaceInput", "extend_clip", "first_last_frame", "inpaint",
           "outpaint", "reference_only"]

EXTEND_FILL = 127.5 / 127.5 - 1  # 0.0: grey frames to be generated (frameref.py REF_COLOR 127.5)
INPAINT_FILL = 128 / 127.5 - 1  # the hole painted 128 grey (inpainting.py MASK_COLOR 128)
OUTPAINT_FILL = 0 / 127.5 - 1  # -1.0: the new border black (outpainting.py MASK_COLOR 0)


@dataclass(frozen=True)
class VaceInput:
    """``frames`` ``[B, 3, T, H, W]`` in [-1, 1] and ``masks`` ``[B, 1, T, H, W]`` in [0, 1] (1 = generate)."""

    frames: torch.Tensor
    masks: torch.Tensor


def _image(x: torch.Tensor, name: str) -> torch.Tensor:
    """``[B, 3, H, W]`` or ``[3, H, W]`` -> ``[B, 3, 1, H, W]``, checked as frames."""
    if not isinstance(x, torch.Tensor) or x.dim() not in (3, 4) or x.shape[-3] != 3:
        shape = list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{name}: expected an image [B, 3, H, W] in [-1, 1], got {shape}")
    x = x[None] if x.dim() == 3 else x
    check_size(x.shape[-2], x.shape[-1], 1, name)
    return check_pixels(x[:, :, None], name)


def extend_clip(head: torch.Tensor, length: int, fill: float = EXTEND_FILL) -> VaceInput:
    """``head`` ``[B, 3, K, H, W]`` (any K < ``length``) -> a ``length``-frame video (4n+1) whose first K frames are
    ``head`` (mask 0, kept) and the rest ``fill`` (mask 1, generated): continue a clip (frameref ``firstclip``)."""
    if not isinstance(head, torch.Tensor) or head.dim() != 5 or head.shape[1] != 3:
        shape = list(head.shape) if isinstance(head, torch.Tensor) else type(head).__name__
        raise ValueError(f"head: expected a clip [B, 3, K, H, W] in [-1, 1], got {shape}")
    b, _, k, h, w = head.shape
    check_size(h, w, length, "length")
    if not 0 < k < length:
        raise ValueError(f"head: expected 1 to {length - 1} frames for a {length}-frame video, got {k}")
    head = check_pixels(head, "head")
    frames = torch.cat([head, head.new_full((b, 3, length - k, h, w), fill)], dim=2)
    masks = torch.ones(b, 1, length, h, w, dtype=frames.dtype, device=frames.device)
    masks[:, :, :k] = 0
    return VaceInput(frames, masks)


def first_last_frame(first: torch.Tensor | None, last: torch.Tensor | None, length: int,
                     fill: float = EXTEND_FILL) -> VaceInput:
    """A ``length``-frame video with ``first`` as frame 0 and/or ``last`` as the final frame (each ``[B, 3, H, W]``
    in [-1, 1], mask 0) and ``fill`` elsewhere (mask 1): frameref ``firstframe`` / ``lastframe`` /
    ``firstlastframe``."""
    if first is None and last is None:
        raise ValueError("first, last: expected at least one image [B, 3, H, W]")
    given = {name: _image(x, name) for name, x in (("first", first), ("last", last)) if x is not None}
    shapes = {tuple(x.shape) for x in given.values()}
    if len(shapes) > 1:
        raise ValueError(f"first, last: expected images of the same shape, got {[list(s) for s in shapes]}")
    b, _, _, h, w = next(iter(given.values())).shape
    check_size(h, w, length, "length")
    if length < len(given):
        raise ValueError(f"length: expected at least {len(given)} frames for the given images, got {length}")
    ref = next(iter(given.values()))
    frames = ref.new_full((b, 3, length, h, w), fill)
    masks = torch.ones(b, 1, length, h, w, dtype=ref.dtype, device=ref.device)
    for name, index in (("first", 0), ("last", length - 1)):
        if name in given:
            frames[:, :, index] = given[name][:, :, 0]
            masks[:, :, index] = 0
    return VaceInput(frames, masks)


def inpaint(video: torch.Tensor, masks: torch.Tensor, fill: float = INPAINT_FILL) -> VaceInput:
    """``video`` ``[B, 3, T, H, W]`` with the area to regenerate marked by ``masks`` ``[B, 1, T, H, W]`` (1 =
    generate; soft values kept as given) -> the video with that area (mask > 0.5) painted ``fill``, and the masks.
    One mask for every frame: pass ``masks`` ``[B, 1, 1, H, W]`` (expanded over time)."""
    video = check_frames(video)
    if isinstance(masks, torch.Tensor) and masks.dim() == 5 and masks.shape[2] == 1:
        masks = masks.expand(-1, -1, video.shape[2], -1, -1)
    masks = check_masks(masks, video.shape)
    m = reactive_mask(masks)
    return VaceInput(video * (1 - m) + fill * m, masks.contiguous())


def outpaint(video: torch.Tensor, top: int = 0, bottom: int = 0, left: int = 0, right: int = 0,
             fill: float = OUTPAINT_FILL) -> VaceInput:
    """``video`` ``[B, 3, T, H, W]`` placed on a canvas ``(H + top + bottom) x (W + left + right)`` (a multiple of
    16 each way) filled with ``fill``; masks 1 on the new border, 0 over the video."""
    video = check_frames(video)
    pads = {"top": top, "bottom": bottom, "left": left, "right": right}
    bad = {k: v for k, v in pads.items() if not isinstance(v, int) or v < 0}
    if bad:
        raise ValueError(f"outpaint: expected padding amounts as non-negative ints (pixels), got {bad}")
    b, _, t, h, w = video.shape
    check_size(h + top + bottom, w + left + right, t, "outpaint canvas (video + padding)")
    frames = F.pad(video, (left, right, top, bottom), value=fill)
    masks = F.pad(torch.zeros(b, 1, t, h, w, dtype=video.dtype, device=video.device),
                  (left, right, top, bottom), value=1.0)
    return VaceInput(frames, masks)


def reference_only(length: int, height: int, width: int, batch: int = 1) -> VaceInput:
    """A grey ``length``-frame video, all generated (mask 1): what ``vace_context`` uses without frames or masks,
    for reference-to-video (the references go to ``vace_context(ref_images=...)``)."""
    check_size(height, width, length, "reference_only")
    return VaceInput(torch.full((batch, 3, length, height, width), EXTEND_FILL), torch.ones(batch, 1, length, height,
                                                                                              width))
