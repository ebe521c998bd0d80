"""Wan 2.1 latent format: per-channel normalisation between raw VAE latents and the DiT's latent space,
and the linear latent->RGB preview. The ONE place these constants live.

Implements docs/wan_spec.md section 1.2 and docs/comfyui.md section 7.5 (values as in ComfyUI's ``Wan21`` latent format,
so our LATENTs are interchangeable with ComfyUI's native ones: LATENT holds raw latents, the model sees normalised).
"""
from __future__ import annotations

import torch

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
    if z.dim() < 2 or z.shape[1] != CHANNELS:
        raise ValueError(f"Wan 2.1 latents have {CHANNELS} channels in dim 1, got shape {list(z.shape)}")
    view = (1, CHANNELS) + (1,) * (z.dim() - 2)
    mean = torch.tensor(LATENTS_MEAN, dtype=z.dtype, device=z.device).view(view)
    std = torch.tensor(LATENTS_STD, dtype=z.dtype, device=z.device).view(view)
    return mean, std


def to_model(z: torch.Tensor) -> torch.Tensor:
    """Raw VAE latents [B, 16, ...] -> the DiT's normalised latents: ``(z - mean) / std`` per channel."""
    mean, std = _stats(z)
    return (z - mean) / std


def from_model(x: torch.Tensor) -> torch.Tensor:
    """The DiT's normalised latents [B, 16, ...] -> raw VAE latents: ``x * std + mean`` per channel."""
    mean, std = _stats(x)
    return x * std + mean


def preview_rgb(x: torch.Tensor) -> torch.Tensor:
    """Cheap preview of normalised latents [B, 16, T, H, W] -> [B, T, H, W, 3] in [0, 1] (1/8 resolution)."""
    _stats(x)
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
