"""Validation of VACE inputs: one-line ``ValueError``s naming the input and what was expected, raised before any
VAE work (docs/vace_conditioning.md section 5).

Sizes are never resized here: frames and masks of different sizes or lengths are refused (the caller resizes or
pads, ``tasks.py`` builds matching pairs); only reference images of another size are fitted, as the official code
fits them (``reference.py``).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from .. import latent_format
from ..numerics import check_finite
from .mask import latent_frames
from .reference import max_reference_images

__all__ = ["MULTIPLE", "PIXEL_SLACK", "check_frames", "check_masks", "check_pixels", "check_references", "check_size",
           "check_vae", "resolve_video"]

MULTIPLE = 16  # H and W: the mask fold's 8 x 8 blocks times the DiT's 2 x 2 patches
# Frames may overshoot [-1, 1] a little after bicubic resampling (the official loader does not clamp either);
# values further out are pixels in another range ([0, 255]) and are refused.
PIXEL_SLACK = 0.5

ReferenceImages = Sequence["torch.Tensor | Sequence[torch.Tensor] | None"]


def _shape(x) -> str:
    return str(list(x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__


def check_size(height: int, width: int, frames: int, what: str = "video") -> None:
    """``height`` / ``width`` multiples of 16 and ``frames`` = 4n+1, else a ``ValueError`` naming ``what``."""
    if height < MULTIPLE or width < MULTIPLE or height % MULTIPLE or width % MULTIPLE:
        raise ValueError(f"{what}: VACE needs height and width that are multiples of {MULTIPLE}, got "
                         f"{height}x{width} (HxW; nearest valid: {max(MULTIPLE, height // MULTIPLE * MULTIPLE)}x"
                         f"{max(MULTIPLE, width // MULTIPLE * MULTIPLE)})")
    tf = latent_format.TEMPORAL_FACTOR
    if frames < 1 or (frames - 1) % tf:
        below = 1 + tf * max(0, (frames - 1) // tf)
        raise ValueError(f"{what}: VACE needs {tf}n+1 frames (1, 5, 9, ..., 81), got {frames} "
                         f"(nearest valid: {below} or {below + tf})")


def check_pixels(x: torch.Tensor, what: str) -> torch.Tensor:
    """Floating-point, finite values in [-1, 1] (slack ``PIXEL_SLACK``) -> float32; shapes are checked elsewhere."""
    if not x.is_floating_point():
        raise ValueError(f"{what}: expected floating-point values in [-1, 1], got dtype {x.dtype}")
    check_finite(x, what, "the pixels are corrupt")
    lo, hi = float(x.min()), float(x.max())
    if lo < -1 - PIXEL_SLACK or hi > 1 + PIXEL_SLACK:
        raise ValueError(f"{what}: expected values in [-1, 1], got [{lo:.3g}, {hi:.3g}] (pixels in [0, 255] or "
                         f"[0, 1]? map them with x / 127.5 - 1 or 2x - 1)")
    return x.float()


def check_frames(frames: torch.Tensor) -> torch.Tensor:
    """``frames`` ``[B, 3, T, H, W]`` floating point in [-1, 1] (slack ``PIXEL_SLACK``), finite -> float32."""
    if not isinstance(frames, torch.Tensor) or frames.dim() != 5 or frames.shape[1] != 3:
        raise ValueError(f"frames: expected a video [B, 3, T, H, W] in [-1, 1], got {_shape(frames)}")
    check_size(frames.shape[3], frames.shape[4], frames.shape[2], "frames")
    return check_pixels(frames, "frames")


def check_masks(masks: torch.Tensor, shape: Sequence[int] | None = None) -> torch.Tensor:
    """``masks`` ``[B, 1, T, H, W]`` in [0, 1] (float or bool), finite; with ``shape`` (the frames' ``[B, 3, T, H,
    W]``) also the same B, T, H, W -> float32. 1 = generate, 0 = keep; soft values are allowed."""
    if not isinstance(masks, torch.Tensor) or masks.dim() != 5 or masks.shape[1] != 1:
        raise ValueError(f"masks: expected [B, 1, T, H, W] in [0, 1] (1 = generate), got {_shape(masks)}")
    if masks.dtype == torch.bool:
        masks = masks.float()
    if not masks.is_floating_point():
        raise ValueError(f"masks: expected floating-point (or bool) values in [0, 1], got dtype {masks.dtype}")
    if shape is not None and (masks.shape[0], *masks.shape[2:]) != (shape[0], *shape[2:]):
        raise ValueError(f"masks: expected the frames' batch, length and size {[shape[0], 1, *shape[2:]]}, got "
                         f"{list(masks.shape)} (masks are not resized: resize or pad them to the frames first)")
    check_size(masks.shape[3], masks.shape[4], masks.shape[2], "masks")
    check_finite(masks, "masks (VACE mask video)", "the mask is corrupt")
    lo, hi = float(masks.min()), float(masks.max())
    if lo < 0 or hi > 1:
        raise ValueError(f"masks: expected values in [0, 1] (1 = generate), got [{lo:.3g}, {hi:.3g}] "
                         f"(a [0, 255] mask? divide by 255; clamp resampled masks)")
    return masks.float()


def resolve_video(frames: torch.Tensor | None, masks: torch.Tensor | None,
                  size: tuple[int, int, int] | None, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The frames and masks ``vace_context`` works on: no frames = grey (zeros), no masks = all ones (all
    generated). ``size`` ``(frames, height, width)`` is required when neither is given and refused otherwise."""
    if frames is not None or masks is not None:
        if size is not None:
            raise ValueError("size: give it only when neither frames nor masks are given (they set the size)")
        if frames is not None:
            frames = check_frames(frames)
            masks = torch.ones_like(frames[:, :1]) if masks is None else check_masks(masks, frames.shape)
        else:
            masks = check_masks(masks)  # type: ignore[arg-type]
            frames = torch.zeros_like(masks).expand(-1, 3, -1, -1, -1).contiguous()
        return frames, masks
    if size is None or len(size) != 3:
        raise ValueError(f"size: expected (frames, height, width) when neither frames nor masks are given, got {size}")
    t, h, w = (int(n) for n in size)
    check_size(h, w, t, "size")
    return torch.zeros(batch, 3, t, h, w), torch.ones(batch, 1, t, h, w)


def _one_item(item, index: int) -> list[torch.Tensor]:
    """Item ``index`` of ``ref_images`` (None, one ``[3, H, W]``, ``[N, 3, H, W]`` or a list of ``[3, H, W]``)."""
    if item is None:
        return []
    if isinstance(item, torch.Tensor):
        images = [item] if item.dim() == 3 else list(item) if item.dim() == 4 else [item]
    elif isinstance(item, Sequence):
        images = list(item)
    else:
        raise ValueError(f"ref_images[{index}]: expected [3, H, W] tensors, got {type(item).__name__}")
    for j, img in enumerate(images):
        if not isinstance(img, torch.Tensor) or img.dim() != 3 or img.shape[0] != 3:
            hint = " (channels last? expected [3, H, W]; drop alpha first)" if isinstance(img, torch.Tensor) else ""
            raise ValueError(f"ref_images[{index}][{j}]: expected an RGB image [3, H, W] in [-1, 1], got "
                             f"{_shape(img)}{hint}")
        images[j] = check_pixels(img, f"ref_images[{index}][{j}]")
    return images


def check_references(ref_images: ReferenceImages | None, batch: int, frames: int) -> list[list[torch.Tensor]]:
    """``ref_images``: None, or one entry per batch item (None, a ``[3, H, W]`` image, ``[N, 3, H, W]`` or a list
    of ``[3, H, W]``), the same count for every item and at most ``max_reference_images`` of a ``frames``-frame video
    -> a list (per item) of float32 ``[3, H, W]``."""
    if ref_images is None:
        return [[] for _ in range(batch)]
    if isinstance(ref_images, torch.Tensor) or not isinstance(ref_images, Sequence) or len(ref_images) != batch:
        got = _shape(ref_images) if isinstance(ref_images, torch.Tensor) else (
            f"{len(ref_images)} entries" if isinstance(ref_images, Sequence) else type(ref_images).__name__)
        raise ValueError(f"ref_images: expected a list with one entry per batch item ({batch}), each a list of "
                         f"[3, H, W] images, got {got}")
    refs = [_one_item(item, i) for i, item in enumerate(ref_images)]
    counts = sorted({len(r) for r in refs})
    if len(counts) > 1:
        raise ValueError(f"ref_images: every batch item needs the same number of reference images, got {counts}")
    cap = max_reference_images(latent_frames(frames))
    if counts[0] > cap:
        raise ValueError(f"ref_images: at most {cap} reference images for a {frames}-frame video (one per latent "
                         f"frame), got {counts[0]}")
    return refs


def check_vae(vae) -> None:
    """VACE was trained on the Wan 2.1 VAE's 16-channel latents (8 x 8 x 4 compression); refuse other VAEs."""
    cfg = getattr(vae, "config", None)
    z_dim, sf = getattr(cfg, "z_dim", None), getattr(cfg, "spatial_factor", None)
    if z_dim != latent_format.CHANNELS or sf != latent_format.SPATIAL_FACTOR:
        raise ValueError(f"vae: VACE needs the Wan 2.1 VAE ({latent_format.CHANNELS} channels, "
                         f"{latent_format.SPATIAL_FACTOR}x spatial), got {z_dim} channels, {sf}x")
