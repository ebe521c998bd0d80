"""Image conditioning and end to end image-to-video (docs/i2v.md section 4): the official mask layout against a
hand-built mask, the conditioning against diffusers' WanImageToVideoPipeline.prepare_latents, final latents against
WanImageToVideoPipeline on tiny random models (I2V and FLF2V, rel. <= 1e-4), the conditioning latent decoding back to
the image (PSNR, built-in demo VAE), and the one-line errors before sampling."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from wan_core import latent_format
from wan_core.i2v.clip_vision import CLIPVisionEncoder
from wan_core.config import DiTConfig
from wan_core.dit.keys import diffusers_to_official
from wan_core.dit.loader import load_dit
from wan_core.dit.model import WanDiT
from wan_core.i2v import condition_mask, image_condition
from wan_core.pipeline import GenerationConfig, WanPipeline as CorePipeline
from wan_core.sampling import make_noise
from wan_core.vae.loader import load_vae

CLIP = 24
I2V = DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32, in_dim=36, image_dim=CLIP)
FLF2V = I2V.replace(image_pos_len=10)  # 2 x 5 tokens of the tiny 28 px CLIP (514 = 2 x 257 in the real one)
MEAN = torch.tensor([0.48145466, 0.4578275, 0.40821073]).view(1, 3, 1, 1)
STD = torch.tensor([0.26862954, 0.26130258, 0.27577711]).view(1, 3, 1, 1)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


def test_mask_matches_hand_built_layout():
    """9 frames -> 3 latent frames. I2V: latent frame 0 all four mask channels 1, the rest 0. FLF2V: the last
    latent frame covers pixel frames 5..8, so only its channel 3 (pixel frame 8, the last) is 1."""
    i2v = condition_mask(9, 2, 3)
    flf = condition_mask(9, 2, 3, last_image=True)
    assert i2v.shape == flf.shape == (1, 4, 3, 2, 3)
    hand = torch.zeros(4, 3)
    hand[:, 0] = 1
    assert torch.equal(i2v[0, :, :, 0, 0], hand) and bool((i2v == i2v[..., :1, :1]).all())
    hand[3, 2] = 1
    assert torch.equal(flf[0, :, :, 0, 0], hand)
    assert torch.equal(condition_mask(1, 1, 1)[0, :, :, 0, 0], torch.ones(4, 1))


def _randomize(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            scale = (p[0].numel() if p.dim() > 1 else 1) ** -0.5
            ones = p.dim() == 1 and bool((p == 1).all())
            p.copy_((1.0 if ones else 0.0) + torch.randn(p.shape, generator=g) * scale)


class OfficialClipProcessor:
    """diffusers' image_processor slot filled with the official preprocessing (Wan2.1 wan/modules/clip.py lines
    527-537, written out here), so both pipelines encode the same pixels: [N, 3, H, W] in [0, 1] -> 28x28."""

    def __call__(self, images, return_tensors="pt"):
        from transformers import BatchFeature

        x = torch.cat(list(images) if isinstance(images, (list, tuple)) else [images]).float()
        x = F.interpolate(x * 2 - 1, size=(28, 28), mode="bicubic", align_corners=False) * 0.5 + 0.5
        return BatchFeature({"pixel_values": (x - MEAN) / STD})


@pytest.fixture(scope="module")
def models():
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanImageToVideoPipeline, WanTransformer3DModel
    from transformers import CLIPVisionConfig, CLIPVisionModel

    out = {}
    vae = AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=1, attn_scales=[],
                           temperal_downsample=[False, True, True]).eval()
    _randomize(vae, 2)
    torch.manual_seed(0)
    clip = CLIPVisionModel(CLIPVisionConfig(hidden_size=CLIP, intermediate_size=48, num_hidden_layers=3,
                                            num_attention_heads=2, image_size=28, patch_size=14, hidden_act="gelu"))
    _randomize(clip, 3)
    clip.eval()
    ours_vae = load_vae(vae.state_dict(), dtype=torch.float32)
    for name, cfg in (("i2v", I2V), ("flf2v", FLF2V)):
        transformer = WanTransformer3DModel(
            patch_size=(1, 2, 2), num_attention_heads=cfg.num_heads, attention_head_dim=cfg.head_dim, in_channels=36,
            out_channels=16, text_dim=cfg.text_dim, freq_dim=256, ffn_dim=cfg.ffn_dim, num_layers=cfg.num_layers,
            cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, image_dim=CLIP,
            added_kv_proj_dim=cfg.dim, pos_embed_seq_len=cfg.image_pos_len or None).eval()
        _randomize(transformer, 1)
        scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=5.0,
                                            solver_order=2, solver_type="bh2")
        ref = WanImageToVideoPipeline(tokenizer=None, text_encoder=None, vae=vae, scheduler=scheduler,
                                      image_processor=OfficialClipProcessor(), image_encoder=clip,
                                      transformer=transformer)
        dit = load_dit({diffusers_to_official(k): v for k, v in transformer.state_dict().items()},
                       dtype=torch.float32, config=cfg)
        out[name] = (ref, CorePipeline(dit, ours_vae, None, clip_vision=CLIPVisionEncoder(clip)))
    return out


def _images(h: int, w: int):
    g = torch.Generator().manual_seed(9)
    first = torch.rand(1, h, w, 3, generator=g)
    last = torch.rand(1, h, w, 3, generator=g)
    return first, last


def test_conditioning_matches_diffusers_prepare_latents(models):
    ref, ours = models["flf2v"]
    h, w, frames = 32, 48, 9
    first, last = _images(h, w)
    for last_image in (None, last):
        mine = image_condition(ours.vae, first, w, h, frames, last_image)
        with torch.no_grad():
            _lat, theirs = ref.prepare_latents(
                first.permute(0, 3, 1, 2) * 2 - 1, 1, 16, h, w, frames, torch.float32, torch.device("cpu"),
                None, torch.zeros(1, 16, 3, h // 8, w // 8),
                None if last_image is None else last_image.permute(0, 3, 1, 2) * 2 - 1)
        assert mine.image_latent.shape == theirs.shape == (1, 20, 3, h // 8, w // 8)
        assert torch.equal(mine.image_latent[:, :4], theirs[:, :4])
        assert rel_err(mine.image_latent[:, 4:], theirs[:, 4:]) <= 1e-4


@pytest.mark.parametrize("variant", ["i2v", "flf2v"])
def test_end_to_end_matches_diffusers_image_to_video(models, variant):
    ref, ours = models[variant]
    steps, frames, h, w = 4, 5, 32, 48
    g = torch.Generator().manual_seed(5)
    cond = [torch.randn(7, 32, generator=g)]
    uncond = [torch.randn(4, 32, generator=g)]
    first, last = _images(h, w)
    last_image = last if variant == "flf2v" else None

    def pad(x):
        out = torch.zeros(1, 512, 32)
        out[0, : len(x[0])] = x[0]
        return out

    ref.scheduler.set_timesteps(steps)
    sigmas = tuple(ref.scheduler.sigmas.tolist())
    cfg = GenerationConfig(width=w, height=h, frames=frames, steps=steps, guidance=5.0, seed=11, sigmas=sigmas,
                           convention="custom", integer_timesteps=True)
    noise = make_noise(11, cfg.latent_shape)
    with torch.no_grad():
        theirs = ref(image=first.permute(0, 3, 1, 2), last_image=None if last_image is None else
                     last_image.permute(0, 3, 1, 2), prompt_embeds=pad(cond), negative_prompt_embeds=pad(uncond),
                     height=h, width=w, num_frames=frames, num_inference_steps=steps, guidance_scale=5.0,
                     latents=noise.clone(), output_type="latent", return_dict=False)[0]
        condition = ours.image_condition(first, cfg, last_image)
        assert condition.clip_tokens is not None
        assert condition.clip_tokens.shape == (1, 10 if variant == "flf2v" else 5, CLIP)
        lat = ours.sample_latents(cond, uncond, cfg, image=condition)
        batched = ours.sample_latents(cond, uncond, cfg.replace(batched_cfg=True), image=condition, cache="off")
    err = rel_err(lat, latent_format.from_model(theirs))
    print(f"{variant}: final latents vs WanImageToVideoPipeline, rel. error {err:.2e}")
    assert err <= 1e-4
    assert rel_err(batched, lat) <= 1e-5  # batched CFG, uncached: same video


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    return (10 * torch.log10(4.0 / F.mse_loss(a, b))).item()  # signals in [-1, 1]: peak-to-peak 2


def test_conditioning_latent_decodes_back_to_the_image():
    """The conditioning's first latent frame is the VAE encoding of the resized image: decoded with the built-in
    demo VAE (trained), frame 0 reproduces it (PSNR printed; docs/i2v.md section 6). A wrong normalisation or
    channel order would not decode back."""
    from wan_core.demo import builtin_paths
    from wan_core.demo.data import make_clip

    vae_path = builtin_paths()["vae"]  # the packaged demo VAE: trained, so the PSNR means something
    vae = load_vae(vae_path, dtype=torch.float32)
    video, _caption = make_clip(3, width=64, height=64, frames=9)
    image = video[:, 0].permute(1, 2, 0)[None].add(1).div(2)  # IMAGE [1, 64, 64, 3] in [0, 1]
    big = F.interpolate(image.permute(0, 3, 1, 2), scale_factor=1.5, mode="bilinear").permute(0, 2, 3, 1)
    with torch.no_grad():
        condition = image_condition(vae, big.clamp(0, 1), 64, 64, 9)  # resized 96 -> 64 on the way
        z = latent_format.from_model(condition.image_latent[:, 4:])
        decoded = vae.decode(z)[0, :, 0]
        # the VAE's own round trip of the frame: what the conditioning can reach at best
        direct = vae.decode(vae.encode(video[None, :, :1]))[0, :, 0]
    target = video[:, 0]
    value, best = psnr(decoded, target), psnr(direct, target)
    print(f"first-frame PSNR of the conditioning latent (demo VAE, 96->64 px resize): {value:.1f} dB "
          f"(the VAE's own round trip: {best:.1f} dB)")
    # a wrong normalisation or channel order lands far below both. The floor is the shipped VAE's quality: run 7's
    # decodes frame 0 of this clip at 15.7 dB (18.1 dB over 8 held-out clips; run 5's VAE: 22.3), docs/demo_model.md
    assert value > 14 and value > best - 1.5


def test_errors_before_sampling(models):
    _ref, ours = models["i2v"]
    _ref2, flf = models["flf2v"]
    cfg = GenerationConfig(width=48, height=32, frames=5, steps=2, guidance=1.0)
    first, last = _images(32, 48)
    cond = [torch.randn(3, 32)]
    t2v = CorePipeline(WanDiT(DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=1, text_dim=32)).eval(),
                       ours.vae, None)
    no_clip = CorePipeline(ours.dit, ours.vae, None)
    condition = ours.image_condition(first, cfg)
    cases = [
        (lambda: ours.sample_latents(cond, None, cfg), "image-to-video model: give it a start image"),
        (lambda: t2v.image_condition(first, cfg), "text-to-video model; a start image needs"),
        (lambda: t2v.sample_latents(cond, None, cfg, image=condition), "text-to-video model; a start image"),
        (lambda: no_clip.image_condition(first, cfg), "needs the CLIP vision encoding"),
        (lambda: ours.sample_latents(cond, None, cfg.replace(width=64), image=condition),
         "made for 48x32, 5 frames"),
        (lambda: ours.image_condition(first, cfg, last), "takes one start image"),
        (lambda: flf.image_condition(first, cfg), "first-last-frame model: it needs a last image"),
        (lambda: ours.image_condition(first[0, :, :, 0], cfg), r"expected an IMAGE \[1, H, W, 3\]"),
    ]
    for fn, pattern in cases:
        with pytest.raises(ValueError, match=pattern) as info:
            fn()
        assert "\n" not in str(info.value)



def test_caches_and_attention_backends_take_the_image(models):
    """The conditioning enters the DiT as inputs, so the diffusion caches and the attention backends work on it:
    exact (text and image K/V once) equals off; the approximate caches and int8 attention stay close."""
    from wan_core.attention.dispatch import AttentionDispatch

    _ref, ours = models["i2v"]
    cfg = GenerationConfig(width=48, height=32, frames=5, steps=6, guidance=5.0, seed=2)
    first, _ = _images(32, 48)
    cond, uncond = [torch.randn(5, 32)], [torch.randn(3, 32)]
    with torch.no_grad():
        condition = ours.image_condition(first, cfg)
        off = ours.sample_latents(cond, uncond, cfg, cache="off", image=condition)
        exact = ours.sample_latents(cond, uncond, cfg, cache="exact", image=condition)
        assert torch.equal(exact, off)
        assert ours.cache_report is not None
        for preset in ("wan", "easycache"):  # (teacache/magcache: published coefficients are T2V-only)
            approx = ours.sample_latents(cond, uncond, cfg, cache=preset, image=condition)
            assert approx.shape == off.shape and torch.isfinite(approx).all(), preset
        saved = ours.dit.attention
        try:
            ours.dit.attention = AttentionDispatch("int8")
            int8 = ours.sample_latents(cond, uncond, cfg, cache="off", image=condition)
        finally:
            ours.dit.attention = saved
    assert rel_err(int8, off) < 0.1
