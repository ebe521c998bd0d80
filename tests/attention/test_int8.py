"""``int8`` / ``int8_fp8`` (SageAttention algorithm in torch) against float32 SDPA and float64 references.

Thresholds from docs/algorithms.md section 3.3: cosine >= 0.998 and relative L1 <= 5e-2 vs fp32 SDPA, with smoothing on;
inputs are activations captured from a tiny DiT (head_dim 128) and synthetic keys with a shared
per-channel offset (typical of DiT keys). The numbers are printed (``pytest -s``).
"""
from __future__ import annotations

import pytest
import torch

import wan_core
from wan_core.attention import int8_attention, quantize_int8_blocks, sdpa_attention

from .helpers import CFG, CapturingDispatch, cos_rel_l1, dit_inputs, naive_attention, random_dit_state

PV = ("fp16", "fp8")


@pytest.fixture(scope="module")
def dit_activations():
    """q, k, v of every self-attention call of a tiny DiT forward (RoPE applied), float32."""
    model = wan_core.load_dit(random_dit_state(), dtype=torch.float32, config=CFG)
    cap = CapturingDispatch()
    model.attention = cap
    x, t, ctx = dit_inputs(grid=(2, 16, 16))  # 512 tokens
    with torch.no_grad():
        model(x, t, ctx)
    return [(q, k, v) for call, q, k, v in cap.records if call.kind == "self"]


def test_block_quantisation_scales_and_error():
    torch.manual_seed(0)
    x = torch.randn(1, 2, 300, 64) * torch.linspace(0.1, 5, 300)[:, None]
    q, s = quantize_int8_blocks(x, 128)
    assert q.dtype == torch.int8 and s.shape == (1, 2, 3)
    for j in range(3):
        blk = x[:, :, 128 * j:128 * (j + 1)]
        assert torch.allclose(s[:, :, j], blk.abs().amax(dim=(-1, -2)) / 127)
    deq = q.float() * s.repeat_interleave(128, -1)[..., :300, None]
    assert ((deq - x).abs() <= s.repeat_interleave(128, -1)[..., :300, None] / 2 + 1e-6).all()


@pytest.mark.parametrize("pv", PV)
def test_int8_matches_sdpa_on_dit_activations(dit_activations, pv):
    worst = (1.0, 0.0)
    for q, k, v in dit_activations:
        ref = sdpa_attention(q, k, v)
        cos, rel = cos_rel_l1(int8_attention(q, k, v, pv=pv), ref)
        cos_off, rel_off = cos_rel_l1(int8_attention(q, k, v, pv=pv, smooth_k=False), ref)
        worst = (min(worst[0], cos), max(worst[1], rel))
        print(f"DiT activations pv={pv}: smooth on cos {cos:.5f} rel-L1 {rel:.2e} | off cos {cos_off:.5f} "
              f"rel-L1 {rel_off:.2e}")
    assert worst[0] >= 0.998 and worst[1] <= 5e-2


@pytest.mark.parametrize("pv", PV)
def test_smoothing_handles_a_shared_key_offset(pv):
    torch.manual_seed(1)
    q = torch.randn(1, 4, 1024, 128)
    k = torch.randn(1, 4, 1024, 128) + 8 * torch.randn(1, 1, 1, 128)  # same offset for every key
    v = torch.randn(1, 4, 1024, 128)
    ref = sdpa_attention(q, k, v)
    cos, rel = cos_rel_l1(int8_attention(q, k, v, pv=pv), ref)
    cos_off, rel_off = cos_rel_l1(int8_attention(q, k, v, pv=pv, smooth_k=False), ref)
    print(f"offset keys pv={pv}: smooth on cos {cos:.5f} rel-L1 {rel:.2e} | off cos {cos_off:.5f} rel-L1 {rel_off:.2e}")
    assert cos >= 0.998 and rel <= 5e-2
    assert rel_off > 1.3 * rel  # smoothing is what makes the offset harmless


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_masks_and_fully_masked_rows(kind):
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 2, 200, 64) for _ in range(3))
    keep = torch.rand(2, 1, 200, 200) > 0.3
    keep[0, 0, 5] = False  # a query row that sees no key
    mask = keep if kind == "bool" else torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
    out = int8_attention(q, k, v, attn_mask=mask)
    ref = naive_attention(q, k, v, keep).nan_to_num(0.0)
    assert torch.isfinite(out).all()
    assert (out[0, :, 5] == 0).all()
    cos, rel = cos_rel_l1(out, ref)
    assert cos >= 0.999 and rel <= 3e-2


def test_int8_keeps_dtype_shape_and_inputs():
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 2, 70, 128, dtype=torch.bfloat16) for _ in range(3))
    k0 = k.clone()
    out = int8_attention(q, k, v[..., :64].contiguous())  # value width may differ
    assert out.dtype == torch.bfloat16 and out.shape == (1, 2, 70, 64)
    assert torch.equal(k, k0)
    with pytest.raises(ValueError, match="pv must be"):
        int8_attention(q, k, v, pv="int4")
