"""Wan 2.2 TI2V-5B geometry end to end on tiny random models (docs/wan22.md section 5): 48-channel latents at
4 x 16 x 16 compression through the pipeline, and every mismatch refused before sampling with one line."""
from __future__ import annotations

import pytest
import torch

from wan_core.config import DiTConfig
from wan_core.demo import random_vae_model
from wan_core.dit.model import WanDiT
from wan_core.pipeline import GenerationConfig, WanPipeline
from wan_core.vae import TINY_VAE, TINY_VAE22, WanVAE

DIT48 = DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32, in_dim=48, out_dim=48)
DIT16 = DIT48.replace(in_dim=16, out_dim=16)


class Counting(WanDiT):
    calls = 0

    def forward(self, *a, **k):
        Counting.calls += 1
        return super().forward(*a, **k)


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    return Counting(DIT48).eval(), WanVAE(random_vae_model(TINY_VAE22, 1)), WanVAE(random_vae_model(TINY_VAE, 2))


def emb(n: int = 4):
    return [torch.randn(n, DIT48.text_dim, generator=torch.Generator().manual_seed(n))]


def test_ti2v_geometry_end_to_end(models):
    dit, vae22, _ = models
    pipe = WanPipeline(dit, vae22)
    cfg = GenerationConfig(width=64, height=32, frames=9, steps=2, guidance=2.0, seed=3)
    with torch.no_grad():
        lat = pipe.sample_latents(emb(), emb(3), cfg)
        video = pipe.decode(lat)
    assert lat.shape == (1, 48, 3, 2, 4)
    assert video.shape == (1, 3, 9, 32, 64) and video.abs().max() <= 1


def test_sizes_not_multiple_of_32_are_refused_before_sampling(models):
    dit, vae22, _ = models
    Counting.calls = 0
    with pytest.raises(ValueError, match=r"needs width and height in multiples of 32 .*width=48: nearest valid "
                                         r"32 or 64"):
        WanPipeline(dit, vae22).sample_latents(emb(), None, GenerationConfig(width=48, height=32, frames=5, steps=2,
                                                                             guidance=1.0))
    assert Counting.calls == 0


def test_wan22_vae_with_a_wan21_dit_is_refused(models):
    _, vae22, _ = models
    with pytest.raises(ValueError, match=r"works on 16-channel latents but the VAE has 48 latent channels"):
        WanPipeline(WanDiT(DIT16), vae22).sample_latents(emb(), None, GenerationConfig(width=64, height=64, frames=5,
                                                                                       steps=2, guidance=1.0))


def test_5b_with_a_16_channel_start_latent_is_refused(models):
    dit, vae22, vae21 = models
    with pytest.raises(ValueError, match=r"works on 48-channel latents but the VAE has 16 latent channels"):
        WanPipeline(dit, vae21).sample_latents(emb(), None, GenerationConfig(width=64, height=64, frames=5, steps=2))
    z = torch.zeros(1, 16, 2, 2, 2)
    with pytest.raises(ValueError, match=r"^start latent: 16 latent channels .* works on 48-channel latents"):
        WanPipeline(dit, vae22).sample_latents(emb(), None, GenerationConfig(width=32, height=32, frames=5, steps=2,
                                                                             denoise=0.5, guidance=1.0), latent=z)
