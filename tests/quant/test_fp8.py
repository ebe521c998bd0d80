"""FP8 linear: quantisation error bounds, ``scaled_mm`` vs a float64 reference and vs ``upcast``, fallbacks.

E4M3 rounding (docs/algorithms.md section 5.1): relative error <= 2^-4 for normal values, absolute <= 2^-10 * scale in
the subnormal range; bounds below are written from that, not from the implementation.
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn

from wan_core.quant import FP8Linear, fp8_linear, quantize_linears, quantize_weight, set_gemm
from wan_core.quant import fp8 as fp8_mod

from .helpers import CFG

F8 = torch.float8_e4m3fn
HALF_ULP, SUB = 2.0 ** -4, 2.0 ** -10


@pytest.mark.parametrize("granularity", ["tensor", "channel"])
def test_weight_quantisation_within_e4m3_rounding(granularity):
    torch.manual_seed(0)
    w = torch.randn(64, 96) * torch.logspace(-2, 1, 64)[:, None]
    w8, s = quantize_weight(w, granularity)
    assert w8.dtype == F8 and s.dtype == torch.float32
    amax = w.abs().amax() if granularity == "tensor" else w.abs().amax(1)
    assert torch.allclose(s, amax / 448)
    sc = s if s.dim() == 0 else s[:, None]
    err = (w8.float() * sc - w).abs()
    assert (err <= HALF_ULP * w.abs() + SUB * sc + 1e-12).all()
    if granularity == "channel":  # small rows keep their precision
        assert (err / w.abs().clamp_min(1e-3)).median() < 0.04


def test_plain_cast_has_unit_scale_and_saturates():
    w = torch.tensor([[0.5, -1000.0, 3.0]])
    w8, s = quantize_weight(w, scaled=False)
    assert s.item() == 1.0 and w8.float().tolist() == [[0.5, -448.0, 3.0]]


def _layer(seed=1, granularity="tensor"):
    torch.manual_seed(seed)
    lin = nn.Linear(128, 48)
    return lin, FP8Linear.from_linear(lin, granularity, compute_dtype=torch.float32)


@pytest.mark.parametrize("granularity", ["tensor", "channel"])
def test_scaled_mm_equals_float64_product_of_quantised_operands(granularity):
    _, layer = _layer(granularity=granularity)
    x = torch.randn(3, 7, 128) * 4
    layer.gemm = "scaled_mm"
    y = layer(x)
    # independent reference: per-token activation scale max|x|/448, e4m3 cast, float64 product
    x2 = x.reshape(-1, 128).double()
    sa = x2.abs().amax(1, keepdim=True) / 448
    xa = (x2 / sa).float().to(F8).double() * sa
    s = layer.weight_scale.double()
    wd = layer.weight.double() * (s if s.dim() == 0 else s[:, None])
    ref = (xa @ wd.T + layer.bias.double()).reshape(3, 7, 48)
    assert y.shape == (3, 7, 48) and y.dtype == torch.float32
    assert (y.double() - ref).abs().max().item() <= 1e-5 * ref.abs().max().item()


def test_scaled_mm_and_upcast_agree_within_activation_rounding():
    _, layer = _layer()
    x = torch.randn(33, 128)
    up = fp8_linear(x, layer.weight, layer.weight_scale, layer.bias, gemm="upcast")
    sm = fp8_linear(x, layer.weight, layer.weight_scale, layer.bias, gemm="scaled_mm")
    wd = layer.dequantized_weight(torch.float32).abs()
    sa = x.abs().amax(1, keepdim=True) / 448
    bound = (HALF_ULP * x.abs() + SUB * sa) @ wd.T + 1e-5 * (x.abs() @ wd.T)
    diff = (sm - up).abs()
    assert (diff <= bound).all()
    rel = (diff.norm() / up.norm()).item()
    print(f"scaled_mm vs upcast, one layer: relative L2 {rel:.2e}")
    assert 0 < rel < 0.05


def test_upcast_equals_linear_with_dequantised_weight():
    lin, layer = _layer()
    x = torch.randn(5, 128)
    ref = nn.functional.linear(x, layer.weight.float() * layer.weight_scale, lin.bias)
    assert torch.equal(layer(x), ref)


def test_unsupported_scaled_mm_warns_once_and_upcasts(monkeypatch):
    monkeypatch.setattr(fp8_mod, "_WARNED", set())
    monkeypatch.setattr(fp8_mod, "scaled_mm_support", lambda device, dtype: "FP8 GEMM needs an SM89+ GPU")
    _, layer = _layer()
    layer.gemm = "scaled_mm"
    x = torch.randn(4, 128)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y1, y2 = layer(x), layer(x)
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 1 and "gemm=scaled_mm" in msgs[0] and "using gemm=upcast" in msgs[0]
    layer.gemm = "upcast"
    assert torch.equal(y1, layer(x)) and torch.equal(y2, y1)


def test_scaled_mm_supported_on_this_cpu_build():
    assert fp8_mod.scaled_mm_support("cpu", torch.float32) == ""
    assert fp8_mod.scaled_mm_support("cpu", torch.bfloat16) == ""


def test_module_to_dtype_keeps_fp8_storage():
    _, layer = _layer()
    layer.to(torch.bfloat16)
    assert layer.weight.dtype == F8 and layer.weight_scale.dtype == torch.float32
    assert layer.bias.dtype == torch.bfloat16 and layer.compute_dtype == torch.bfloat16
    assert layer(torch.randn(2, 128, dtype=torch.bfloat16)).dtype == torch.bfloat16
    assert set(layer.state_dict()) == {"weight", "weight_scale", "bias"}


def test_quantize_linears_converts_only_block_layers():
    from wan_core.dit.model import WanDiT

    model = WanDiT(CFG)
    names = quantize_linears(model)
    per_block = {"self_attn.q", "self_attn.k", "self_attn.v", "self_attn.o", "cross_attn.q", "cross_attn.k",
                 "cross_attn.v", "cross_attn.o", "ffn.0", "ffn.2"}
    assert set(names) == {f"blocks.{i}.{n}" for i in range(CFG.num_layers) for n in per_block}
    assert type(model.text_embedding[0]) is nn.Linear and type(model.head.head) is nn.Linear
    assert type(model.time_projection[1]) is nn.Linear
    assert set_gemm(model, "scaled_mm") == len(names)
    with pytest.raises(ValueError, match="gemm must be one of"):
        set_gemm(model, "int4")
