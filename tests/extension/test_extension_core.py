"""Clip extension core (wan_core.extension): known head frames follow the flow path and end exact under every
solver, colour matching against float64 references, the continuation conditioning's masks by hand, joins keep the
previous frames bit for bit, chains continue in latent space, and bad requests are one line."""
import numpy as np
import pytest
import torch

from wan_core import latent_format
from wan_core.demo import tiny_random_models
from wan_core.extension import (Extension, from_latent, from_pixels, join_latents, join_pixels, match_colour,
                                run_chain)
from wan_core.i2v.conditioning import condition_mask
from wan_core.i2v.continuation import latent_head_condition, pixel_head_condition
from wan_core.pipeline import GenerationConfig, WanPipeline
from wan_core.sampling import build_schedule, sample
from wan_core.sampling.first_frame import first_frame_timesteps
from wan_core.sampling.known_frames import KnownFramesGuidance
from wan_core.sampling.schedule import ScheduleConfig


@pytest.mark.parametrize("solver", ["euler", "unipc", "dpm++"])
def test_known_head_follows_the_flow_path_and_ends_exact(solver):
    torch.manual_seed(0)
    z = torch.randn(1, 4, 2, 3, 3, dtype=torch.float64).float()
    x0 = torch.randn(1, 4, 5, 3, 3)
    seen = []

    def model(x, sigma, t):  # any velocity; the head's must be overridden
        seen.append((float(sigma), x[:, :, :2].clone()))
        return torch.tanh(x) * 0.7 + 0.1

    guide = KnownFramesGuidance(model, z, x0[:, :, :2].clone())
    schedule = build_schedule(ScheduleConfig(steps=6, shift=3.0))
    x = guide.finish(sample(guide, x0.clone(), schedule, solver))
    assert torch.equal(x[:, :, :2], z)
    for sigma, head in seen:  # the model always saw the head on the straight path from the noise to z
        expected = (1 - sigma) * z.double() + sigma * x0[:, :, :2].double()
        torch.testing.assert_close(head.double(), expected, atol=1e-6, rtol=0)
    assert not torch.equal(x[:, :, 2:], x0[:, :, 2:])


def test_first_frame_timesteps_hold_k_frames():
    t = first_frame_timesteps(torch.tensor([700.0, 300.0]), (4, 2, 3), frames=2)
    expected = torch.tensor([0.0] * 12 + [1.0] * 12)
    torch.testing.assert_close(t, torch.stack([expected * 700, expected * 300]))


def _reference_mean_std(x, src, ref):
    x, src, ref = (np.asarray(a, dtype=np.float64) for a in (x, src, ref))
    return (x - src.mean()) / src.std() * ref.std() + ref.mean()


def _reference_histogram(x, src, ref):
    s, r = np.sort(src.ravel().astype(np.float64)), np.sort(ref.ravel().astype(np.float64))
    q = np.interp(x, s, np.linspace(0, 1, s.size))
    out = np.interp(q, np.linspace(0, 1, r.size), r)
    out = np.where(x < s[0], x - s[0] + r[0], out)
    return np.where(x > s[-1], x - s[-1] + r[-1], out)


@pytest.mark.parametrize("method", ["mean-std", "histogram"])
def test_colour_match_against_float64_reference(method):
    g = torch.Generator().manual_seed(1)
    reference = torch.rand(1, 3, 3, 8, 8, generator=g) * 1.2 - 0.6
    drawn = (reference * 0.8 + torch.tensor([0.1, -0.05, 0.2]).view(1, 3, 1, 1, 1)).clamp(-1, 1)
    frames = (torch.rand(1, 3, 4, 8, 8, generator=g) * 1.2 - 0.6)
    out = match_colour(frames, drawn, reference, method)
    ref_fn = _reference_mean_std if method == "mean-std" else _reference_histogram
    for c in range(3):
        expected = np.clip(ref_fn(frames[0, c].numpy(), drawn[0, c].numpy(), reference[0, c].numpy()), -1, 1)
        np.testing.assert_allclose(out[0, c].numpy(), expected, atol=2e-5)
    # the drift it measured is undone on the drawn overlap itself
    back = match_colour(drawn, drawn, reference, method)
    assert (back - reference).abs().mean() < 0.01
    assert torch.equal(match_colour(frames, drawn, reference, "off"), frames)


def test_condition_mask_with_a_head_by_hand():
    mask = condition_mask(9, 1, 1, head=5)[0, :, :, 0, 0]  # [4, 3]: 9 frames -> 3 latent frames
    # frame 0 fills all 4 channels of latent 0; frames 1-4 are latent 1's channels; 5-8 latent 2's
    assert mask.tolist() == [[1, 1, 0], [1, 1, 0], [1, 1, 0], [1, 1, 0]]
    assert condition_mask(9, 1, 1, head=6)[0, :, 2, 0, 0].tolist() == [1, 0, 0, 0]


class _FakeVAE:
    device, dtype = torch.device("cpu"), torch.float32

    def encode(self, video, **kw):  # [1, 3, T, H, W] -> [1, 16, 1 + (T-1)/4, H/8, W/8]: the first frame's mean
        t = (video.shape[2] - 1) // 4 + 1
        pooled = torch.nn.functional.avg_pool2d(video[:, :, ::4][:, :, :t].mean(1), 8)
        return pooled[:, None].expand(1, 16, t, *pooled.shape[2:]).contiguous()


def test_pixel_and_latent_head_conditions():
    head = torch.rand(1, 3, 5, 16, 16) * 2 - 1
    cond = pixel_head_condition(_FakeVAE(), head, 13, None)
    assert cond.image_latent.shape == (1, 20, 4, 2, 2)
    assert cond.image_latent[0, :4, :, 0, 0].tolist() == [[1, 1, 0, 0]] * 4
    z = torch.randn(1, 16, 3, 2, 2)
    svi = latent_head_condition(z, 5, given=1)
    assert svi.image_latent[0, :4, :, 0, 0].tolist() == [[1, 0, 0, 0, 0]] * 4  # only the anchor is marked given
    assert torch.equal(svi.image_latent[:, 4:, :3], z) and not svi.image_latent[:, 4:, 3:].any()  # zero padding
    assert latent_head_condition(z, 5).image_latent[0, 0, :, 0, 0].tolist() == [1, 1, 1, 0, 0]
    with pytest.raises(ValueError, match="head < 3"):
        latent_head_condition(z, 3)


def test_joins_keep_the_previous_frames():
    dit, vae, _ = tiny_random_models(seed=0)
    ext = Extension(overlap=5, colour="mean-std")
    previous = torch.rand(1, 3, 9, 32, 32) * 2 - 1
    cont = from_pixels(vae, dit, previous, 13, ext)
    assert cont.method == "first_frame" and cont.head.shape[2] == 2  # 5 frames -> 2 latent frames, held clean
    clip = torch.rand(1, 3, 13, 32, 32) * 2 - 1
    joined = join_pixels(previous, clip, cont)
    assert joined.shape[2] == 9 + 13 - 5 and torch.equal(joined[:, :, :9], previous)
    latent = torch.randn(1, 16, 6, 4, 4)
    lcont = from_latent(dit, latent, 13, ext)
    assert torch.equal(lcont.head, torch.cat([latent[:, :, :1], latent[:, :, -1:]], dim=2))  # anchor + motion
    new = torch.randn(1, 16, 4, 4, 4)
    chain = join_latents(latent, new, lcont)
    assert torch.equal(chain, torch.cat([latent, new[:, :, 2:]], dim=2))


def test_request_and_method_refusals():
    dit, _, _ = tiny_random_models(seed=0)
    for bad, match in (({"overlap": 6}, "4n\\+1"), ({"colour": "vivid"}, "colour match"),
                       ({"conditioning": "magic"}, "conditioning")):
        with pytest.raises(ValueError, match=match):
            Extension(**bad)
    with pytest.raises(ValueError, match="needs an image-to-video model"):
        Extension(conditioning="svi").method(dit)
    assert Extension().method(dit) == "first_frame"  # auto: the head clean at timestep 0
    assert Extension().method(dit, windowed=True) == "replace"  # windows: known frames instead
    assert Extension(conditioning="replace").method(dit) == "replace"
    with pytest.raises(ValueError, match="at least 9 frames"):
        Extension(overlap=5).check_clip(5)
    with pytest.raises(ValueError, match="64x64 but the new clip is 32x32"):
        Extension().check_previous(9, (64, 64), (32, 32))


def test_chain_from_text_and_from_pixels_on_a_tiny_model():
    dit, vae, te = tiny_random_models(seed=0)
    pipe = WanPipeline(dit, vae, te)
    cfg = GenerationConfig(width=32, height=32, frames=13, steps=2, seed=3)
    with torch.inference_mode():
        embeds = pipe.encode_prompts(["a red ball"], None)
        frames = run_chain(pipe, cfg, 3, Extension(overlap=5), lambda i: embeds)  # from frames (the default)
        assert frames.video.shape[2] == 13 + 2 * (13 - 5) and frames.new_frames == 29
        assert [c.source for c in frames.continuations] == ["pixels", "pixels"]
        result = run_chain(pipe, cfg, 3, Extension(overlap=5), lambda i: embeds, latent_space=True)
        assert result.latents.shape[2] == 4 + 2 * (4 - 2)  # each clip adds its latents after anchor + motion
        assert result.video.shape[2] == 1 + 4 * (result.latents.shape[2] - 1)
        # clip 1 on its own: the same latents as the chain holds
        cont = from_latent(dit, result.latents[:, :, :4], 13, Extension(overlap=5))
        one = pipe.sample_latents(*embeds, cfg.replace(seed=4), **cont.sample_inputs())
        torch.testing.assert_close(one[:, :, 2:], result.latents[:, :, 4:6], atol=1e-5, rtol=0)
        assert torch.allclose(one[:, :, :2], cont.head, atol=1e-5)
        renoised = from_latent(dit, result.latents[:, :, :4], 13, Extension(overlap=5, conditioning="replace"))
        assert set(renoised.sample_inputs()) == {"known"}
        other = pipe.sample_latents(*embeds, cfg.replace(seed=4), **renoised.sample_inputs())
        assert torch.allclose(other[:, :, :2], cont.head, atol=1e-5) and not torch.allclose(other, one, atol=1e-3)
        previous = torch.rand(1, 3, 9, 32, 32) * 2 - 1
        ext = run_chain(pipe, cfg, 1, Extension(overlap=5), lambda i: embeds, previous)
        assert ext.video.shape[2] == 9 + 13 - 5 and torch.equal(ext.video[:, :, :9], previous)
        with pytest.raises(ValueError, match="clips=0"):
            run_chain(pipe, cfg, 0, Extension(), lambda i: embeds)


def _i2v_dit():
    from wan_core.config import DiTConfig
    from wan_core.dit.model import WanDiT

    torch.manual_seed(0)
    dit = WanDiT(DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32, in_dim=36))  # Wan 2.2 I2V
    with torch.no_grad():
        for p in dit.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return dit.eval()


def test_one_frame_head_is_the_official_start_image_conditioning():
    from wan_core.i2v import image_condition

    _, vae, _ = tiny_random_models(seed=0)
    image = torch.rand(1, 32, 32, 3)
    with torch.inference_mode():
        official = image_condition(vae, image, 32, 32, 13)
        ours = pixel_head_condition(vae, image.permute(0, 3, 1, 2)[:, :, None] * 2 - 1, 13)
    torch.testing.assert_close(ours.image_latent, official.image_latent, atol=1e-6, rtol=0)


def test_image_to_video_models_continue_through_their_conditioning():
    dit = _i2v_dit()
    _, vae, _ = tiny_random_models(seed=0)
    pipe = WanPipeline(dit, vae, None)
    cond = [torch.randn(5, 32)]
    cfg = GenerationConfig(width=32, height=32, frames=13, steps=2, guidance=1.0)
    previous = torch.rand(1, 3, 9, 32, 32) * 2 - 1
    with torch.inference_mode():
        cont = from_pixels(vae, dit, previous, 13, Extension(overlap=5))
        assert cont.method == "image" and cont.image.image_latent[0, :4, :, 0, 0].tolist() == [[1, 1, 0, 0]] * 4
        out = pipe.sample_latents(cond, None, cfg, **cont.sample_inputs())
        assert out.shape == (1, 16, 4, 4, 4) and torch.isfinite(out).all()
        chain = torch.randn(1, 16, 4, 4, 4)
        svi = from_latent(dit, chain, 13, Extension(overlap=5, conditioning="svi"))
        assert svi.method == "svi" and svi.image.image_latent[0, 0, :, 0, 0].tolist() == [1, 0, 0, 0]
        torch.testing.assert_close(svi.image.image_latent[:, 4:, :2], latent_format.to_model(svi.head))
        assert torch.isfinite(pipe.sample_latents(cond, None, cfg, **svi.sample_inputs())).all()
    for text_only in ("replace", "clean"):
        with pytest.raises(ValueError, match="for text-to-video models"):
            Extension(conditioning=text_only).method(dit)


def test_ti2v_continues_with_its_first_frame_latent_and_windows_with_known_frames():
    """TI2V-5B: the head (2 latent frames) held clean at timestep 0 on its tokens; under context windows the same
    latents go in as known frames; either way the clip starts with the head itself."""
    from wan_core.config import DiTConfig
    from wan_core.dit.model import WanDiT
    from wan_core.sampling.context_windows import ContextWindows
    from wan_core.vae import TINY_VAE22, WanVAE
    from wan_core.demo import random_vae_model

    torch.manual_seed(0)
    dit = WanDiT(DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32, in_dim=48, out_dim=48)).eval()
    vae = WanVAE(random_vae_model(TINY_VAE22, 1))
    pipe = WanPipeline(dit, vae)
    cond = [torch.randn(4, 32)]
    cfg = GenerationConfig(width=64, height=32, frames=17, steps=2, guidance=1.0)
    with torch.inference_mode():
        cont = from_pixels(vae, dit, torch.rand(1, 3, 9, 32, 64) * 2 - 1, 17, Extension(overlap=5))
        assert cont.method == "first_frame" and cont.head.shape == (1, 48, 2, 2, 4)
        out = pipe.sample_latents(cond, None, cfg, **cont.sample_inputs())
        torch.testing.assert_close(out[:, :, :2], cont.head, atol=1e-5, rtol=0)
        windows = cfg.replace(context=ContextWindows.from_frames(9, 4))
        with pytest.raises(ValueError, match="does not combine with context windows"):
            pipe.sample_latents(cond, None, windows, first_frame=cont.head)
        inputs = cont.sample_inputs(windowed=True)
        assert set(inputs) == {"known"}
        out = pipe.sample_latents(cond, None, windows, **inputs)
        torch.testing.assert_close(out[:, :, :2], cont.head, atol=1e-5, rtol=0)
