"""Wan 2.2 VAE (docs/wan22.md section 3): fp32 parity with diffusers' AutoencoderKLWan in its Wan 2.2
configuration (``is_residual=True``, 2x2 patchify, 48 latent channels; tolerance 1e-5 max abs), streaming and
tiling equal to the whole-sequence form, the full-size key set of the official class, and the official <->
diffusers key rules against tests/vae/data/wan22_vae_keymap_official_to_diffusers.tsv."""
from __future__ import annotations

import re

import pytest
import torch
from safetensors.torch import save_file
from vae_testlib import DATA, rand_latents, rand_video, randomize_

from wan_core.vae import TINY_VAE22, WAN22_VAE, build_model, detect_vae_config, load_vae
from wan_core.vae.keys import diffusers22_to_official, official22_to_diffusers

TOL = 1e-5
H, W = 64, 96  # non-square; latents 4 x 6


def make_reference22(seed: int = 0):
    from diffusers import AutoencoderKLWan

    torch.manual_seed(seed)
    ref = AutoencoderKLWan(base_dim=TINY_VAE22.base_dim, decoder_base_dim=TINY_VAE22.decoder_base_dim, z_dim=48,
                           is_residual=True, in_channels=12, out_channels=12, patch_size=2, scale_factor_spatial=16,
                           temperal_downsample=[False, True, True])
    return randomize_(ref, seed)


@pytest.fixture(scope="module")
def reference22():
    return make_reference22()


@pytest.fixture(scope="module")
def official22(reference22):
    out = {}
    for k, v in reference22.state_dict().items():
        name = diffusers22_to_official(k)
        assert name is not None, k
        out[name] = v.clone()
    return out


@pytest.fixture(scope="module")
def vae22(official22):
    return load_vae(official22)


def test_detects_the_wan22_layout(vae22):
    assert vae22.config == TINY_VAE22 and vae22.config.spatial_factor == 16 and vae22.config.temporal_factor == 4


@pytest.mark.parametrize("frames", [1, 5, 9])
def test_encode_matches_diffusers(reference22, vae22, frames):
    video = rand_video(frames, H, W, seed=frames)
    with torch.no_grad():
        expected = reference22.encode(video).latent_dist.mode()
    got = vae22.encode(video)
    assert got.shape == (1, 48, 1 + (frames - 1) // 4, H // 16, W // 16) == expected.shape
    assert (got - expected).abs().max().item() <= TOL


@pytest.mark.parametrize("frames", [1, 5, 9])
def test_decode_matches_diffusers(reference22, vae22, frames):
    lat = 1 + (frames - 1) // 4
    z = rand_latents(lat, H // 16, W // 16, seed=100 + frames, channels=48)
    with torch.no_grad():
        expected = reference22.decode(z).sample
    got = vae22.decode(z)
    assert got.shape == (1, 3, frames, H, W) == expected.shape
    assert (got - expected).abs().max().item() <= TOL
    assert expected.std().item() > 0.05 and (expected.abs() < 1).float().mean() > 0.5  # not saturated
    assert got.abs().max() <= 1.0  # clamped


def test_whole_sequence_form_equals_the_stream(vae22):
    """The streamed encode/decode (feature cache, pieces of one frame) equals one whole-sequence pass."""
    model = vae22.model
    video = rand_video(9, 32, 32, seed=3)
    z = rand_latents(3, 2, 2, seed=4, channels=48)
    with torch.no_grad():
        assert (vae22.encode(video) - model.encode_full(video)).abs().max() <= TOL
        assert (vae22.decode(z) - model.decode_full(z)).abs().max() <= TOL


def test_tiled_decode_and_encode_close_to_untiled(vae22):
    z = rand_latents(2, 6, 6, seed=9, channels=48)
    full = vae22.decode(z, tiling="off")
    tiled = vae22.decode(z, tiling="on", tile=(4, 4), overlap=(2, 2))
    assert tiled.shape == full.shape == (1, 3, 5, 96, 96)
    assert (tiled - full).abs().mean() < 0.2  # tiles see less context: close, not equal
    video = rand_video(5, 96, 96, seed=2)
    enc = vae22.encode(video, tiling="on", tile=(64, 64), overlap=(32, 32))
    assert enc.shape == (1, 48, 2, 6, 6)


def test_loads_from_files_and_diffusers_folder(reference22, official22, tmp_path):
    save_file({f"first_stage_model.{k}": v.contiguous() for k, v in official22.items()}, tmp_path / "c.safetensors")
    torch.save(official22, tmp_path / "Wan2.2_VAE.pth")
    reference22.save_pretrained(tmp_path / "diffusers")
    z = rand_latents(2, 2, 3, seed=1, channels=48)
    with torch.no_grad():
        expected = reference22.decode(z).sample
    for src in ("c.safetensors", "Wan2.2_VAE.pth", "diffusers"):
        got = load_vae(tmp_path / src).decode(z)
        assert (got - expected).abs().max() <= TOL, src


def test_full_size_keys_match_the_official_class():
    ref = {}
    for line in (DATA / "wan22_vae_keys.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, shape = line.split("\t")[:2]
        ref[key] = tuple(int(s) for s in re.findall(r"\d+", shape))
    sd = build_model(WAN22_VAE).state_dict()
    assert {k: tuple(v.shape) for k, v in sd.items()} == ref
    assert len(sd) == 196 and sum(v.numel() for v in sd.values()) == 704_688_668
    assert detect_vae_config(ref) == WAN22_VAE


def test_key_rules_reproduce_the_tsv_both_ways():
    rows = [line.split("\t") for line in (DATA / "wan22_vae_keymap_official_to_diffusers.tsv").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert len(rows) == 196
    for off, dif, _shape in rows:
        assert official22_to_diffusers(off) == dif, off
        assert diffusers22_to_official(dif) == off, dif
