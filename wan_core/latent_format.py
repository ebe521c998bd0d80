"""Wan latent formats (Wan 2.1 VAE, 16 channels; Wan 2.2 VAE, 48): per-channel normalisation between raw VAE
latents and the DiT's latent space, and the linear latent->RGB preview. The ONE place these constants live.

Implements docs/wan_spec.md section 1.2 and docs/comfyui.md section 7.5 (values as in ComfyUI's ``Wan21`` latent format,
so our LATENTs are interchangeable with ComfyUI's native ones: LATENT holds raw latents, the model sees normalised).
"""
from __future__ import annotations

import torch

from .estimate import nearest_valid

CHANNELS = 16
TEMPORAL_FACTOR = 4
SPATIAL_FACTOR = 8

LATENTS_MEAN = (
    -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
    0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
)
LATENTS_STD = (
    2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160,
)

# Wan 2.2 VAE (48 channels, 4 x 16 x 16 compression; TI2V-5B): Wan2.2 wan/modules/vae2_2.py lines 904-1012
# (``Wan2_2_VAE.scale = [mean, 1 / std]``, the same per-channel normalisation as Wan 2.1). docs/wan22.md section 3
WAN22_CHANNELS = 48
WAN22_SPATIAL_FACTOR = 16
WAN22_LATENTS_MEAN = (
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
    -0.1382, 0.0542, 0.2813, 0.0891, 0.157, -0.0098, 0.0375, -0.1825,
    -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.123,
    -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.052, 0.3748,
    0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
)
WAN22_LATENTS_STD = (
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.499, 0.4818, 0.5013,
    0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
    0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
    0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
    0.3971, 1.06, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
)

# Linear preview: rgb = z_model[c] @ factors + bias, then (rgb + 1) / 2 (ComfyUI's Wan21 latent_rgb_factors,
# applied to normalised latents, i.e. what the sampler holds). Rows: latent channel 0..15; columns: R, G, B.
LATENT_RGB_FACTORS = (
    (-0.1299, -0.1692, 0.2932),
    (0.0671, 0.0406, 0.0442),
    (0.3568, 0.2548, 0.1747),
    (0.0372, 0.2344, 0.1420),
    (0.0313, 0.0189, -0.0328),
    (0.0296, -0.0956, -0.0665),
    (-0.3477, -0.4059, -0.2925),
    (0.0166, 0.1902, 0.1975),
    (-0.0412, 0.0267, -0.1364),
    (-0.1293, 0.0740, 0.1636),
    (0.0680, 0.3019, 0.1128),
    (0.0032, 0.0581, 0.0639),
    (-0.1251, 0.0927, 0.1699),
    (0.0060, -0.0633, 0.0005),
    (0.3477, 0.2275, 0.2950),
    (0.1984, 0.0913, 0.1861),
)
LATENT_RGB_BIAS = (-0.1835, -0.0868, -0.3360)


def _stats(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and std for latents ``[B, C, ...]``: C = 16 (Wan 2.1 VAE) or 48 (Wan 2.2 VAE)."""
    if z.dim() < 2 or z.shape[1] not in (CHANNELS, WAN22_CHANNELS):
        raise ValueError(f"Wan latents have {CHANNELS} (Wan 2.1 VAE) or {WAN22_CHANNELS} (Wan 2.2 VAE) channels in "
                         f"dim 1, got shape {list(z.shape)}")
    c = z.shape[1]
    means, stds = (LATENTS_MEAN, LATENTS_STD) if c == CHANNELS else (WAN22_LATENTS_MEAN, WAN22_LATENTS_STD)
    view = (1, c) + (1,) * (z.dim() - 2)
    mean = torch.tensor(means, dtype=z.dtype, device=z.device).view(view)
    std = torch.tensor(stds, dtype=z.dtype, device=z.device).view(view)
    return mean, std


def to_model(z: torch.Tensor) -> torch.Tensor:
    """Raw VAE latents [B, 16 or 48, ...] -> the DiT's normalised latents: ``(z - mean) / std`` per channel."""
    mean, std = _stats(z)
    return (z - mean) / std


def from_model(x: torch.Tensor) -> torch.Tensor:
    """The DiT's normalised latents [B, 16 or 48, ...] -> raw VAE latents: ``x * std + mean`` per channel."""
    mean, std = _stats(x)
    return x * std + mean


def preview_rgb(x: torch.Tensor) -> torch.Tensor:
    """Cheap preview of normalised latents [B, 16, T, H, W] -> [B, T, H, W, 3] in [0, 1] (1/8 resolution).
    48-channel (Wan 2.2 VAE) latents have no RGB factors here: their preview is the grey mean level."""
    _stats(x)
    if x.shape[1] == WAN22_CHANNELS:
        grey = x.to(torch.float32).mean(dim=1).mul(0.25).add(0.5).clamp(0.0, 1.0)
        return grey.unsqueeze(-1).expand(*grey.shape, 3)
    factors = torch.tensor(LATENT_RGB_FACTORS, dtype=torch.float32, device=x.device)
    bias = torch.tensor(LATENT_RGB_BIAS, dtype=torch.float32, device=x.device)
    rgb = torch.einsum("bcthw,cr->bthwr", x.to(torch.float32), factors) + bias
    return rgb.add_(1.0).mul_(0.5).clamp_(0.0, 1.0)


class Wan21LatentFormat:
    """Object form for code that expects a latent-format object (ComfyUI-like ``process_in/process_out``)."""

    channels = CHANNELS
    temporal_factor = TEMPORAL_FACTOR
    spatial_factor = SPATIAL_FACTOR
    latents_mean = LATENTS_MEAN
    latents_std = LATENTS_STD
    latent_rgb_factors = LATENT_RGB_FACTORS
    latent_rgb_factors_bias = LATENT_RGB_BIAS

    to_model = staticmethod(to_model)
    from_model = staticmethod(from_model)
    process_in = staticmethod(to_model)
    process_out = staticmethod(from_model)
    preview_rgb = staticmethod(preview_rgb)


WAN21 = Wan21LatentFormat()


# ---------------------------------------------------------------------------------------------- latent geometry
def latent_geometry(dit=None, vae=None) -> tuple[int, int, int]:
    """(channels, temporal factor, spatial factor) of the latents a DiT / VAE works on: Wan 2.1 and the A14B
    experts (16, 4, 8); TI2V-5B and the Wan 2.2 VAE (48, 4, 16)."""
    vae_cfg = getattr(vae, "config", None)
    if vae_cfg is not None and hasattr(vae_cfg, "z_dim"):
        return int(vae_cfg.z_dim), int(vae_cfg.temporal_factor), int(vae_cfg.spatial_factor)
    cfg = getattr(dit, "config", None)
    channels = int(getattr(cfg, "out_dim", 16)) if cfg is not None else 16
    return channels, 4, 16 if channels == 48 else 8


def pixel_multiple(dit=None, vae=None) -> int:
    """Width/height multiple: the VAE's spatial factor times the DiT's 2x2 patch (16 for Wan 2.1, 32 for 5B)."""
    return 2 * latent_geometry(dit, vae)[2]


def video_size_problems(width: int, height: int, frames: int) -> list[str]:
    """Every problem with a requested video size, each naming the setting and the nearest valid values."""
    problems = []
    for name, value in (("width", width), ("height", height), ("frames", frames)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{name}={value!r}: must be a positive integer")
    if problems:
        return problems
    for name, value in (("width", width), ("height", height)):
        if value % 16:
            lo, hi = nearest_valid(value, 16)
            problems.append(f"{name}={value}: must be a multiple of 16; nearest valid: {lo} or {hi}")
    if (frames - 1) % 4:
        lo, hi = nearest_valid(frames, 4, 1)
        problems.append(f"frames={frames}: the frame count must be 4n+1 (Wan's VAE compresses time 4x "
                        f"after the first frame); nearest valid: {lo} or {hi}")
    return problems


def check_video_size(width: int, height: int, frames: int) -> None:
    """Frames must be 4n+1 and width/height multiples of 16 (the DiT's 2x2 patches on the 8x latents)."""
    problems = video_size_problems(width, height, frames)
    if problems:
        raise ValueError("; ".join(problems))
