"""Wan 2.2 DiT: 48 latent channels (TI2V-5B) and per-token timesteps ``t [B, L]`` against diffusers'
WanTransformer3DModel, which takes ``timestep [B, L]`` for Wan 2.2 TI2V (docs/wan22.md section 2; rel. 1e-4),
and the full-size TI2V-5B key set on the meta device (tests/dit/data/wan22_ti2v_5b_keys.txt)."""
from __future__ import annotations

import re

import pytest
import torch

from wan_core.config import DIT_PRESETS, DiTConfig, detect_dit_config
from wan_core.dit.model import WanDiT

from .helpers import DATA, diffusers_reference, export_official

CFG = DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32, in_dim=48, out_dim=48)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.fixture(scope="module")
def pair():
    ref = diffusers_reference(CFG, seed=22)
    ours = WanDiT(CFG)
    ours.load_state_dict(export_official({k: v.contiguous() for k, v in ref.state_dict().items()}))
    return ours.eval(), ref


def inputs(batch: int = 2, shape=(3, 4, 6)):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(batch, 48, *shape, generator=g)
    ctx = torch.zeros(batch, 512, CFG.text_dim)
    ctx[:, :7] = torch.randn(batch, 7, CFG.text_dim, generator=g)
    return x, ctx


def first_frame_timesteps(t: list[float], grid: tuple[int, int, int]) -> torch.Tensor:
    """TI2V's per-token timesteps: 0 on the first latent frame's tokens, ``t_b`` elsewhere, (f, h, w) order
    (Wan2.2 wan/textimage2video.py: ``temp_ts = (mask2[0][0][:, ::2, ::2] * timestep).flatten()``)."""
    f, h, w = grid
    mask = torch.ones(f, h, w)
    mask[0] = 0
    return torch.stack([(mask * v).flatten() for v in t])


@pytest.mark.parametrize("batch", [1, 2, 3])
def test_per_token_timesteps_match_diffusers(pair, batch):
    ours, ref = pair
    x, ctx = inputs(batch)
    t = first_frame_timesteps([900.0, 431.5, 17.0][:batch], (3, 2, 3))
    with torch.no_grad():
        expected = ref(hidden_states=x, timestep=t, encoder_hidden_states=ctx, return_dict=False)[0]
        out = ours(x, t, ctx)
    assert out.shape == (batch, 48, 3, 4, 6)
    assert rel_err(out, expected) <= 1e-4


def test_48_channels_per_sample_timesteps_match_diffusers(pair):
    ours, ref = pair
    x, ctx = inputs(2)
    t = torch.tensor([999.0, 250.0])
    with torch.no_grad():
        expected = ref(hidden_states=x, timestep=t, encoder_hidden_states=ctx, return_dict=False)[0]
        out = ours(x, t, ctx)
    assert rel_err(out, expected) <= 1e-4


def test_constant_per_token_timesteps_equal_per_sample(pair):
    ours, _ = pair
    x, ctx = inputs(2)
    t = torch.tensor([700.0, 300.0])
    with torch.no_grad():
        a = ours(x, t, ctx)
        b = ours(x, t[:, None].expand(2, 18), ctx)
    assert torch.allclose(a, b, rtol=0, atol=1e-5)


def test_wrong_timestep_shape_names_the_choices(pair):
    ours, _ = pair
    x, ctx = inputs(2)
    with pytest.raises(ValueError, match=r"\[2\] or \[2, 18\] \(one per patch token\), got \[2, 17\]"):
        ours(x, torch.zeros(2, 17), ctx)


def reference_shapes(name: str) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for line in (DATA / name).read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, shape = line.split("\t")[:2]
        shapes[key] = tuple(int(s) for s in re.findall(r"\d+", shape))
    return shapes


def test_ti2v_5b_keys_and_shapes_match_reference_list():
    with torch.device("meta"):
        sd = WanDiT(DIT_PRESETS["wan2.2-ti2v-5b"]).state_dict()
    ref = reference_shapes("wan22_ti2v_5b_keys.txt")
    assert {k: tuple(v.shape) for k, v in sd.items()} == ref
    assert sum(v.numel() for v in sd.values()) == 4_999_787_712  # the official class on meta (see the list header)


def test_detect_ti2v_5b_from_shapes():
    cfg = detect_dit_config(reference_shapes("wan22_ti2v_5b_keys.txt"))
    assert cfg == DIT_PRESETS["wan2.2-ti2v-5b"]
