"""Wan 2.1 and 2.2 video VAEs: causal 3-D conv network, feature-cache streaming through time, spatial tiling.

docs/wan_spec.md section 3; public entry point ``load_vae`` (docs/design.md section 4).
"""
from .config import PRESETS, TINY_VAE, TINY_VAE22, TINY_VAE_1RES, WAN21_VAE, WAN22_VAE, VAEConfig, detect_vae_config
from .image import image_to_video, video_to_image
from .keys import diffusers_to_official, official_to_diffusers
from .loader import VAETilingWarning, WanVAE, load_vae
from .model import WanVAEModel, build_model

__all__ = [
    "PRESETS", "TINY_VAE", "TINY_VAE_1RES", "WAN21_VAE", "TINY_VAE22", "WAN22_VAE", "VAEConfig", "detect_vae_config",
    "image_to_video", "video_to_image", "diffusers_to_official", "official_to_diffusers",
    "VAETilingWarning", "WanVAE", "load_vae", "WanVAEModel", "build_model",
]
