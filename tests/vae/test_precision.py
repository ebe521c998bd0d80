"""Half precision: the VAE runs in bf16 and fp16 and stays close to its fp32 result (outputs are float32)."""
from __future__ import annotations

import pytest
import torch
from vae_testlib import rand_latents, rand_video

from wan_core.vae import load_vae


@pytest.mark.parametrize("dtype, tol", [(torch.bfloat16, 0.03), (torch.float16, 0.005)])
def test_half_precision_close_to_fp32(official_sd, vae, dtype, tol):
    half = load_vae(official_sd, dtype=dtype)
    assert half.dtype == dtype
    z = rand_latents(2, 3, 2, seed=41)
    ref, got = vae.decode(z), half.decode(z)
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    dec_err = (got - ref).abs().mean().item()
    video = rand_video(5, 24, 16, seed=42)
    mu_ref, mu = vae.encode(video), half.encode(video)
    assert mu.dtype == torch.float32 and torch.isfinite(mu).all()
    enc_err = ((mu - mu_ref).norm() / mu_ref.norm()).item()
    print(f"{dtype}: decode mean abs err {dec_err:.4f}, encode relative err {enc_err:.4f}")
    assert dec_err < tol and enc_err < tol
    # tiled and streamed in half precision too
    tiled = half.decode(z, tiling="on", tile=2, overlap=1)
    assert tiled.shape == ref.shape and torch.isfinite(tiled).all()


def test_input_dtype_and_device_are_independent_of_the_model(vae):
    """A float64 video on the CPU goes through the fp32 model chunk by chunk; results come back float32."""
    video = rand_video(5, 16, 16, seed=43).double()
    mu = vae.encode(video)
    assert mu.dtype == torch.float32 and mu.device == video.device
    assert torch.equal(mu, vae.encode(video.float()))
