"""Wan 2.2 A14B two-expert sampling (docs/wan22.md section 4) vs diffusers' WanPipeline with ``transformer_2`` +
``boundary_ratio`` on tiny random experts: final latents rel. <= 1e-4 and the step at which the low-noise expert
takes over equal; per-expert guidance; caches start afresh at the switch; mismatched experts refused."""
from __future__ import annotations

import pytest
import torch

from wan_core import latent_format
from wan_core.cache.report import COMPUTED
from wan_core.config import DiTConfig
from wan_core.dit.keys import diffusers_to_official
from wan_core.dit.loader import load_dit
from wan_core.dit.model import WanDiT
from wan_core.pipeline import GenerationConfig, WanPipeline as CorePipeline
from wan_core.sampling import make_noise
from wan_core.dit.moe import WanMoE

from .test_vs_diffusers import _randomize, rel_err

DIT = DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32)
BOUNDARY = 0.875  # T2V-A14B (Wan2.2 wan/configs/wan_t2v_A14B.py line 36)


def _transformer(seed: int):
    from diffusers import WanTransformer3DModel

    t = WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=DIT.num_heads, attention_head_dim=DIT.head_dim, in_channels=16,
        out_channels=16, text_dim=DIT.text_dim, freq_dim=256, ffn_dim=DIT.ffn_dim, num_layers=DIT.num_layers,
        cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6).eval()
    _randomize(t, seed)
    return t


def _ours(transformer) -> WanDiT:
    return load_dit({diffusers_to_official(k): v for k, v in transformer.state_dict().items()},
                    dtype=torch.float32, config=DIT)


@pytest.fixture(scope="module")
def experts():
    return _transformer(1), _transformer(2)


def _pad(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(1, 512, DIT.text_dim)
    out[0, : len(x)] = x
    return out


@pytest.mark.parametrize("guidance", [(4.0, 3.0), (3.5, 1.0)])
def test_moe_matches_diffusers_two_transformers(experts, guidance):
    from diffusers import UniPCMultistepScheduler, WanPipeline

    high, low = experts
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=12.0,
                                        solver_order=2, solver_type="bh2")
    ref = WanPipeline(tokenizer=None, text_encoder=None, transformer=high, transformer_2=low, vae=None,
                      scheduler=scheduler, boundary_ratio=BOUNDARY)
    calls: list[str] = []
    hooks = [m.register_forward_pre_hook(lambda *_a, n=n: calls.append(n)) for n, m in (("high", high), ("low", low))]
    steps, frames, h, w = 8, 5, 32, 48
    g = torch.Generator().manual_seed(5)
    cond, uncond = torch.randn(7, DIT.text_dim, generator=g), torch.randn(4, DIT.text_dim, generator=g)
    ref.scheduler.set_timesteps(steps)
    sigmas = tuple(ref.scheduler.sigmas.tolist())
    cfg = GenerationConfig(width=w, height=h, frames=frames, steps=steps, guidance=guidance[0], seed=11,
                           sigmas=sigmas, convention="custom", integer_timesteps=True)
    noise = make_noise(11, cfg.latent_shape)
    try:
        with torch.no_grad():
            theirs = ref(prompt_embeds=_pad(cond), negative_prompt_embeds=_pad(uncond), height=h, width=w,
                         num_frames=frames, num_inference_steps=steps, guidance_scale=guidance[0],
                         guidance_scale_2=guidance[1], latents=noise.clone(), output_type="latent",
                         return_dict=False)[0]
    finally:
        for hook in hooks:
            hook.remove()
    moe = WanMoE(_ours(high), _ours(low), boundary=BOUNDARY, guidance=guidance)
    pipe = CorePipeline(moe)
    with torch.no_grad():
        ours = pipe.sample_latents([cond], [uncond], cfg)
    assert rel_err(ours, latent_format.from_model(theirs)) <= 1e-4
    # diffusers evaluates cond and uncond in two calls per step whenever its first guidance scale is > 1
    assert len(calls) == 2 * steps
    per_step = calls[::2]
    assert pipe.moe_steps == per_step
    switch = per_step.index("low")
    assert 0 < switch < steps  # both experts ran
    assert all(t >= BOUNDARY * 1000 for t in ref.scheduler.timesteps[:switch].tolist())


def test_single_forward_picks_the_expert_of_the_timestep(experts):
    high, low = (_ours(t) for t in experts)
    moe = WanMoE(high, low, boundary=BOUNDARY)
    x = torch.randn(1, 16, 1, 4, 4)
    ctx = [torch.randn(3, DIT.text_dim)]
    with torch.no_grad():
        assert torch.equal(moe(x, torch.tensor([875]), ctx), high(x, torch.tensor([875]), ctx))
        assert torch.equal(moe(x, torch.tensor([874.9]), ctx), low(x, torch.tensor([874.9]), ctx))


def test_caches_start_afresh_at_the_switch(experts):
    """EasyCache on the MoE: each expert has its own session, so the low-noise expert computes its first step."""
    high, low = (_ours(t) for t in experts)
    pipe = CorePipeline(WanMoE(high, low, boundary=BOUNDARY, guidance=(4.0, 3.0)))
    g = torch.Generator().manual_seed(2)
    cond, uncond = [torch.randn(5, DIT.text_dim, generator=g)], [torch.randn(3, DIT.text_dim, generator=g)]
    cfg = GenerationConfig(width=32, height=32, frames=1, steps=12, shift=12.0, seed=1)
    with torch.no_grad():
        pipe.sample_latents(cond, uncond, cfg, cache="easycache")
    steps = pipe.moe_steps
    switch = steps.index("low")
    reports = pipe.cache_report.reports
    assert set(reports) == {"high", "low"}
    text = pipe.cache_report.text()
    assert "high-noise expert" in text and "low-noise expert" in text
    low_report = reports["low"]
    assert low_report.status[switch]["cond"] == COMPUTED


def test_mismatched_experts_are_refused():
    a = WanDiT(DIT)
    b = WanDiT(DIT.replace(in_dim=48, out_dim=48))
    with pytest.raises(ValueError, match="differ in latent channels in \\(16 vs 48\\)"):
        WanMoE(a, b)
    with pytest.raises(ValueError, match="boundary=1.5: must lie between 0 and 1"):
        WanMoE(a, WanDiT(DIT), boundary=1.5)


@pytest.mark.parametrize("change, message", [
    ({"num_heads": 4}, "differ in attention heads \\(2 vs 4\\)"),
    ({"dim": 128, "num_heads": 4}, "differ in width \\(64 vs 128\\)"),
    ({"ffn_dim": 256}, "differ in feed-forward width \\(128 vs 256\\)"),
    ({"num_layers": 3}, "differ in blocks \\(2 vs 3\\)"),
])
def test_experts_of_another_architecture_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        WanMoE(WanDiT(DIT), WanDiT(DIT.replace(**change)))


def test_i2v_a14b_experts_with_an_image_condition():
    """Wan 2.2 I2V-A14B: two 36-channel experts without a CLIP embedding (boundary 0.9,
    Wan2.2 wan/configs/wan_i2v_A14B.py line 36) sample with the image conditioning passed to both."""
    from wan_core.demo import tiny_random_models
    from wan_core.variants import I2V_A14B

    _dit, vae, _te = tiny_random_models(seed=0)
    cfg_i2v = DIT.replace(in_dim=36)
    torch.manual_seed(0)
    high, low = WanDiT(cfg_i2v).eval(), WanDiT(cfg_i2v).eval()
    calls = {"high": 0, "low": 0}
    hooks = [m.register_forward_hook(lambda *_a, n=n: calls.__setitem__(n, calls[n] + 1))
             for n, m in (("high", high), ("low", low))]
    moe = WanMoE(high, low, boundary=I2V_A14B.boundary, guidance=(3.5, 3.5))
    pipe = CorePipeline(moe, vae)
    cfg = GenerationConfig(width=32, height=32, frames=5, steps=6, shift=I2V_A14B.shift, seed=2)
    image = torch.rand(1, 32, 32, 3, generator=torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(4)
    cond, uncond = [torch.randn(5, DIT.text_dim, generator=g)], [torch.randn(3, DIT.text_dim, generator=g)]
    try:
        with torch.no_grad():
            lat = pipe.sample_latents(cond, uncond, cfg, image=pipe.image_condition(image, cfg))
    finally:
        for h in hooks:
            h.remove()
    assert lat.shape == (1, 16, 2, 4, 4) and torch.isfinite(lat).all()
    assert calls["high"] > 0 and calls["low"] > 0 and "low" in pipe.moe_steps
