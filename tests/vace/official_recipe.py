"""An independent float64 re-statement of the official VACE conditioning (Wan2.1 wan/vace.py ``vace_encode_frames``,
``vace_encode_masks``, ``vace_latent``; wan/utils/vace_processor.py ``prepare_source``), written per batch item
with explicit loops, as the parity reference of tests/vace/test_parity.py."""
from __future__ import annotations

import math

import torch

from wan_core.latent_format import LATENTS_MEAN, LATENTS_STD


def normalised_encode(vae64, video: torch.Tensor) -> torch.Tensor:
    """One video ``[3, T, H, W]`` -> ``(mu - mean) * (1 / std)`` ``[16, T', h, w]`` float64 (official WanVAE.encode)."""
    with torch.no_grad():
        mu = vae64.model.encode_full(video[None].double())[0]
    mean = torch.tensor(LATENTS_MEAN, dtype=torch.float64).view(16, 1, 1, 1)
    inv_std = 1.0 / torch.tensor(LATENTS_STD, dtype=torch.float64).view(16, 1, 1, 1)
    return (mu - mean) * inv_std


def nearest_exact_indices(src: int, dst: int) -> list[int]:
    """Source frame of each of ``dst`` output frames, as PyTorch's nearest-exact picks them: floor((i + 0.5) src/dst)."""
    return [min(math.floor((i + 0.5) * src / dst), src - 1) for i in range(dst)]


def fold_mask_loops(mask: torch.Tensor) -> torch.Tensor:
    """One mask ``[1, T, H, W]`` -> ``[64, (T + 3) // 4, H / 8, W / 8]``: block loops, then per-frame selection."""
    _, t, h, w = mask.shape
    out = torch.zeros(64, t, h // 8, w // 8, dtype=torch.float64)
    for y in range(h // 8):
        for x in range(w // 8):
            for dy in range(8):
                for dx in range(8):
                    out[8 * dy + dx, :, y, x] = mask[0, :, 8 * y + dy, 8 * x + dx]
    picks = nearest_exact_indices(t, (t + 3) // 4)
    return torch.stack([out[:, i] for i in picks], dim=1)


def bilinear(image: torch.Tensor, oh: int, ow: int) -> torch.Tensor:
    """``[3, H, W]`` -> ``[3, oh, ow]``: bilinear, half-pixel centres, edges clamped (align_corners=False)."""
    _, ih, iw = image.shape
    out = torch.zeros(3, oh, ow, dtype=torch.float64)

    def taps(o: int, n_in: int, n_out: int) -> tuple[int, int, float]:
        s = max((o + 0.5) * n_in / n_out - 0.5, 0.0)
        i0 = min(math.floor(s), n_in - 1)
        return i0, min(i0 + 1, n_in - 1), s - i0

    for y in range(oh):
        y0, y1, ly = taps(y, ih, oh)
        for x in range(ow):
            x0, x1, lx = taps(x, iw, ow)
            out[:, y, x] = ((1 - ly) * ((1 - lx) * image[:, y0, x0] + lx * image[:, y0, x1])
                            + ly * ((1 - lx) * image[:, y1, x0] + lx * image[:, y1, x1]))
    return out


def fit_on_white(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """prepare_source's reference fitting: scale to fit, bilinear, centred on a white ([-1, 1]: 1.0) canvas."""
    ih, iw = image.shape[1:]
    if (ih, iw) == (height, width):
        return image.double()
    scale = min(height / ih, width / iw)
    nh, nw = int(ih * scale), int(iw * scale)
    canvas = torch.ones(3, height, width, dtype=torch.float64)
    top, left = (height - nh) // 2, (width - nw) // 2
    canvas[:, top:top + nh, left:left + nw] = bilinear(image.double(), nh, nw)
    return canvas


def official_context(vae64, frames: torch.Tensor, masks: torch.Tensor, refs: list[list[torch.Tensor]]):
    """``frames`` ``[B, 3, T, H, W]``, ``masks`` ``[B, 1, T, H, W]``, ``refs`` per item -> ``[B, 96, n + F, h, w]``."""
    out = []
    for b in range(frames.shape[0]):
        video, mask = frames[b].double(), masks[b].double()
        m = torch.where(mask > 0.5, 1.0, 0.0).double()
        latent = torch.cat([normalised_encode(vae64, video * (1 - m)), normalised_encode(vae64, video * m)], dim=0)
        folded = fold_mask_loops(mask)
        h, w = video.shape[2:]
        for img in reversed(refs[b]):  # prepend in order: the first reference ends up first
            z = normalised_encode(vae64, fit_on_white(img, h, w)[:, None])
            latent = torch.cat([torch.cat([z, torch.zeros_like(z)], dim=0), latent], dim=1)
            folded = torch.cat([torch.zeros_like(folded[:, :1]), folded], dim=1)
        out.append(torch.cat([latent, folded], dim=0))
    return torch.stack(out)
