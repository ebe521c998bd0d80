"""Key names and shapes: our rules vs the team's key map (.tsv), the official key list (.txt) and diffusers."""
from __future__ import annotations

import pytest
import torch
from vae_testlib import DATA

from wan_core.vae import TINY_VAE_1RES, WAN21_VAE, build_model, detect_vae_config
from wan_core.vae.config import VAEConfig
from wan_core.vae.keys import diffusers_to_official, official_to_diffusers


def _rows(name: str):
    for line in (DATA / name).read_text().splitlines():
        if line and not line.startswith("#"):
            yield line.split("\t")


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(s) for s in text.strip("[]").split(",") if s.strip())


def test_rules_reproduce_keymap_tsv_exactly():
    rows = list(_rows("wan_vae_keymap_official_to_diffusers.tsv"))
    assert len(rows) == 194
    for official, diffusers, _shape_text in rows:
        assert official_to_diffusers(official) == diffusers, official
        assert diffusers_to_official(diffusers) == official, diffusers


def test_wan21_model_on_meta_matches_official_key_list():
    expected = {k: _shape(s) for k, s, _dtype in _rows("wan_vae_keys.txt")}
    model = build_model(WAN21_VAE, "meta")
    got = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert got == expected
    assert len(got) == 194
    assert sum(v.numel() for v in model.state_dict().values()) == 126_892_531
    assert all(p.device.type == "meta" for p in model.parameters())


def test_detect_config_from_official_key_list():
    shapes = {k: _shape(s) for k, s, _dtype in _rows("wan_vae_keys.txt")}
    cfg = detect_vae_config(shapes)
    assert cfg == WAN21_VAE and cfg.name == "wan2.1"
    assert (cfg.spatial_factor, cfg.temporal_factor) == (8, 4)


@pytest.mark.parametrize("config, diffusers_kw", [
    (WAN21_VAE, {}),
    (TINY_VAE_1RES, {"base_dim": 8, "z_dim": 4, "dim_mult": [1, 2, 2, 2], "num_res_blocks": 1}),
    (VAEConfig(base_dim=8, z_dim=16, dim_mult=(1, 2, 4), temporal_downsample=(True, False), num_res_blocks=3),
     {"base_dim": 8, "z_dim": 16, "dim_mult": [1, 2, 4], "num_res_blocks": 3, "temperal_downsample": [True, False]}),
])
def test_rules_cover_diffusers_model_exactly(config, diffusers_kw):
    """diffusers' own module tree (on meta) renamed by our rules == our module tree, shapes included."""
    from diffusers import AutoencoderKLWan

    with torch.device("meta"):
        ref = AutoencoderKLWan(**diffusers_kw)
    nrb = config.num_res_blocks
    renamed = {diffusers_to_official(k, nrb): tuple(v.shape) for k, v in ref.state_dict().items()}
    ours = {k: tuple(v.shape) for k, v in build_model(config).state_dict().items()}
    assert renamed == ours
    assert {official_to_diffusers(k, nrb) for k in ours} == set(ref.state_dict())
    assert detect_vae_config(ours) == config


def test_unknown_keys_map_to_none():
    assert diffusers_to_official("encoder.something.weight") is None
    assert diffusers_to_official("model.diffusion_model.head.modulation") is None
    assert official_to_diffusers("blocks.0.self_attn.q.weight") is None
