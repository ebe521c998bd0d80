"""``wan_core.estimate`` (the numbers the canvas shows) against the real thing: parameter counts of the DiT as
built, the skiparse schedules and permutation shapes, the empty-latent node's shapes and the pipeline's size
validation."""
from __future__ import annotations

import pytest
import torch

from wan_core import estimate as E
from wan_core.attention import skiparse as S
from wan_core.config import DIT_PRESETS
from wan_core.dit.model import WanDiT
from wan_core.latent_format import video_size_problems
from wan_core.pipeline import GenerationConfig, nearest_valid
from wan_core.quant.fp8 import is_block_linear

PRESET = {"1.3B": "wan2.1-t2v-1.3b", "14B": "wan2.1-t2v-14b", "5B": "wan2.2-ti2v-5b"}


@pytest.fixture(scope="module", params=["1.3B", "14B", "5B"])
def meta_dit(request):
    cfg = DIT_PRESETS[PRESET[request.param]]
    with torch.device("meta"):
        return request.param, WanDiT(cfg)


def test_model_table_matches_presets():
    for name, key in PRESET.items():
        cfg = DIT_PRESETS[key]
        assert {k: E.MODELS[name][k] for k in ("dim", "ffn_dim", "num_heads", "num_layers")} == {
            "dim": cfg.dim, "ffn_dim": cfg.ffn_dim, "num_heads": cfg.num_heads, "num_layers": cfg.num_layers}
        assert (cfg.in_dim, cfg.out_dim, cfg.text_dim, cfg.freq_dim, cfg.text_len, cfg.patch_size) == (
            E.spec(name, "in_dim"), E.spec(name, "out_dim"), E.FIXED["text_dim"], E.FIXED["freq_dim"],
            E.FIXED["text_len"], E.FIXED["patch"])


def test_ti2v_5b_geometry():
    """Wan 2.2 TI2V-5B (docs/wan22.md section 1): 48 channels at 16x, sizes multiple of 32, the official param count."""
    e = E.estimate(width=1280, height=704, frames=121, model="5B")
    assert e["valid"] and e["latent_shape"] == [1, 48, 31, 44, 80] and e["tokens"] == 31 * 22 * 40
    assert e["params"] == 4_999_787_712  # tests/dit/data/wan22_ti2v_5b_keys.txt
    bad = E.estimate(width=1264, height=704, frames=121, model="5B")
    assert bad["problems"] == ["width=1264: must be a multiple of 32; nearest valid: 1248 or 1280"]


def test_param_counts_equal_the_built_dit(meta_dit):
    name, dit = meta_dit
    counts = E.dit_param_counts(name)
    assert counts["total"] == sum(p.numel() for p in dit.parameters())
    linears = [(n, m) for n, m in dit.named_modules() if is_block_linear(n)]
    assert counts["block_linear"] == sum(m.weight.numel() for _, m in linears)
    assert counts["block_linear_layers"] == len(linears)


def test_weight_bytes_per_dtype():
    p = E.dit_param_counts("1.3B")
    assert E.weight_bytes("1.3B", "fp32") == 4 * p["total"]
    assert E.weight_bytes("1.3B", "fp16") == E.weight_bytes("1.3B", "bf16") == 2 * p["total"]
    fp8 = E.weight_bytes("1.3B", "fp8")
    assert fp8 == p["block_linear"] + 2 * (p["total"] - p["block_linear"]) + 4 * p["block_linear_layers"]
    assert 1.40e9 < fp8 < 1.50e9  # ~1.42 B parameters, almost all in the block Linear layers
    assert 27e9 < E.weight_bytes("14B", "fp16") < 29e9
    with pytest.raises(ValueError, match="dtype must be one of"):
        E.weight_bytes("1.3B", "int4")


@pytest.mark.parametrize("layers", [7, 12, 30, 32, 40, 48])
def test_skiparse_schedules_equal_wan_core(layers):
    assert E.skiparse_ks("none", layers) == [1] * layers
    assert E.skiparse_ks("osp13", layers, 4) == list(S.SkiparseSchedule.osp13(layers, 4).ks)
    assert E.skiparse_ks("osp13", layers, 2) == list(S.SkiparseSchedule.osp13(layers, 2).ks)
    assert E.skiparse_ks("suv", layers) == list(S.SkiparseSchedule.suv(layers).ks)
    assert E.suv_stage_blocks(layers) == list(S.suv_stage_blocks(layers))
    ks = [1, 2] * (layers // 2) + [1] * (layers % 2)
    assert E.skiparse_ks("custom", layers, ks=ks) == list(S.SkiparseSchedule.custom(ks).ks)


@pytest.mark.parametrize("length, k", [(32760, 4), (100, 4), (63, 2), (48, 3)])
def test_sparse_block_cost_follows_the_permuted_shapes(length, k):
    """One sparse block attends k sub-sequences of L'/k tokens: 4 * (k*B) * (L'/k)^2 * D FLOPs."""
    permuted = S.skiparse_permute(torch.zeros(1, 1, length, 1), k, "single")
    groups, _, per_group, _ = permuted.shape
    assert groups == k
    expected = 4.0 * groups * per_group * per_group * 1536
    # a 1.3B setting whose token count is `length`: estimate's per-block sparse cost, via a custom schedule
    ks = [k] + [1] * 29
    est = E.estimate(**_size_for_tokens(length), skiparse="custom", skiparse_custom=ks, guidance=1.0)
    dense_block = est["attention_flops_dense"] / 30
    assert est["tokens"] == length
    assert est["attention_flops"] == pytest.approx(29 * dense_block + expected, rel=1e-12)


def _size_for_tokens(length: int) -> dict:
    # one latent frame (frames=1) of 16 x (16*length) pixels -> 1 * 1 * length tokens
    return {"width": 16 * length, "height": 16, "frames": 1}


def test_default_setting_numbers():
    e = E.estimate()  # 832x480x81, 1.3B bf16, guidance 5 (two forwards per step)
    assert e["valid"] and e["problems"] == []
    assert e["latent_shape"] == [1, 16, 21, 60, 104]
    assert e["tokens"] == 21 * 30 * 52 == 32760
    assert e["forwards_per_step"] == 2
    assert e["attention_flops_dense"] == 2 * 30 * 4 * 32760 ** 2 * 1536
    assert e["attention_flops"] == e["attention_flops_dense"] and e["attention_ratio"] == 1.0
    assert e["cross_attention_flops"] == 2 * 30 * 4 * 32760 * 512 * 1536
    assert e["flops_total"] == pytest.approx(30 * e["flops_per_step"])
    assert e["peak_bytes"] == e["weight_bytes"] + e["activation_bytes"]
    assert 1e9 < e["activation_bytes"] < 3e9
    assert E.estimate(guidance=1.0)["forwards_per_step"] == 1


def test_osp13_cost_ratio():
    e = E.estimate(skiparse="osp13", skiparse_k=4)
    padded = 32760 + (16 - 32760 % 16) % 16
    ratio = (4 + 26 * (padded / 32760) ** 2 / 4) / 30  # 4 dense blocks, 26 at 1/k on the padded length
    assert e["sparse_blocks"] == 26
    assert e["attention_ratio"] == pytest.approx(ratio, rel=1e-12)
    assert 0.34 < e["attention_ratio"] < 0.36


@pytest.mark.parametrize("w, h, f, b", [(832, 480, 81, 1), (1280, 720, 81, 1), (64, 48, 9, 2), (480, 832, 161, 1)])
def test_latent_shape_and_tokens_equal_the_pipeline_and_dit(w, h, f, b):
    cfg = GenerationConfig(prompt=("x",) * b, width=w, height=h, frames=f)
    e = E.estimate(width=w, height=h, frames=f, batch_size=b)
    assert e["latent_shape"] == list(cfg.latent_shape)
    with torch.device("meta"):
        dit = WanDiT(DIT_PRESETS["tiny"])
    t, hp, wp = dit.grid(torch.empty(cfg.latent_shape, device="meta"))
    assert e["tokens"] == t * hp * wp


@pytest.mark.parametrize("w, h, f", [(832, 480, 80), (830, 480, 81), (832, 470, 81), (100, 100, 10), (832, 480, 81)])
def test_validity_agrees_with_the_pipeline(w, h, f):
    """Same inputs flagged, in the same order, with the same nearest valid values as the pipeline's check."""
    ours = E.size_problems(w, h, f)
    theirs = video_size_problems(w, h, f)
    assert [p.split("=")[0] for p in ours] == [p.split("=")[0] for p in theirs]
    assert [p.split("nearest valid: ")[1] for p in ours] == [p.split("nearest valid: ")[1] for p in theirs]
    assert E.estimate(width=w, height=h, frames=f)["valid"] == (theirs == [])


def test_nearest_valid_equals_the_pipeline():
    for v in range(1, 200):
        assert E.nearest_valid(v, 16) == nearest_valid(v, 16)
        assert E.nearest_valid(v, 4, 1) == nearest_valid(v, 4, 1)


def test_flags_name_the_input_and_the_choices():
    assert E.size_problems(832, 480, 80) == ["frames=80: must be 4n+1; nearest valid: 77 or 81"]
    assert E.size_problems(830, 480, 81) == ["width=830: must be a multiple of 16; nearest valid: 816 or 832"]


def test_formatting():
    assert E.format_flops(3.956e14) == "396 TFLOP"
    assert E.format_flops(1.698e16) == "17.0 PFLOP"
    assert E.format_bytes(2837993600) == "2.64 GiB"
    assert E.format_bytes(512) == "512 B"


def test_bad_arguments():
    with pytest.raises(ValueError, match="model must be one of"):
        E.estimate(model="7B")
    with pytest.raises(ValueError, match="unknown skiparse schedule"):
        E.estimate(skiparse="dense")
    with pytest.raises(ValueError, match="one ratio per block"):
        E.estimate(skiparse="custom", skiparse_custom=[1, 2])
