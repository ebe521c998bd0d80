"""Skiparse: index maps vs the seed's einops rearrangements, inverse, padding without leaks, schedules, DiT.

References: einops ``rearrange`` with the seed's patterns (single: ``b (g k) d -> (k b) g d``, group:
``b (n m k) d -> (m b) (n k) d``); float64 naive attention run on each sub-sequence separately, with the
sub-sequence members written from the algorithm's definition (single: i % k == r; group: (i // k) % k == m).
"""
from __future__ import annotations

import pytest
import torch
from einops import rearrange

import wan_core
from wan_core.attention import (AttentionDispatch, SkiparseSchedule, group_lengths, register_backend,
                                sdpa_attention, skiparse_attention, skiparse_index, skiparse_permute,
                                skiparse_unpermute, suv_stage_blocks)

from .helpers import CFG, Recorder, dit_inputs, naive_attention, random_dit_state

KS = (2, 4, 8)
MODES = ("single", "group")


def seed_rearrange(x: torch.Tensor, k: int, mode: str) -> torch.Tensor:
    """The seed's rearrangement of ``x [B, L, C]`` -> ``[k*B, L/k, C]``."""
    if mode == "single":
        return rearrange(x, "b (g k) d -> (k b) g d", k=k)
    return rearrange(x, "b (n m k) d -> (m b) (n k) d", m=k, k=k)


def seed_reverse(x: torch.Tensor, k: int, mode: str) -> torch.Tensor:
    if mode == "single":
        return rearrange(x, "(k b) g d -> b (g k) d", k=k)
    return rearrange(x, "(m b) (n k) d -> b (n m k) d", m=k, k=k)


def members(length: int, k: int, mode: str, g: int) -> list[int]:
    """Token positions of sub-sequence g, from the definition (not from the implementation)."""
    if mode == "single":
        return [i for i in range(length) if i % k == g]
    return [i for i in range(length) if (i // k) % k == g]


def to_blc(x: torch.Tensor) -> torch.Tensor:
    """``[B, N, L, d] -> [B, L, N*d]`` (the seed's layout, heads folded into channels)."""
    return x.transpose(1, 2).flatten(2)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", KS)
def test_permutation_equals_seed_rearrange(k, mode):
    torch.manual_seed(k)
    length = 3 * k * k
    x = torch.randn(2, 3, length, 5)
    y = skiparse_permute(x, k, mode)
    assert y.shape == (2 * k, 3, length // k, 5)
    assert torch.equal(to_blc(y), seed_rearrange(to_blc(x), k, mode))
    # the index map is the same permutation
    ar = torch.arange(length).view(1, length, 1)
    assert torch.equal(skiparse_index(length, k, mode), seed_rearrange(ar, k, mode).flatten())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", KS)
def test_inverse_restores_exactly(k, mode):
    torch.manual_seed(0)
    for length in (2 * k * k, 2 * k * k + 3):  # with and without padding
        x = torch.randn(2, 3, length, 4)
        y = skiparse_permute(x, k, mode)
        assert torch.equal(skiparse_unpermute(y, k, mode, length), x)
    y = torch.randn(2 * k, 3, 2 * k, 4)
    assert torch.equal(to_blc(skiparse_unpermute(y, k, mode, 2 * k * k)), seed_reverse(to_blc(y), k, mode))


def per_subsequence_reference(q, k, v, sparse_k, mode):
    """Each sub-sequence attended on its own, no pad tokens at all (float64)."""
    b, n, length, d = q.shape
    out = torch.zeros(b, n, length, v.shape[-1], dtype=torch.float64)
    for g in range(sparse_k):
        idx = members(length, sparse_k, mode, g)
        if idx:
            out[:, :, idx] = naive_attention(q[:, :, idx], k[:, :, idx], v[:, :, idx])
    return out


@pytest.mark.parametrize("masks", [True, False], ids=["mask", "split"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", KS)
def test_padded_output_equals_separate_subsequences(k, mode, masks):
    torch.manual_seed(1)
    length = 2 * k * k + 2 * k + 1  # not a multiple of k^2 (nor of k)
    q, kk, v = (torch.randn(2, 2, length, 16) for _ in range(3))
    out = skiparse_attention(q, kk, v, k, mode, sdpa_attention, masks=masks)
    ref = per_subsequence_reference(q, kk, v, k, mode)
    assert out.shape == q.shape
    assert (out.double() - ref).abs().max().item() <= 1e-5


def test_unmasked_padding_would_leak():
    """Without the key mask the zero pad keys take probability mass: the reference above catches it."""
    torch.manual_seed(2)
    k, mode, length = 4, "single", 37
    q, kk, v = (torch.randn(1, 2, length, 16) for _ in range(3))
    leaky = skiparse_unpermute(sdpa_attention(*(skiparse_permute(t, k, mode) for t in (q, kk, v))), k, mode, length)
    assert (leaky.double() - per_subsequence_reference(q, kk, v, k, mode)).abs().max().item() > 1e-3


def test_group_lengths_from_definition():
    for k, mode, length in [(4, "single", 37), (4, "group", 37), (2, "group", 9), (8, "single", 130)]:
        assert group_lengths(length, k, mode) == [len(members(length, k, mode, g)) for g in range(k)]


def test_k1_equals_dense_exactly():
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 2, 50, 16) for _ in range(3))
    dense = sdpa_attention(q, k, v)
    for mode in MODES:
        assert torch.equal(skiparse_attention(q, k, v, 1, mode, sdpa_attention), dense)


def test_dit_all_k1_schedule_equals_dense_exactly():
    sd = random_dit_state()
    x, t, ctx = dit_inputs()
    dense = wan_core.load_dit(sd, dtype=torch.float32, config=CFG)
    sparse1 = wan_core.load_dit(sd, dtype=torch.float32, config=CFG, skiparse="custom", skiparse_ks=[1] * 6)
    with torch.no_grad():
        assert torch.equal(dense(x, t, ctx), sparse1(x, t, ctx))


def test_dit_osp13_runs_sparse_and_differs_from_dense():
    rec = Recorder()
    register_backend("test_recorder", rec, masks=True)
    sd = random_dit_state()
    x, t, ctx = dit_inputs()  # grid 3 x 14 x 14 = 588 tokens, not a multiple of 16
    dense = wan_core.load_dit(sd, dtype=torch.float32, config=CFG)
    sparse = wan_core.load_dit(sd, dtype=torch.float32, config=CFG, attention="test_recorder", skiparse="osp13")
    with torch.no_grad():
        a = dense(x, t, ctx)
        b = sparse(x, t, ctx)
    self_calls = rec.calls[0::2]  # block order: self, cross, self, cross, ...
    cross_calls = rec.calls[1::2]
    assert len(self_calls) == CFG.num_layers
    for i, c in enumerate(self_calls):
        if i in (2, 3):  # osp13 on 6 blocks: 0, 1, 4, 5 dense
            assert tuple(c["q"].shape) == (4, 2, 148, 128)  # k*B sub-sequences of (588 + 4 pad) / 4
            assert c["mask"] is not None and c["mask"].shape == (4, 1, 1, 148)
        else:
            assert tuple(c["q"].shape) == (1, 2, 588, 128) and c["mask"] is None
    assert all(tuple(c["q"].shape) == (1, 2, 588, 128) for c in cross_calls)  # cross-attention stays dense
    rel = ((a - b).norm() / a.norm()).item()
    print(f"osp13 vs dense, tiny DiT: relative L2 difference {rel:.3e}")
    assert torch.isfinite(b).all() and 1e-4 < rel < 0.5


def test_schedule_osp13_layout():
    s = SkiparseSchedule.osp13(30)
    assert [s.plan(i) for i in (0, 1, 28, 29)] == [None] * 4
    assert s.plan(2) == (4, "single") and s.plan(3) == (4, "group") and s.plan(27) == (4, "group")
    assert sum(k > 1 for k in s.ks) == 26


@pytest.mark.parametrize("layers,sizes", [(30, (2, 4, 6, 6, 6, 4, 2)), (40, (2, 4, 8, 12, 8, 4, 2)),
                                          (32, (2, 4, 6, 8, 6, 4, 2))])
def test_schedule_suv_u_shape(layers, sizes):
    assert suv_stage_blocks(layers) == sizes
    s = SkiparseSchedule.suv(layers)
    expect = [k for n, k in zip(sizes, (1, 2, 4, 8, 4, 2, 1)) for _ in range(n)]
    assert list(s.ks) == expect
    start = sizes[0] + sizes[1]  # first block of the k=4 stage: single, then group
    assert s.modes[start] == "single" and s.modes[start + 1] == "group"


def test_schedule_custom_and_step_range():
    s = SkiparseSchedule.custom([1, 2, 8], steps=(0.5, None))
    assert s.plan(1) is None  # no step known: a step-limited schedule is off
    assert s.plan(1, 4, 10) is None and s.plan(1, 5, 10) == (2, "group") and s.plan(2, 9, 10) == (8, "single")
    with pytest.raises(ValueError, match="out of range"):
        s.plan(3)
    with pytest.raises(ValueError, match="one ratio per block"):
        wan_core.load_dit(random_dit_state(), config=CFG, skiparse="custom")
    with pytest.raises(ValueError, match="skiparse must be one of"):
        wan_core.load_dit(random_dit_state(), config=CFG, skiparse="dense")


def test_dispatch_step_range_switches_skiparse():
    torch.manual_seed(4)
    q, k, v = (torch.randn(1, 2, 64, 16) for _ in range(3))
    from wan_core.attention import AttentionCall
    d = AttentionDispatch("sdpa", skiparse=SkiparseSchedule.custom([4], steps=(2, None)))
    call = AttentionCall("self", 0)
    with d.at_step(0, 10):
        assert torch.equal(d(q, k, v, call), sdpa_attention(q, k, v))
    d.set_step(3, 10)
    assert torch.allclose(d(q, k, v, call), skiparse_attention(q, k, v, 4, "single"))
    assert torch.equal(d(q, k, v, AttentionCall("cross", 0)), sdpa_attention(q, k, v))
