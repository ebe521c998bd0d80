"""Wan 2.2 nodes called directly (no ComfyUI; docs/wan22.md section 6): WanCoreMoE into the sampler, the TI2V-5B
empty and first-frame latents (ComfyUI's native Wan22ImageToVideoLatent form: raw latents, noise_mask 0 on
frame 0), and the size checks."""
from __future__ import annotations

import pytest
import torch

from wan_core import latent_format
from wan_core.config import DiTConfig
from wan_core.demo import random_vae_model, tiny_random_models
from wan_core.dit.model import WanDiT
from wan_core.vae import TINY_VAE22, WanVAE


@pytest.fixture(scope="module")
def node(pack):
    from importlib import import_module
    from types import SimpleNamespace

    names = ("sampler", "conditioning", "wan22", "vae")
    return SimpleNamespace(**{n: import_module(f"{pack.__name__}.nodes.{n}") for n in names})


def test_nodes_are_registered(pack):
    ids = {s.node_id for s in pack.nodes.NODE_SPECS}
    assert {"WanCoreMoE", "WanCoreEmptyLatent22", "WanCoreImageToVideoLatent22"} <= ids


def test_moe_node_samples_with_both_experts(node):
    dit, _vae, te = tiny_random_models(seed=0)
    low = WanDiT(dit.config).eval()
    low.load_state_dict({k: v + 0.01 * torch.randn_like(v) for k, v in dit.state_dict().items()})
    (moe,) = node.wan22.MOE.run(high_noise_model=dit, low_noise_model=low, boundary=0.875, guidance_high=4.0,
                                guidance_low=3.0)
    (embeds,) = node.conditioning.text_encode(te, "a fox", "")
    lat = {"samples": torch.zeros(1, 16, 2, 8, 8)}
    calls = {"high": 0, "low": 0}
    hooks = [m.register_forward_hook(lambda *_a, n=n: calls.__setitem__(n, calls[n] + 1))
             for n, m in (("high", dit), ("low", low))]
    try:
        (out,) = node.sampler.sample(moe, embeds, lat, seed=1, steps=6, guidance=1.0, shift=12.0)
    finally:
        for h in hooks:
            h.remove()
    assert out["samples"].shape == (1, 16, 2, 8, 8) and torch.isfinite(out["samples"]).all()
    assert calls["high"] > 0 and calls["low"] > 0  # switched inside the run; per-expert guidance > 1: 2 calls/step
    assert calls["high"] + calls["low"] == 12


def test_moe_node_refuses_mismatched_experts(node):
    a = WanDiT(DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32))
    b = WanDiT(DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=64))
    with pytest.raises(ValueError, match="differ in text width \\(32 vs 64\\)"):
        node.wan22.MOE.run(high_noise_model=a, low_noise_model=b)


def test_empty_latent22_shape_and_sizes(node):
    (lat,) = node.wan22.EMPTY_LATENT22.run(width=64, height=96, frames=9, batch_size=2)
    assert lat["samples"].shape == (2, 48, 3, 6, 4) and lat["downscale_ratio_spacial"] == 16
    msg = node.wan22.validate_size(width=80, height=704, frames=120)
    assert "width=80: must be a multiple of 32 for Wan 2.2 TI2V-5B; nearest valid: 64 or 96" in msg
    assert "frames=120: must be 4n+1; nearest valid: 117 or 121" in msg
    with pytest.raises(ValueError, match="width=80"):
        node.wan22.EMPTY_LATENT22.run(width=80, height=64, frames=9)


def test_first_frame_latent_into_the_sampler(node):
    vae = WanVAE(random_vae_model(TINY_VAE22, 3))
    dit = WanDiT(DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32, in_dim=48,
                           out_dim=48)).eval()
    image = torch.rand(1, 40, 70, 3, generator=torch.Generator().manual_seed(1))  # resized to 64x32
    (lat,) = node.wan22.IMAGE_TO_VIDEO22.run(vae=vae, start_image=image, width=64, height=32, frames=9,
                                             batch_size=2)
    z, mask = lat["samples"], lat["noise_mask"]
    assert z.shape == (2, 48, 3, 2, 4) and mask.shape == (2, 1, 3, 2, 4)
    assert (mask[:, :, 0] == 0).all() and (mask[:, :, 1:] == 1).all()
    assert torch.allclose(latent_format.to_model(z[:, :, 1:]), torch.zeros(()), atol=1e-6)  # mean = model's 0
    embeds = {"cond": [torch.randn(4, 32)], "uncond": [torch.randn(2, 32)]}
    (out,) = node.sampler.sample(dit, embeds, lat, seed=0, steps=2, guidance=2.0)
    assert out["samples"].shape == z.shape and out["downscale_ratio_spacial"] == 16
    assert torch.allclose(out["samples"][:, :, :1], z[:, :, :1], atol=1e-5)  # the start image is kept
    (frames,) = node.vae.decode(vae, out, tiling="off")
    assert frames.shape == (2 * 9, 32, 64, 3)  # the batch of two videos, frame after frame


def test_first_frame_latent_needs_the_wan22_vae(node):
    dit_vae = tiny_random_models(seed=0)[1]
    with pytest.raises(ValueError, match="TI2V-5B needs the Wan 2.2 VAE"):
        node.wan22.IMAGE_TO_VIDEO22.run(vae=dit_vae, start_image=torch.rand(1, 32, 32, 3), width=32, height=32,
                                        frames=5)
