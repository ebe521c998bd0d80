"""The WF-VAE latent format: the release's per-channel normalisation between raw WF-VAE latents and a diffusion
model's latent space (Open-Sora Plan's pipelines: ``(z - shift) * scale`` after encoding, ``x / scale + shift``
before decoding), and the mark a LATENT dict carries so that a WF-VAE latent never reaches a Wan DiT or the Wan
VAE (a WF-VAE-L latent has 16 channels, as a Wan 2.1 one: the channel count alone cannot tell them apart).

LATENT dicts follow ComfyUI's convention as the Wan ones do (docs/comfyui.md section 7.5): ``samples`` holds the
RAW latents; ``to_model`` / ``from_model`` are what a model trained on WF-VAE latents would apply. docs/wfvae.md.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from .config import WFVAEConfig

FORMAT_KEY = "wancore_latent_format"  # LATENT dict key: the format's name; absent = a Wan (or ComfyUI) latent


@dataclass(frozen=True)
class WFVAELatentFormat:
    """One WF-VAE's latents: ``channels`` per frame, ``temporal_factor`` x 8 x 8 compression, per-channel
    ``scale`` / ``shift`` of its release."""

    name: str
    channels: int
    temporal_factor: int
    spatial_factor: int
    scale: tuple[float, ...]
    shift: tuple[float, ...]

    def _stats(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if z.dim() < 2 or z.shape[1] != self.channels:
            raise ValueError(f"{self.name} latents have {self.channels} channels in dim 1, got shape {list(z.shape)}")
        view = (1, self.channels) + (1,) * (z.dim() - 2)
        scale = torch.tensor(self.scale, dtype=z.dtype, device=z.device).view(view)
        return scale, torch.tensor(self.shift, dtype=z.dtype, device=z.device).view(view)

    def to_model(self, z: torch.Tensor) -> torch.Tensor:
        """Raw latents [B, C, ...] -> the normalised ones a model sees: ``(z - shift) * scale`` per channel."""
        scale, shift = self._stats(z)
        return (z - shift) * scale

    def from_model(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised latents [B, C, ...] -> raw latents for ``decode``: ``x / scale + shift`` per channel."""
        scale, shift = self._stats(x)
        return x / scale + shift

    process_in = to_model
    process_out = from_model


def latent_format(cfg: WFVAEConfig) -> WFVAELatentFormat:
    """The latent format of a WF-VAE layout (its release's scale/shift, else the official defaults)."""
    return WFVAELatentFormat(name=f"wfvae-{cfg.temporal_factor}x8x8-{cfg.latent_dim}ch", channels=cfg.latent_dim,
                             temporal_factor=cfg.temporal_factor, spatial_factor=cfg.spatial_factor,
                             scale=cfg.latent_scale, shift=cfg.latent_shift)


def latent_dict(z: torch.Tensor, fmt: WFVAELatentFormat) -> dict:
    """A LATENT dict of raw WF-VAE latents ``z`` [B, C, T', H/8, W/8], marked with its format."""
    return {"samples": z, "downscale_ratio_spacial": fmt.spatial_factor, FORMAT_KEY: fmt.name}


def format_name(latent) -> str | None:
    """The format a LATENT dict is marked with (None: a Wan latent, ComfyUI's or ours)."""
    name = latent.get(FORMAT_KEY) if isinstance(latent, Mapping) else None
    return name if isinstance(name, str) else None


def refuse_wfvae_latent(latent, name: str) -> None:
    """A one-line ValueError when the LATENT ``latent`` (input ``name``) is a WF-VAE latent: a Wan DiT was not
    trained on it."""
    fmt = format_name(latent)
    if fmt is not None:
        raise ValueError(f"{name}: a WF-VAE latent ({fmt}), but Wan diffusion models work on Wan VAE latents only; "
                         f"decode it with WanCore VAE Decode and the same WF-VAE, or make the latent with a Wan VAE")


def check_latent_for_vae(latent, name: str, vae) -> None:
    """A one-line ValueError unless the LATENT ``latent`` suits ``vae``: a WF-VAE decodes only latents marked
    with its own format, the Wan VAE only unmarked ones."""
    fmt = format_name(latent)
    own = getattr(vae, "latent_format", None)
    want = own.name if isinstance(own, WFVAELatentFormat) else None
    if fmt == want:
        return
    if want is None:
        raise ValueError(f"{name}: a WF-VAE latent ({fmt}); the Wan VAE cannot decode it: use the WF-VAE that "
                         f"encoded it")
    made = f"a {fmt} latent" if fmt else "a Wan latent (no WF-VAE mark)"
    raise ValueError(f"{name}: {made}, but this VAE is a {want} WF-VAE; decode it with the VAE that made it "
                     f"(WF-VAE latents come from WanCore VAE Encode with a WF-VAE)")


def refuse_wfvae(vae, name: str) -> None:
    """A one-line ValueError when ``vae`` (input ``name``) is a WF-VAE where a Wan VAE's latents are made for a
    Wan DiT (image-to-video, extension)."""
    own = getattr(vae, "latent_format", None)
    if isinstance(own, WFVAELatentFormat):
        raise ValueError(f"{name}: a WF-VAE ({own.name}); Wan diffusion models need latents of a Wan VAE: load "
                         f"wan_2.1_vae (or the Wan 2.2 VAE for TI2V-5B) here")
