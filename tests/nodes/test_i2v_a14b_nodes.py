"""Wan 2.2 I2V-A14B through the nodes, called directly (no ComfyUI; docs/wan22.md section 6): two 36-channel
experts without CLIP (no ``img_emb``) -> WanCoreMoE (boundary 0.900, guidance 3.5 / 3.5: Wan2.2
wan/configs/wan_i2v_A14B.py lines 34-37) and WanCoreImageToVideo without a CLIP vision input -> WanCoreSampler:
equal to ``WanPipeline.sample_latents`` on a ``WanMoE`` with the same image conditioning, both experts used."""
from __future__ import annotations

import pytest
import torch

from wan_core.config import DIT_PRESETS
from wan_core.demo import tiny_random_models
from wan_core.dit.model import WanDiT
from wan_core.pipeline import GenerationConfig, WanPipeline
from wan_core.dit.moe import WanMoE
from wan_core.variants import I2V_A14B


@pytest.fixture(scope="module")
def node(pack):
    from importlib import import_module
    from types import SimpleNamespace

    names = ("sampler", "conditioning", "wan22", "i2v")
    return SimpleNamespace(**{n: import_module(f"{pack.__name__}.nodes.{n}") for n in names})


def test_i2v_a14b_moe_and_image_to_video_without_clip(node):
    _dit, vae, te = tiny_random_models(seed=0)
    cfg = DIT_PRESETS["tiny"].replace(text_dim=te.text_dim, in_dim=36)  # no image_dim: no CLIP, as I2V-A14B
    torch.manual_seed(1)
    high, low = WanDiT(cfg).eval(), WanDiT(cfg).eval()
    (moe,) = node.wan22.MOE.run(high_noise_model=high, low_noise_model=low, boundary=I2V_A14B.boundary,
                                guidance_high=I2V_A14B.guidance, guidance_low=I2V_A14B.guidance_low)
    image = torch.rand(1, 40, 56, 3, generator=torch.Generator().manual_seed(4))
    cond, latent = node.i2v.IMAGE_TO_VIDEO.run(vae=vae, start_image=image, width=64, height=48, frames=5)
    assert cond.clip_tokens is None and cond.image_latent.shape == (1, 20, 2, 6, 8)
    (embeds,) = node.conditioning.text_encode(te, "a fox", "")
    calls = {"high": 0, "low": 0}
    hooks = [m.register_forward_hook(lambda *_a, n=n: calls.__setitem__(n, calls[n] + 1))
             for n, m in (("high", high), ("low", low))]
    try:
        (out,) = node.sampler.sample(moe, embeds, latent, seed=3, steps=6, guidance=1.0,
                                     shift=I2V_A14B.shift, image_cond=cond)
    finally:
        for h in hooks:
            h.remove()
    assert calls["high"] > 0 and calls["low"] > 0
    ref_moe = WanMoE(high, low, boundary=I2V_A14B.boundary, guidance=(3.5, 3.5))
    pipe = WanPipeline(ref_moe, vae, te)
    gen = GenerationConfig(width=64, height=48, frames=5, steps=6, guidance=3.5, shift=I2V_A14B.shift, seed=3)
    with torch.no_grad():
        ref = pipe.sample_latents(embeds["cond"], embeds["uncond"], gen, image=pipe.image_condition(image, gen))
    torch.testing.assert_close(out["samples"], ref, rtol=1e-5, atol=1e-5)
    assert "high" in pipe.moe_steps and "low" in pipe.moe_steps
