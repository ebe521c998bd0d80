"""umT5 key rules vs tests/text/data/umt5_keymap_official_to_hf.tsv, and the full umT5-XXL on the meta device
(docs/wan_spec.md sections 1.3, 4.2)."""
from __future__ import annotations

from wan_core.config import TEXT_ENCODER_PRESETS
from wan_core.text.encoder import build_umt5, detect_text_encoder_config, expected_shapes
from wan_core.text.keys import detect_naming, find_spiece_key, hf_to_official, official_to_hf

from . import helpers as H


def test_rules_reproduce_the_tsv_exactly():
    rows = H.tsv_rows()
    assert len(rows) == 242
    for off, hf, _ in rows:
        assert official_to_hf(off) == hf, off
        assert hf_to_official(hf) == off, hf


def test_rules_keep_the_parameter_suffix_and_reject_foreign_names():
    assert official_to_hf("blocks.7.attn.q.scale_weight") == "encoder.block.7.layer.0.SelfAttention.q.scale_weight"
    assert official_to_hf("blocks.7.ffn.fc2.weight_scale") == "encoder.block.7.layer.1.DenseReluDense.wo.weight_scale"
    assert hf_to_official("encoder.block.2.layer.1.DenseReluDense.wi_0.weight") == "blocks.2.ffn.gate.0.weight"
    assert hf_to_official("encoder.embed_tokens.weight") is None  # the tied copy has no official name
    for foreign in ("blocks.0.self_attn.q.weight", "head.modulation", "blocks.0.ffn.0.weight", "scaled_fp8",
                    "encoder.block.0.layer.0.SelfAttention.q.weight"):
        assert official_to_hf(foreign) is None, foreign
    assert hf_to_official("blocks.0.attn.q.weight") is None


def test_naming_detection():
    official = [off for off, _, _ in H.tsv_rows()]
    hf = [h for _, h, _ in H.tsv_rows()]
    assert detect_naming(official) == "official"
    assert detect_naming(hf) == "hf"
    assert detect_naming(["head.modulation", "blocks.0.self_attn.q.weight"]) is None
    assert find_spiece_key(hf + ["spiece_model"]) == "spiece_model"
    assert find_spiece_key(["text_encoders.umt5xxl.spiece_model"]) == "text_encoders.umt5xxl.spiece_model"
    assert find_spiece_key(hf) is None


def test_full_umt5_xxl_builds_on_meta_with_the_official_tensors():
    cfg = TEXT_ENCODER_PRESETS["umt5-xxl"]
    model = build_umt5(cfg, "meta")
    params = dict(model.named_parameters())  # the tied embedding counts once
    official = {hf_to_official(k): tuple(p.shape) for k, p in params.items()}
    assert official == {off: shape for off, _, shape in H.tsv_rows()}
    assert len(official) == 242
    assert sum(p.numel() for p in params.values()) == 5_680_910_336
    assert all(p.is_meta for p in params.values())
    assert expected_shapes(cfg) == {hf: shape for _, hf, shape in H.tsv_rows()}


def test_config_detected_from_the_xxl_shapes():
    shapes = {hf: shape for _, hf, shape in H.tsv_rows()}
    cfg = detect_text_encoder_config(shapes)
    assert cfg == TEXT_ENCODER_PRESETS["umt5-xxl"]
    assert (cfg.num_heads, cfg.d_kv, cfg.num_layers, cfg.d_ff, cfg.vocab_size) == (64, 64, 24, 10240, 256384)


def test_importing_the_text_package_does_not_import_transformers():
    import subprocess
    import sys

    code = "import sys, wan_core, wan_core.text; assert 'transformers' not in sys.modules, 'transformers imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
