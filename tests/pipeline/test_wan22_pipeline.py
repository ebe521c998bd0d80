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
    with pytest.raises(ValueError, match=r"^start latent: 16 latent channels .* works on 48-channel latents.*"
                                         r"WanCore Empty Video Latent \(Wan 2.2 TI2V-5B\)"):
        WanPipeline(dit, vae22).sample_latents(emb(), None, GenerationConfig(width=32, height=32, frames=5, steps=2,
                                                                             denoise=0.5, guidance=1.0), latent=z)


def test_ti2v_first_frame_matches_diffusers_expand_timesteps():
    """TI2V-5B image-to-video vs diffusers' WanImageToVideoPipeline(expand_timesteps=True) (the official TI2V
    path: frame 0 = the image latent at timestep 0, per-token timesteps) on tiny random models, batch 2."""
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanImageToVideoPipeline, WanTransformer3DModel

    from wan_core import latent_format
    from wan_core.dit.keys import diffusers_to_official
    from wan_core.dit.loader import load_dit
    from wan_core.sampling import make_noise
    from wan_core.vae import load_vae
    from wan_core.vae.keys import diffusers22_to_official

    from .test_vs_diffusers import _randomize, rel_err

    torch.manual_seed(0)
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=32, in_channels=48, out_channels=48,
        text_dim=DIT48.text_dim, freq_dim=256, ffn_dim=128, num_layers=2, cross_attn_norm=True,
        qk_norm="rms_norm_across_heads", eps=1e-6).eval()
    _randomize(transformer, 1)
    vae = AutoencoderKLWan(base_dim=8, decoder_base_dim=12, z_dim=48, is_residual=True, in_channels=12,
                           out_channels=12, patch_size=2, scale_factor_spatial=16,
                           latents_mean=list(latent_format.WAN22_LATENTS_MEAN),
                           latents_std=list(latent_format.WAN22_LATENTS_STD)).eval()
    _randomize(vae, 2)
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=5.0,
                                        solver_order=2, solver_type="bh2")
    ref = WanImageToVideoPipeline(tokenizer=None, text_encoder=None, image_encoder=None, image_processor=None,
                                  transformer=transformer, vae=vae, scheduler=scheduler, expand_timesteps=True)
    dit = load_dit({diffusers_to_official(k): v for k, v in transformer.state_dict().items()}, dtype=torch.float32,
                   config=DIT48)
    ours = WanPipeline(dit, load_vae({diffusers22_to_official(k): v for k, v in vae.state_dict().items()}))
    steps, frames, h, w, b = 4, 9, 32, 64, 2
    image = torch.rand(1, 3, h, w, generator=torch.Generator().manual_seed(4))
    cond, uncond = emb(5) * b, emb(3) * b
    ref.scheduler.set_timesteps(steps)
    cfg = GenerationConfig(prompt=("a", "b"), width=w, height=h, frames=frames, steps=steps, guidance=3.0, seed=7,
                           sigmas=tuple(ref.scheduler.sigmas.tolist()), convention="custom", integer_timesteps=True)
    noise = make_noise(7, (b, 48, 3, h // 16, w // 16))

    def pad(items):
        out = torch.zeros(len(items), 512, DIT48.text_dim)
        for i, x in enumerate(items):
            out[i, : len(x)] = x
        return out

    with torch.no_grad():
        theirs = ref(image=image, prompt_embeds=pad(cond), negative_prompt_embeds=pad(uncond), height=h, width=w,
                     num_frames=frames, num_inference_steps=steps, guidance_scale=3.0, latents=noise.clone(),
                     output_type="latent", return_dict=False)[0]
        z0 = ours.vae.encode((image * 2 - 1).unsqueeze(2))
        lat = ours.sample_latents(cond, uncond, cfg, first_frame=z0)
    assert lat.shape == (b, 48, 3, 2, 4)
    assert torch.allclose(lat[:, :, :1], z0.expand(b, -1, -1, -1, -1), atol=1e-5)  # the image stays frame 0
    assert rel_err(lat, latent_format.from_model(theirs)) <= 1e-4
