"""fp32 parity with diffusers.AutoencoderKLWan (the reference of docs/wan_spec.md section 7.1), every tensor randomised.

Weights reach our loader under official names (exported with our rules), under diffusers names, and from
files written here (.safetensors, .pth, prefixed all-in-one, diffusers folder). Tolerance: 1e-5 max abs.
"""
from __future__ import annotations

import pytest
import torch
from vae_testlib import make_reference, official_state_dict, rand_latents, rand_video

from wan_core.vae import TINY_VAE_1RES, load_vae

TOL = 1e-5
H, W = 48, 32  # non-square; latents 6 x 4


def _ref_encode(ref, video):
    with torch.no_grad():
        return ref.encode(video).latent_dist.mode()


def _ref_decode(ref, z):
    with torch.no_grad():
        return ref.decode(z).sample


@pytest.mark.parametrize("frames", [1, 5, 9, 17])
def test_encode_matches_diffusers(reference, vae, frames):
    video = rand_video(frames, H, W, seed=frames)
    expected = _ref_encode(reference, video)
    got = vae.encode(video)
    assert got.shape == (1, 16, 1 + (frames - 1) // 4, H // 8, W // 8) == expected.shape
    assert got.dtype == torch.float32
    err = (got - expected).abs().max().item()
    print(f"encode {frames} frames: max abs err {err:.2e} (|mu| max {expected.abs().max().item():.2f})")
    assert err <= TOL


@pytest.mark.parametrize("frames", [1, 5, 9, 17])
def test_decode_matches_diffusers(reference, vae, frames):
    lat = 1 + (frames - 1) // 4
    z = rand_latents(lat, H // 8, W // 8, seed=100 + frames)
    expected = _ref_decode(reference, z)
    got = vae.decode(z)
    assert got.shape == (1, 3, frames, H, W) == expected.shape
    err = (got - expected).abs().max().item()
    print(f"decode {lat} latent frames: max abs err {err:.2e}")
    assert err <= TOL
    assert 0.05 < expected.std().item() and (expected.abs() < 1).float().mean() > 0.5  # not a saturated output


def test_batch_of_two_matches_diffusers(reference, vae):
    video = rand_video(5, 16, 24, seed=7, batch=2)
    assert (vae.encode(video) - _ref_encode(reference, video)).abs().max() <= TOL
    z = rand_latents(2, 2, 3, seed=8, batch=2)
    assert (vae.decode(z) - _ref_decode(reference, z)).abs().max() <= TOL


def test_loaded_from_diffusers_names(reference):
    vae = load_vae(reference.state_dict())
    z = rand_latents(3, 3, 2, seed=3)
    assert (vae.decode(z) - _ref_decode(reference, z)).abs().max() <= TOL
    video = rand_video(9, 24, 16, seed=4)
    assert (vae.encode(video) - _ref_encode(reference, video)).abs().max() <= TOL


def test_other_depth_and_latent_width():
    """num_res_blocks=1, z_dim=4, dim_mult (1,2,2,2): the index rules and the model are not Wan-2.1-only."""
    ref = make_reference(seed=5, base_dim=8, z_dim=4, dim_mult=[1, 2, 2, 2], num_res_blocks=1)
    for sd in (official_state_dict(ref, num_res_blocks=1), ref.state_dict()):
        vae = load_vae(sd)
        assert vae.config == TINY_VAE_1RES
        video = rand_video(9, 16, 32, seed=6)
        assert (vae.encode(video) - _ref_encode(ref, video)).abs().max() <= TOL
        z = rand_latents(3, 2, 4, seed=7, channels=4)
        assert (vae.decode(z) - _ref_decode(ref, z)).abs().max() <= TOL


def _files(tmp_path, reference, official_sd):
    from safetensors.torch import save_file

    st = tmp_path / "wan_2.1_vae.safetensors"
    save_file(official_sd, str(st))
    pth = tmp_path / "Wan2.1_VAE.pth"
    torch.save(official_sd, pth)
    allinone = tmp_path / "all_in_one.safetensors"
    prefixed = {f"vae.{k}": v for k, v in official_sd.items()}
    prefixed["model.diffusion_model.head.modulation"] = torch.zeros(1, 2, 8)
    save_file(prefixed, str(allinone))
    sd_style = tmp_path / "first_stage.safetensors"
    save_file({f"first_stage_model.{k}": v for k, v in official_sd.items()}, str(sd_style))
    folder = tmp_path / "pipeline"
    reference.save_pretrained(folder / "vae")
    return {"safetensors": st, "pth": pth, "vae.-prefixed": allinone, "first_stage_model.-prefixed": sd_style,
            "diffusers pipeline folder": folder, "diffusers vae folder": folder / "vae"}


def test_loaded_from_files(tmp_path, reference, official_sd, vae):
    z = rand_latents(2, 3, 2, seed=11)
    expected = vae.decode(z)
    assert (expected - _ref_decode(reference, z)).abs().max() <= TOL
    for what, path in _files(tmp_path, reference, official_sd).items():
        loaded = load_vae(path)
        assert loaded.config == vae.config, what
        assert torch.equal(loaded.decode(z), expected), what


def test_dtype_and_device_arguments(official_sd):
    vae = load_vae(official_sd, dtype=torch.bfloat16, device="cpu")
    assert vae.dtype == torch.bfloat16 and vae.device.type == "cpu"
    half = {k: v.half() for k, v in official_sd.items()}
    assert load_vae(half).dtype == torch.float16  # stored precision kept by default
    assert load_vae(half, dtype=torch.float32).dtype == torch.float32
