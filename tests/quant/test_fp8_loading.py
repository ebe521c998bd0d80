"""Loading fp8 / scaled-fp8 DiT files (ComfyUI layout, docs/wan_spec.md section 5.4) and quantising on load.

The scaled-fp8 file is written here the way ComfyUI's repackaged files are: fp8 Linear weights with 0-d
``scale_weight`` / ``scale_input``, a ``scaled_fp8`` marker, everything else bf16, ``model.diffusion_model.``
prefix. Expected bytes and dequantised values are computed from that file, independently of the loader.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from safetensors.torch import save_file

import wan_core
from wan_core.dit import loader as loader_mod
from wan_core.quant import FP8Linear, is_block_linear, parameter_bytes

from .helpers import CFG, dit_inputs, random_dit_state

F8 = torch.float8_e4m3fn


def linear_layers(sd):
    return [k[: -len(".weight")] for k, v in sd.items() if k.endswith(".weight") and v.dim() == 2
            and f"{k[:-len('.weight')]}.bias" in sd]


@pytest.fixture(scope="module")
def weights():
    return random_dit_state()


@pytest.fixture(scope="module")
def scaled_file(weights, tmp_path_factory):
    """ComfyUI-style scaled fp8: every Linear (embeddings and head included) in fp8 with a scale."""
    out = {"scaled_fp8": torch.empty(0, dtype=F8)}
    for k, v in weights.items():
        out[k] = v.to(torch.bfloat16)
    for layer in linear_layers(weights):
        w = weights[f"{layer}.weight"]
        s = w.abs().amax() / 448
        out[f"{layer}.weight"] = (w / s).to(F8)
        out[f"{layer}.scale_weight"] = s.reshape(())
        out[f"{layer}.scale_input"] = torch.tensor(1.0)
    path = tmp_path_factory.mktemp("fp8") / "wan_tiny_fp8_scaled.safetensors"
    save_file({f"model.diffusion_model.{k}": v for k, v in out.items()}, path)
    return path, out


def test_scaled_fp8_file_keeps_block_linears_in_fp8(scaled_file, monkeypatch):
    path, file_sd = scaled_file

    def no_full_copy(*a, **k):
        raise AssertionError("the fp8 path must not materialise the whole state dict")

    monkeypatch.setattr(loader_mod, "materialize", no_full_copy)
    model = wan_core.load_dit(path, config=CFG, weights="fp8_scaled")
    expected_bytes = 0
    for layer in linear_layers(file_sd):
        w8, s = file_sd[f"{layer}.weight"], file_sd[f"{layer}.scale_weight"]
        mod = model.get_submodule(layer)
        if is_block_linear(layer):
            assert isinstance(mod, FP8Linear) and mod.weight.dtype == F8
            assert torch.equal(mod.weight.view(torch.uint8), w8.view(torch.uint8))
            assert mod.weight_scale.item() == s.item() and mod.bias.dtype == torch.bfloat16
            expected_bytes += w8.numel() + 4 + file_sd[f"{layer}.bias"].numel() * 2
        else:  # embeddings and head stay high precision (dequantised)
            assert type(mod) is nn.Linear and mod.weight.dtype == torch.bfloat16
            assert torch.equal(mod.weight, (w8.float() * s).to(torch.bfloat16))
            expected_bytes += (w8.numel() + file_sd[f"{layer}.bias"].numel()) * 2
    linear_keys = {f"{n}.{p}" for n in linear_layers(file_sd) for p in ("weight", "bias")}
    expected_bytes += sum(v.numel() * 2 for k, v in file_sd.items()
                          if k in model.state_dict() and k not in linear_keys)
    assert parameter_bytes(model) == expected_bytes
    fp8_params = [p for p in model.parameters() if p.dtype == F8]
    assert len(fp8_params) == 10 * CFG.num_layers
    assert model.dtype == torch.bfloat16 and model.blocks[0].modulation.dtype == torch.bfloat16


def test_fp8_upcast_equals_dequantised_model(scaled_file):
    path, _ = scaled_file
    x, t, ctx = dit_inputs()
    ref = wan_core.load_dit(path, dtype=torch.float32, config=CFG)  # dequantised on load (default)
    fp8 = wan_core.load_dit(path, dtype=torch.float32, config=CFG, weights="fp8_scaled")
    sm = wan_core.load_dit(path, dtype=torch.float32, config=CFG, weights="fp8_scaled", gemm="scaled_mm")
    with torch.no_grad():
        a, b, c = ref(x, t, ctx), fp8(x, t, ctx), sm(x, t, ctx)
    assert (a - b).abs().max().item() <= 1e-6 * a.abs().max().item()
    rel = ((c - b).norm() / b.norm()).item()
    print(f"tiny DiT, scaled_mm vs upcast (same fp8 weights): relative L2 {rel:.2e}")
    assert 0 < rel <= 3e-2


@pytest.mark.parametrize("gemm", ["upcast", "scaled_mm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_quantise_on_load_error_vs_fp32(weights, gemm, dtype):
    x, t, ctx = dit_inputs()
    ref = wan_core.load_dit(weights, dtype=torch.float32, config=CFG)
    model = wan_core.load_dit(weights, dtype=dtype, config=CFG, weights="fp8_scaled", gemm=gemm)
    assert model.blocks[1].ffn[2].weight.dtype == F8
    with torch.no_grad():
        a, b = ref(x, t, ctx), model(x, t, ctx)
    rel = ((a - b).norm() / a.norm()).item()
    print(f"tiny DiT fp8_scaled ({gemm}, compute {dtype}) vs fp32: relative L2 error {rel:.2e}")
    assert b.dtype == torch.float32 and rel <= 3e-2


def test_all_switches_together(tmp_path):
    cfg = CFG.replace(num_layers=6)
    sd = {k: v.to(torch.bfloat16) for k, v in random_dit_state(cfg).items()}
    save_file(sd, tmp_path / "m_bf16.safetensors")
    model = wan_core.load_dit(tmp_path / "m_bf16.safetensors", config=cfg, attention="int8", skiparse="osp13",
                              weights="fp8_scaled", gemm="scaled_mm")
    assert model.load_options.skiparse == "osp13" and model.attention.backend == "int8"
    assert model.attention.sparse_plan(wan_core.attention.AttentionCall("self", 2)) == (4, "single")
    assert model.blocks[3].self_attn.q.gemm == "scaled_mm"
    x, t, ctx = dit_inputs(cfg)
    with torch.no_grad():
        out = model(x, t, ctx)
    assert out.shape == x.shape and torch.isfinite(out).all()


def test_plain_fp8_file_keeps_unit_scale(weights, tmp_path):
    sd = {k: (v.to(F8) if k[: -len(".weight")] in linear_layers(weights) and k.endswith(".weight") else v)
          for k, v in weights.items()}
    save_file(sd, tmp_path / "m_fp8_e4m3fn.safetensors")
    model = wan_core.load_dit(tmp_path / "m_fp8_e4m3fn.safetensors", config=CFG, weights="fp8_e4m3fn")
    q = model.blocks[0].self_attn.q
    assert q.weight.dtype == F8 and q.weight_scale.item() == 1.0
    assert torch.equal(q.weight.view(torch.uint8), sd["blocks.0.self_attn.q.weight"].view(torch.uint8))


def test_full_precision_marker_forces_upcast(scaled_file, tmp_path):
    _, file_sd = scaled_file
    sd = dict(file_sd, scaled_fp8=torch.zeros(2, dtype=F8))
    save_file(sd, tmp_path / "m.safetensors")
    model = wan_core.load_dit(tmp_path / "m.safetensors", config=CFG, weights="fp8_scaled", gemm="scaled_mm")
    assert {m.gemm for m in model.modules() if isinstance(m, FP8Linear)} == {"upcast"}


@pytest.mark.parametrize("kwargs,match", [
    ({"gemm": "scaled_mm"}, "needs fp8 weights"),
    ({"weights": "bf16", "dtype": torch.float32}, "conflicts with dtype"),
    ({"weights": "int4"}, "weights must be one of"),
    ({"dtype": torch.float8_e4m3fn}, "storage format"),
    ({"gemm": "cublas"}, "gemm must be one of"),
    ({"fp8_granularity": "block", "weights": "fp8_scaled"}, "fp8_granularity must be one of"),
])
def test_bad_options_are_explained(weights, kwargs, match):
    with pytest.raises(ValueError, match=match):
        wan_core.load_dit(weights, config=CFG, **kwargs)
