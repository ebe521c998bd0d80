"""Helpers for the VAE tests (imported by conftest.py and the test modules)."""
from __future__ import annotations

from pathlib import Path

import torch

DATA = Path(__file__).parent / "data"


def randomize_(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Give every parameter random values (scaled so activations stay O(1)); norms' gammas around 1."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("gamma"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen) / p[0].numel() ** 0.5)
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    return module.eval()


def make_reference(seed: int = 0, **config):
    """A diffusers ``AutoencoderKLWan`` (tiny by default: base_dim 8, z_dim 16) with random weights."""
    from diffusers import AutoencoderKLWan

    config = {"base_dim": 8, "z_dim": 16, **config}
    torch.manual_seed(seed)
    return randomize_(AutoencoderKLWan(**config), seed)


def official_state_dict(ref, num_res_blocks: int = 2) -> dict[str, torch.Tensor]:
    """The reference's weights exported to official (ComfyUI) names with our rules."""
    from wan_core.vae.keys import diffusers_to_official

    out = {}
    for k, v in ref.state_dict().items():
        name = diffusers_to_official(k, num_res_blocks)
        assert name is not None, f"no official name for diffusers key {k}"
        out[name] = v.clone()
    return out


def rand_video(frames: int, height: int, width: int, seed: int = 0, batch: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(batch, 3, frames, height, width, generator=gen) * 2 - 1


def rand_latents(frames: int, height: int, width: int, seed: int = 0, batch: int = 1, channels: int = 16):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, channels, frames, height, width, generator=gen)
