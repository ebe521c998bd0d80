"""Streamed (chunk by chunk through time) WF-VAE encode/decode equals the whole-sequence one, including the
one-frame look-ahead of the trilinear time upsampling; a single spatial tile equals the untiled result."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from wan_core.wfvae.autoencoder import WFVAE
from wan_core.wfvae.config import TINY_WFVAE, TINY_WFVAE_888
from wan_core.wfvae.model import build_model

SMALL = replace(TINY_WFVAE, base_channels=2, encoder_energy_flow=3, decoder_energy_flow=2)
SMALL_888 = replace(TINY_WFVAE_888, base_channels=2, encoder_energy_flow=3, decoder_energy_flow=2)
CONFIGS = [SMALL, replace(SMALL, t_interpolation="nearest"), SMALL_888]


def tiny(cfg) -> WFVAE:
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))  # LayerNorm affine away from 1 / 0
    return WFVAE(model)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.temporal_factor}x8x8-{c.t_interpolation}")
@pytest.mark.parametrize("latents", [1, 3])
def test_streamed_equals_whole_sequence(cfg, latents):
    vae = tiny(cfg)
    video = torch.rand(1, 3, cfg.video_frames(latents), 16, 24) * 2 - 1
    with torch.no_grad():
        whole_mean = vae.model.encode_mean(video)
        whole_video = vae.model.decode(whole_mean)
    mean = vae.encode(video, tiling="off")
    assert torch.allclose(mean, whole_mean, atol=1e-4, rtol=0)
    decoded = vae.decode(whole_mean, tiling="off")
    assert decoded.shape == whole_video.shape == video.shape
    assert torch.allclose(decoded, whole_video, atol=1e-4, rtol=0)


def test_one_tile_equals_untiled_and_tiles_blend():
    vae = tiny(SMALL)
    z = torch.randn(1, 4, 2, 3, 5)
    untiled = vae.decode(z, tiling="off")
    assert torch.allclose(vae.decode(z, tiling="on", tile=8, overlap=2), untiled, atol=1e-4, rtol=0)
    tiled = vae.decode(z, tiling="on", tile=3, overlap=1)
    assert tiled.shape == untiled.shape and bool(torch.isfinite(tiled).all())
    video = torch.rand(1, 3, 5, 24, 40) * 2 - 1
    assert torch.allclose(vae.encode(video, tiling="on", tile=8), vae.encode(video, tiling="off"), atol=1e-4)


def test_bad_inputs_are_refused_in_one_line():
    vae = tiny(SMALL_888)
    for bad, words in ((torch.zeros(1, 3, 5, 16, 16), "1 \\+ 8k frames; got 5, nearest valid: 1 or 9"),
                       (torch.zeros(1, 3, 9, 12, 16), "multiples of 8"),
                       (torch.zeros(3, 9, 16, 16), "video tensor")):
        with pytest.raises(ValueError, match=words):
            vae.encode(bad)
    with pytest.raises(ValueError, match="raw latents \\[B, 4"):
        vae.decode(torch.zeros(1, 16, 2, 2, 2))


def test_non_finite_output_is_named_per_chunk():
    from wan_core.numerics import NonFiniteError

    vae = tiny(SMALL)
    with torch.no_grad():
        vae.model.decoder.conv_out.bias[0] = float("nan")
    for tiling in ("off", "on"):
        with pytest.raises(NonFiniteError, match=r"^WF-VAE decode output of <model>: \d+ of \d+ values are NaN/Inf"):
            vae.decode(torch.randn(1, 4, 2, 2, 2), tiling=tiling, tile=2, overlap=1)
