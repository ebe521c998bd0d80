"""ComfyUI IMAGE <-> video tensor helpers, and the Wan 2.1 latent format (normalisation, preview)."""
from __future__ import annotations

import pytest
import torch

from wan_core import latent_format as lf
from wan_core.vae import image_to_video, video_to_image


def test_image_video_round_trip():
    image = torch.rand(5, 16, 24, 3)
    video = image_to_video(image)
    assert video.shape == (1, 3, 5, 16, 24) and video.min() >= -1 and video.max() <= 1
    assert torch.allclose(video[0, :, 2].permute(1, 2, 0), image[2] * 2 - 1)
    assert torch.allclose(video_to_image(video), image, atol=1e-6)


def test_alpha_is_dropped_and_batches_are_frame_major():
    rgba = torch.rand(3, 8, 8, 4)
    assert torch.equal(image_to_video(rgba), image_to_video(rgba[..., :3]))
    video = torch.stack([torch.full((3, 2, 4, 4), -1.0), torch.full((3, 2, 4, 4), 1.0)])  # [2, 3, 2, 4, 4]
    image = video_to_image(video)
    assert image.shape == (4, 4, 4, 3) and image.dtype == torch.float32
    assert image[:2].eq(0).all() and image[2:].eq(1).all()
    assert video_to_image(torch.full((1, 3, 1, 2, 2), 3.0)).eq(1).all()  # clamped


def test_helpers_reject_wrong_layouts():
    with pytest.raises(ValueError, match=r"IMAGE \[T, H, W, 3\]"):
        image_to_video(torch.rand(1, 3, 8, 8))
    with pytest.raises(ValueError, match=r"video \[B, 3, T, H, W\]"):
        video_to_image(torch.rand(3, 2, 8, 8))


def test_normalisation_constants_match_diffusers():
    from diffusers import AutoencoderKLWan

    with torch.device("meta"):
        config = AutoencoderKLWan().config
    assert list(lf.LATENTS_MEAN) == list(config.latents_mean)
    assert list(lf.LATENTS_STD) == list(config.latents_std)


def test_to_model_from_model():
    z = torch.randn(2, 16, 3, 4, 5, dtype=torch.float64)
    x = lf.to_model(z)
    mean = torch.tensor(lf.LATENTS_MEAN, dtype=torch.float64)
    std = torch.tensor(lf.LATENTS_STD, dtype=torch.float64)
    assert torch.allclose(x[:, 5], (z[:, 5] - mean[5]) / std[5])
    assert torch.allclose(lf.from_model(x), z)
    assert lf.WAN21.process_in(z).equal(x)
    with pytest.raises(ValueError, match=r"16 \(Wan 2.1 VAE\) or 48 \(Wan 2.2 VAE\) channels"):
        lf.to_model(torch.zeros(1, 32, 1, 2, 2))
    z48 = torch.randn(1, 48, 2, 2, 2, dtype=torch.float64)  # Wan 2.2 VAE latents (docs/wan22.md section 3)
    x48 = lf.to_model(z48)
    assert torch.allclose(x48[:, 47], (z48[:, 47] - lf.WAN22_LATENTS_MEAN[47]) / lf.WAN22_LATENTS_STD[47])
    assert torch.allclose(lf.from_model(x48), z48)


def test_preview_rgb():
    factors = torch.tensor(lf.LATENT_RGB_FACTORS)
    assert factors.shape == (16, 3) and len(lf.LATENT_RGB_BIAS) == 3
    x = torch.zeros(1, 16, 2, 3, 4)
    x[0, 6, 1, 2, 3] = 1.0  # a pixel holding latent channel 6 only
    rgb = lf.preview_rgb(x)
    assert rgb.shape == (1, 2, 3, 4, 3)
    expected = ((factors[6] + torch.tensor(lf.LATENT_RGB_BIAS)) + 1) / 2
    assert torch.allclose(rgb[0, 1, 2, 3], expected.clamp(0, 1))
    assert torch.allclose(rgb[0, 0, 0, 0], ((torch.tensor(lf.LATENT_RGB_BIAS) + 1) / 2))
