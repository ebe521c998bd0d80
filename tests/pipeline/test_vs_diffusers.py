"""End to end: our pipeline vs diffusers.WanPipeline on tiny random models with identical weights,
embeddings, initial noise and schedule (issue 4 acceptance: latents and frames rel. error <= 1e-4)."""
from __future__ import annotations

import pytest
import torch

from wan_core import latent_format
from wan_core.config import DiTConfig
from wan_core.dit.keys import diffusers_to_official
from wan_core.dit.loader import load_dit
from wan_core.pipeline import GenerationConfig, WanPipeline as CorePipeline
from wan_core.sampling import make_noise
from wan_core.vae.loader import load_vae

DIT = DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32)


def _randomize(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            scale = (p[0].numel() if p.dim() > 1 else 1) ** -0.5
            base = 1.0 if name.endswith(("gamma", "norm_q.weight", "norm_k.weight")) else 0.0
            p.copy_(base + torch.randn(p.shape, generator=g) * scale)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.fixture(scope="module")
def models():
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel

    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=DIT.num_heads, attention_head_dim=DIT.head_dim, in_channels=16,
        out_channels=16, text_dim=DIT.text_dim, freq_dim=256, ffn_dim=DIT.ffn_dim, num_layers=DIT.num_layers,
        cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6).eval()
    _randomize(transformer, 1)
    vae = AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=1, attn_scales=[],
                           temperal_downsample=[False, True, True]).eval()
    _randomize(vae, 2)
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=5.0,
                                        solver_order=2, solver_type="bh2")
    ref = WanPipeline(tokenizer=None, text_encoder=None, transformer=transformer, vae=vae, scheduler=scheduler)
    ours = CorePipeline(
        load_dit({diffusers_to_official(k): v for k, v in transformer.state_dict().items()},
                 dtype=torch.float32, config=DIT),
        load_vae(vae.state_dict(), dtype=torch.float32), None)
    return ref, ours


def test_pipeline_matches_diffusers(models):
    ref, ours = models
    steps, frames, h, w = 6, 5, 32, 48
    g = torch.Generator().manual_seed(5)
    cond = [torch.randn(7, DIT.text_dim, generator=g)]
    uncond = [torch.randn(4, DIT.text_dim, generator=g)]

    def pad(x):
        out = torch.zeros(1, 512, DIT.text_dim)
        out[0, : len(x[0])] = x[0]
        return out

    ref.scheduler.set_timesteps(steps)
    sigmas = tuple(ref.scheduler.sigmas.tolist())
    cfg = GenerationConfig(width=w, height=h, frames=frames, steps=steps, guidance=5.0, seed=11,
                           sigmas=sigmas, convention="custom", integer_timesteps=True)  # as diffusers passes
    noise = make_noise(11, cfg.latent_shape)
    with torch.no_grad():
        theirs = ref(prompt_embeds=pad(cond), negative_prompt_embeds=pad(uncond), height=h, width=w,
                     num_frames=frames, num_inference_steps=steps, guidance_scale=5.0, latents=noise.clone(),
                     output_type="latent", return_dict=False)[0]
        theirs_raw = latent_format.from_model(theirs)
        lat = ours.sample_latents(cond, uncond, cfg)
        assert rel_err(lat, theirs_raw) <= 1e-4
        frames_theirs = ref.vae.decode(theirs_raw).sample
        frames_ours = ours.decode(lat)
    assert frames_ours.shape == (1, 3, frames, h, w)
    assert rel_err(frames_ours, frames_theirs.clamp(-1, 1)) <= 1e-4


def test_same_seed_same_video_and_different_seeds_differ(models):
    _, ours = models
    cond = [torch.randn(5, DIT.text_dim)]
    uncond = [torch.zeros(1, DIT.text_dim)]
    cfg = GenerationConfig(width=32, height=32, frames=5, steps=3, seed=1)
    with torch.no_grad():
        a = ours.sample_latents(cond, uncond, cfg)
        b = ours.sample_latents(cond, uncond, cfg)
        c = ours.sample_latents(cond, uncond, cfg.replace(seed=2))
    assert torch.equal(a, b)
    assert (a - c).abs().max() > 1e-3


def test_guidance_one_runs_single_pass(models):
    _, ours = models
    calls = []
    dit = ours.dit
    handle = dit.register_forward_hook(lambda m, i, o: calls.append(1))
    try:
        with torch.no_grad():
            ours.sample_latents([torch.randn(5, DIT.text_dim)], None,
                                GenerationConfig(width=32, height=32, frames=1, steps=3, guidance=1.0))
    finally:
        handle.remove()
    assert len(calls) == 3
