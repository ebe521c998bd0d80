"""RIFLEx in the DiT's RoPE (wan_core/dit/riflex.py, docs/long_video.md): the formula against a float64 hand
computation, ``None`` / ``off`` bit-exact, k out of range refused, ``auto``'s k per model, and a tiny model whose
output changes only through the temporal angles."""
from __future__ import annotations

import math

import pytest
import torch

import wan_core.dit.model as dit_model
from wan_core.config import DIT_PRESETS
from wan_core.demo.model import DEMO_DIT
from wan_core.dit.model import WanDiT
from wan_core.dit.riflex import (
    RIFLEx,
    auto_k,
    identify_k,
    parse_setting,
    periods,
    resolve_riflex,
    set_riflex,
    use_riflex,
)
from wan_core.dit.rope import axis_frequencies, rope_angles, rope_frequencies
from wan_core.dit.runtime import runtime_of
from wan_core.variants import VARIANTS

WAN_DIMS = (44, 42, 42)  # head_dim 128


def hand_frequencies(dim: int, theta: float, k: int | None = None, length: int | None = None) -> list[float]:
    """theta^(-2(j-1)/d), j = 1..d/2, with the k-th (1-based) replaced by 0.9 * 2*pi / length: plain float64."""
    out = [theta ** (-2 * (j - 1) / dim) for j in range(1, dim // 2 + 1)]
    if k is not None and length is not None:
        out[k - 1] = 0.9 * 2 * math.pi / length
    return out


def rope_angles_before(grid, dims, theta=10000.0):
    """rope_angles as it was before RIFLEx (kept here to prove None is bit-identical)."""
    parts = []
    for axis, (n, d) in enumerate(zip(grid, dims)):
        pos = torch.arange(0, n, dtype=torch.float64)
        ang = torch.outer(pos, theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d))
        shape = [1, 1, 1, d // 2]
        shape[axis] = n
        parts.append(ang.view(shape).expand(*grid, d // 2))
    return torch.cat(parts, dim=-1).reshape(-1, sum(dims) // 2)


@pytest.mark.parametrize("k,length", [(6, 42), (1, 10), (22, 84), (4, 1)])
def test_frequency_matches_a_float64_hand_computation(k, length):
    got = axis_frequencies(44, 10000.0, RIFLEx(k, length))
    want = torch.tensor(hand_frequencies(44, 10000.0, k, length), dtype=torch.float64)
    assert got.dtype == torch.float64
    assert (got - want).abs().max().item() <= 1e-12
    assert got[k - 1].item() == pytest.approx(0.9 * 2 * math.pi / length, abs=1e-15)


def test_angles_change_only_the_temporal_component_k():
    grid, r = (5, 2, 3), RIFLEx(6, 5)
    plain, changed = rope_angles(grid, WAN_DIMS), rope_angles(grid, WAN_DIMS, riflex=r)
    diff = (plain != changed).any(dim=0).nonzero().flatten().tolist()
    assert diff == [r.k - 1]  # one column of 64: the frame axis's k-th frequency
    frames = torch.arange(5, dtype=torch.float64).repeat_interleave(6)
    assert (changed[:, r.k - 1] - frames * (0.9 * 2 * math.pi / 5)).abs().max().item() <= 1e-12


def test_none_is_bit_identical_to_before():
    grid = (7, 3, 4)
    assert torch.equal(rope_angles(grid, WAN_DIMS, riflex=None), rope_angles_before(grid, WAN_DIMS))
    assert torch.equal(rope_frequencies(grid, WAN_DIMS, riflex=None), rope_frequencies(grid, WAN_DIMS))
    ang = rope_angles_before(grid, WAN_DIMS)
    before = torch.polar(torch.ones_like(ang), ang).to(torch.complex64)
    assert torch.equal(rope_frequencies(grid, WAN_DIMS), before)
    assert resolve_riflex("off", DIT_PRESETS["wan2.1-t2v-1.3b"], 100) is None


def tiny_model() -> WanDiT:
    torch.manual_seed(0)
    model = WanDiT(DIT_PRESETS["tiny"]).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # the official init zeroes the head: randomise so the output depends on everything
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    return model


def run(model, frames: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 16, frames, 4, 4, generator=g)
    with torch.no_grad():
        return model(x, torch.tensor([500.0]), [torch.randn(3, 32, generator=g)])


def test_tiny_forward_off_is_bit_identical_and_riflex_changes_only_the_angles(monkeypatch):
    model = tiny_model()
    plain = run(model, 3)
    with use_riflex(model, None):
        assert torch.equal(run(model, 3), plain)
    r = RIFLEx(2, 3)
    with use_riflex(model, r):
        assert runtime_of(model).riflex == r
        changed = run(model, 3)
    assert runtime_of(model).riflex is None  # restored
    assert not torch.equal(changed, plain)
    assert torch.equal(run(model, 3), plain)

    # the same output from the plain model given RIFLEx's angles by hand: the angles are the only change
    dims, theta = model.config.rope_dims, model.config.rope_theta

    def hand_frequencies_of(grid, dims_, theta_, device=None, riflex=None):
        assert riflex is None
        ang = rope_angles_before(grid, dims_, theta_)
        ang[:, r.k - 1] = torch.arange(grid[0], dtype=torch.float64).repeat_interleave(grid[1] * grid[2]) \
            * (0.9 * 2 * math.pi / r.length)
        return torch.polar(torch.ones_like(ang), ang).to(torch.complex64).to(device)

    monkeypatch.setattr(dit_model, "rope_frequencies", hand_frequencies_of)
    assert (dims, theta) == ((12, 10, 10), 10000.0)
    assert torch.equal(run(model, 3), changed)


def test_one_latent_frame_is_unchanged():
    model = tiny_model()
    plain = run(model, 1)
    for k in (1, 6):
        with use_riflex(model, RIFLEx(k, 1)):  # position 0 only: every temporal angle is 0 whatever the frequency
            assert torch.equal(run(model, 1), plain)


def test_k_outside_the_range_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^RIFLEx k=0: must be an integer >= 1"):
        RIFLEx(0, 10)
    with pytest.raises(ValueError, match=r"^RIFLEx length=0: must be an integer >= 1 latent frame$"):
        RIFLEx(3, 0)
    with pytest.raises(ValueError, match=r"^RIFLEx k=23 is outside the temporal RoPE's range 1\.\.22$"):
        resolve_riflex(23, DIT_PRESETS["wan2.1-t2v-14b"], 42)
    with pytest.raises(ValueError, match=r"^RIFLEx k=23 is outside the temporal RoPE's range 1\.\.22$"):
        axis_frequencies(44, 10000.0, RIFLEx(23, 42))
    with pytest.raises(ValueError, match=r"range 1\.\.6$"):  # tiny: head_dim 32, temporal d = 12
        set_riflex(tiny_model(), RIFLEx(7, 3))
    with pytest.raises(ValueError, match=r"^RIFLEx setting 'sometimes': expected auto, off or an integer k$"):
        resolve_riflex("sometimes", DIT_PRESETS["tiny"], 3)
    assert parse_setting(" 6 ") == 6 and parse_setting("AUTO") == "auto"


@pytest.mark.parametrize("preset", ["wan2.1-t2v-14b", "wan2.1-t2v-1.3b", "wan2.1-i2v-14b", "wan2.2-t2v-a14b"])
def test_auto_picks_6_for_wan(preset):
    with torch.device("meta"):
        model = WanDiT(DIT_PRESETS[preset])
    assert auto_k(model.config) == (6, 21)  # 81 training frames
    assert resolve_riflex("auto", model.config, 21) is None  # at the training length nothing changes
    assert resolve_riflex("auto", model.config, 42) == RIFLEx(6, 42)
    assert resolve_riflex(4, model.config, 10) == RIFLEx(4, 10)  # an explicit k always applies


def test_auto_for_the_demo_model_and_an_unknown_one():
    # the demo's k (variants table) is the paper's rule with N = its 5 training latent frames (17 frames)
    assert VARIANTS["wancore-demo"].riflex.k == identify_k(10000.0, DEMO_DIT.rope_dims[0], 5) == 1
    assert DEMO_DIT.rope_dims[0] == 44
    assert auto_k(DEMO_DIT) == (1, 5)
    assert resolve_riflex("auto", DEMO_DIT, 10) == RIFLEx(1, 10)
    assert resolve_riflex("auto", DEMO_DIT, 5) is None
    # unknown variant: the rule with N = 21 on its own temporal dims
    tiny = DIT_PRESETS["tiny"]
    assert auto_k(tiny) == (identify_k(10000.0, 12, 21), 21)


def test_identification_rule_periods():
    assert periods(10000.0, 44)[:6] == [6, 10, 15, 22, 34, 51]  # round(2*pi * 10000^((j-1)/22))
    assert identify_k(10000.0, 44, 21) == 4 and identify_k(10000.0, 44, 51) == 6
