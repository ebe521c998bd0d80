"""NaN/Inf never become a silently black video: checked as weights load, on latents and embeddings given to the
pipeline, after every sampling step, and on the VAE's output (issue 10, "Numbers")."""
from __future__ import annotations

import re

import pytest
import torch
from safetensors.torch import save_file

import wan_core
from wan_core.checkpoint import CheckpointError
from wan_core.config import DIT_PRESETS, TEXT_ENCODER_PRESETS
from wan_core.demo import tiny_random_models, tiny_tokenizer_bytes
from wan_core.dit.model import WanDiT
from wan_core.numerics import NonFiniteError, check_finite, nonfinite_count
from wan_core.pipeline import GenerationConfig, WanPipeline
from wan_core.sampling import build_schedule, sample

DIT_CFG = DIT_PRESETS["tiny"]
F8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def reference_count(t: torch.Tensor) -> int:
    return int((~torch.isfinite(t.to(torch.float64))).sum())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16, *F8])
def test_nonfinite_count_equals_a_float64_isfinite_count(dtype):
    g = torch.Generator().manual_seed(0)
    t = torch.randn(37, 29, generator=g).to(dtype)
    assert nonfinite_count(t) == 0
    idx = [0, 5, 400, 1000]
    if dtype in F8:  # fp8 casts saturate, so write the bit patterns: NaN (both), +-Inf (e5m2 only)
        bits = [0x7F, 0xFF, 0x7F, 0xFF] if dtype == torch.float8_e4m3fn else [0x7F, 0x7C, 0xFC, 0xFE]
        t.view(torch.uint8).view(-1)[idx] = torch.tensor(bits, dtype=torch.uint8)
    else:
        t.view(-1)[idx] = torch.tensor([float("nan"), float("inf"), -float("inf"), float("nan")]).to(dtype)
    assert nonfinite_count(t) == reference_count(t) == 4
    assert nonfinite_count(torch.arange(10)) == 0 and nonfinite_count(torch.empty(0)) == 0


@pytest.mark.parametrize("dtype", F8)
def test_every_fp8_bit_pattern_is_classified_like_float32(dtype):
    for byte in range(256):  # each pattern alone among finite values: positive and negative NaN/Inf
        t = torch.full((64,), 0x38, dtype=torch.uint8)  # 1.0 (e4m3fn) / 0.5 (e5m2)
        t[17] = byte
        assert nonfinite_count(t.view(dtype)) == reference_count(t.view(dtype)), hex(byte)


def test_huge_finite_values_are_not_reported():
    t = torch.full((1000,), 60000.0, dtype=torch.float16)  # the fp16 sum overflows; the values do not
    assert nonfinite_count(t) == 0
    check_finite(t, "x")
    with pytest.raises(NonFiniteError, match=r"^x: 1 of 1000 values are NaN/Inf"):
        t[3] = float("inf")
        check_finite(t, "x")


# ------------------------------------------------------------------------------------------------ loading
def dit_state(dtype=torch.float32) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {k: v.to(dtype) for k, v in WanDiT(DIT_CFG).state_dict().items()}


@pytest.fixture(scope="module")
def nan_dit_file(tmp_path_factory):
    sd = dit_state(torch.bfloat16)
    sd["blocks.0.self_attn.q.weight"][3, :5] = float("nan")
    sd["head.head.bias"][0] = float("inf")
    path = tmp_path_factory.mktemp("nan") / "wan_nan.safetensors"
    save_file(sd, path)
    return path


@pytest.mark.parametrize("kwargs", [{}, {"dtype": torch.float32}, {"weights": "fp8_scaled"}],
                         ids=["as-stored", "fp32", "fp8-on-load"])
def test_dit_with_nan_weights_is_refused_at_load(nan_dit_file, kwargs):
    with pytest.raises(CheckpointError) as e:
        wan_core.load_dit(nan_dit_file, config=DIT_CFG, **kwargs)
    msg = str(e.value)
    assert str(nan_dit_file) in msg and "2 tensor(s) hold NaN/Inf" in msg
    first, other = sorted(["blocks.0.self_attn.q.weight", "head.head.bias"],
                          key=list(dit_state()).index)  # reported in file order
    assert f"first {first} (" in msg and other in msg
    count = 5 if first.endswith("q.weight") else 1
    assert f"({count} of " in msg


def test_scaled_fp8_file_with_nan_fp8_weight_is_refused(tmp_path):
    sd = dit_state()
    out = {"scaled_fp8": torch.empty(0, dtype=torch.float8_e4m3fn)}
    for k, v in sd.items():
        if v.dim() == 2 and k.startswith("blocks."):
            s = v.abs().amax() / 448
            w8 = (v / s).to(torch.float8_e4m3fn)
            out[k], out[k.replace(".weight", ".scale_weight")] = w8, s.reshape(())
        else:
            out[k] = v.to(torch.bfloat16)
    out["blocks.1.ffn.0.weight"].view(torch.uint8)[0, :3] = 0x7F  # e4m3fn NaN bit pattern
    save_file(out, tmp_path / "m_fp8_scaled.safetensors")
    for kwargs in ({}, {"weights": "fp8_scaled"}):  # dequantised on load / kept in fp8
        with pytest.raises(CheckpointError, match=r"1 tensor\(s\) hold NaN/Inf values, first "
                                                  r"blocks\.1\.ffn\.0\.weight \(3 of "):
            wan_core.load_dit(tmp_path / "m_fp8_scaled.safetensors", config=DIT_CFG, **kwargs)


def test_overflow_on_cast_is_explained(tmp_path):
    sd = dit_state()
    sd["time_embedding.0.weight"][0, 0] = 1e6  # finite in float32, Inf in float16
    save_file(sd, tmp_path / "big.safetensors")
    with pytest.raises(CheckpointError, match="finite but overflow when cast to float16: load it in bfloat16"):
        wan_core.load_dit(tmp_path / "big.safetensors", config=DIT_CFG, dtype=torch.float16)
    assert wan_core.load_dit(tmp_path / "big.safetensors", config=DIT_CFG).dtype == torch.float32


def test_vae_with_nan_weights_is_refused_at_load(tmp_path):
    _, vae, _ = tiny_random_models(seed=0)
    sd = {k: v.clone() for k, v in vae.model.state_dict().items()}
    key = "decoder.head.2.weight"
    sd[key].view(-1)[:2] = float("nan")
    save_file(sd, tmp_path / "vae_nan.safetensors")
    with pytest.raises(CheckpointError, match=rf"vae_nan\.safetensors: 1 tensor\(s\) hold NaN/Inf values, "
                                              rf"first {re.escape(key)} \(2 of "):
        wan_core.load_vae(tmp_path / "vae_nan.safetensors")


def test_text_encoder_with_nan_weights_is_refused_at_load(tmp_path):
    from wan_core.text.encoder import build_umt5, load_text_encoder

    cfg = TEXT_ENCODER_PRESETS["tiny"]
    umt5 = build_umt5(cfg, device="cpu")
    with torch.no_grad():
        for p in umt5.parameters():
            p.normal_(0, 0.5)
    sd = {k: v.clone() for k, v in umt5.state_dict().items()}
    sd["encoder.block.1.layer.1.DenseReluDense.wo.weight"][0, 0] = float("inf")
    save_file({k: v.contiguous() for k, v in sd.items() if k != "encoder.embed_tokens.weight"},
              tmp_path / "umt5_nan.safetensors")
    with pytest.raises(CheckpointError, match=r"umt5_nan\.safetensors: 1 tensor\(s\) hold NaN/Inf"):
        load_text_encoder(tmp_path / "umt5_nan.safetensors", tokenizer=tiny_tokenizer_bytes(), config=cfg)


def test_finite_file_loads_exactly_as_before(tmp_path):
    sd = dit_state()
    save_file(sd, tmp_path / "ok.safetensors")
    model = wan_core.load_dit(tmp_path / "ok.safetensors", config=DIT_CFG)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in sd.items())
    assert model.source == str(tmp_path / "ok.safetensors")


# ------------------------------------------------------------------------------------------------ sampling
def test_sampling_stops_at_the_step_that_produced_nan():
    schedule = build_schedule(steps=6, shift=5.0)
    calls = []

    def velocity(x, sigma, t):
        calls.append(sigma)
        v = torch.tanh(x)
        if len(calls) == 3:
            v[0, 0, 0, 0, 0] = float("nan")
        return v

    x = torch.randn(1, 16, 2, 4, 4, generator=torch.Generator().manual_seed(0))
    sigma3 = float(schedule.sigmas[2])
    with pytest.raises(NonFiniteError, match=rf"^step 3/6 \(sigma {sigma3:.3g}\): the model produced NaN/Inf"):
        sample(velocity, x, schedule, "unipc")
    assert len(calls) == 3  # no model call after the bad step


def test_non_finite_starting_sample_is_named():
    x = torch.zeros(1, 16, 1, 2, 2)
    x[0, 3] = float("inf")
    with pytest.raises(NonFiniteError, match="starting sample holds 4 NaN/Inf"):
        sample(lambda x, s, t: x, x, build_schedule(steps=2, shift=5.0), "euler")


@pytest.fixture(scope="module")
def tiny():
    return tiny_random_models(seed=0)


def embeds(n=1, dim=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(5, dim, generator=g) for _ in range(n)]


def test_dit_with_nan_weights_in_memory_never_decodes_a_video(tiny):
    dit, vae, te = tiny
    bad = WanDiT(dit.config)
    bad.load_state_dict(dit.state_dict())
    with torch.no_grad():
        bad.blocks[1].ffn[0].weight[0, 0] = float("nan")
    decoded = []
    orig = vae.decode
    vae.decode = lambda *a, **k: decoded.append(1) or orig(*a, **k)
    try:
        pipe = WanPipeline(bad, vae, te)
        with pytest.raises(NonFiniteError, match=r"^step 1/3 \(sigma 1\): the model produced NaN/Inf"):
            pipe(GenerationConfig(prompt="a fox", width=32, height=32, frames=5, steps=3))
    finally:
        del vae.decode
    assert decoded == []


def test_pipeline_names_a_non_finite_start_latent(tiny):
    dit, vae, _ = tiny
    pipe = WanPipeline(dit, vae)
    cfg = GenerationConfig(width=32, height=32, frames=5, steps=4, denoise=0.5)
    latent = torch.zeros(cfg.latent_shape)
    latent[0, 2, 1] = float("nan")
    calls = []
    handle = dit.register_forward_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(NonFiniteError, match=r"^start latent: 16 of 512 values are NaN/Inf"):
            pipe.sample_latents(embeds(), embeds(), cfg, latent=latent)
    finally:
        handle.remove()
    assert calls == []


def test_pipeline_names_non_finite_embeddings(tiny):
    dit, vae, _ = tiny
    cfg = GenerationConfig(width=32, height=32, frames=5, steps=2)
    neg = embeds()
    neg[0][1, 1] = float("nan")
    with pytest.raises(NonFiniteError, match=r"^negative prompt embedding: 1 of 160 values are NaN/Inf.*float16"):
        WanPipeline(dit, vae).sample_latents(embeds(), neg, cfg)


def test_decode_refuses_non_finite_latents(tiny):
    _, vae, _ = tiny
    z = torch.zeros(1, 16, 2, 4, 4)
    z[0, 0, 0, 0, 0] = -float("inf")
    with pytest.raises(NonFiniteError, match=r"^latents to decode: 1 of 512 values"):
        WanPipeline(vae=vae).decode(z)
    with pytest.raises(NonFiniteError, match=r"^VAE decode input: 1 of 512 values"):
        vae.decode(z)


def test_vae_output_nan_is_reported(tiny):
    _, vae, _ = tiny
    model = type(vae.model)(vae.config)
    model.load_state_dict(vae.model.state_dict())
    with torch.no_grad():
        model.decoder.head[2].bias.fill_(float("nan"))  # as if a float16 overflow happened inside
    broken = type(vae)(model, source="vae.safetensors")
    with pytest.raises(NonFiniteError, match=r"^VAE decode output of vae\.safetensors: "):
        broken.decode(torch.zeros(1, 16, 1, 2, 2))
