"""Wrong inputs to load_text_encoder fail with messages that name the file, the keys and the problem."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from wan_core import CheckpointError, load_text_encoder

from . import helpers as H


def _save(tmp_path, name, sd):
    f = tmp_path / name
    save_file({k: v.contiguous() for k, v in sd.items()}, str(f))
    return f


def test_wan_dit_file_is_named(tmp_path, tiny):
    dit = {"head.modulation": torch.zeros(1, 2, 8), "head.head.weight": torch.zeros(64, 8),
           "patch_embedding.weight": torch.zeros(8, 16, 1, 2, 2), "blocks.0.self_attn.q.weight": torch.zeros(8, 8),
           "blocks.0.ffn.0.weight": torch.zeros(16, 8)}
    f = _save(tmp_path, "wan2.1_t2v_1.3B_fp16.safetensors", dit)
    with pytest.raises(CheckpointError) as e:
        load_text_encoder(f, tokenizer=tiny.tok_dir)
    msg = str(e.value)
    assert str(f) in msg and "not a umT5 text encoder" in msg and "Wan 2.1 DiT" in msg


def test_sd_checkpoint_is_named(tiny):
    sd = {"model.diffusion_model.input_blocks.0.0.weight": torch.zeros(4, 4, 3, 3),
          "first_stage_model.encoder.down.0.block.0.conv1.weight": torch.zeros(4, 4, 3, 3),
          "cond_stage_model.transformer.text_model.encoder.layers.0.mlp.fc1.weight": torch.zeros(4, 4)}
    with pytest.raises(CheckpointError, match="not a umT5 text encoder: this looks like a Stable Diffusion"):
        load_text_encoder(sd, tokenizer=tiny.tok_dir)


def test_t5_v11_with_shared_bias_is_rejected(tmp_path, tiny):
    """A Flux/SD3-style T5 (relative bias only in block 0) is not umT5 even though the names look alike."""
    from transformers import T5Config, T5EncoderModel

    t5 = T5EncoderModel(T5Config(vocab_size=300, d_model=16, d_kv=4, num_heads=4, d_ff=32, num_layers=2,
                                 feed_forward_proj="gated-gelu"))
    f = _save(tmp_path, "t5xxl_fp16.safetensors", H.hf_state_dict(t5))
    with pytest.raises(CheckpointError) as e:
        load_text_encoder(f, tokenizer=tiny.tok_dir)
    msg = str(e.value)
    assert str(f) in msg and "not umT5" in msg
    assert "encoder.block.1.layer.0.SelfAttention.relative_attention_bias" in msg


def test_missing_key_is_named_in_file_naming(tmp_path, tiny):
    sd = dict(tiny.official)
    del sd["blocks.1.ffn.fc1.weight"]
    f = _save(tmp_path, "missing.safetensors", sd)
    with pytest.raises(CheckpointError) as e:
        load_text_encoder(f, tokenizer=tiny.tok_dir)
    msg = str(e.value)
    assert str(f) in msg and "1 missing key(s)" in msg and "blocks.1.ffn.fc1.weight" in msg


def test_missing_hf_key_is_named(tiny):
    sd = {k: v for k, v in tiny.hf_sd.items() if k != "encoder.final_layer_norm.weight"}
    with pytest.raises(CheckpointError, match=r"missing key\(s\), e.g. encoder.final_layer_norm.weight"):
        load_text_encoder(sd, tokenizer=tiny.tok_dir)


def test_shape_mismatch_is_named(tmp_path, tiny):
    sd = dict(tiny.official)
    sd["blocks.1.norm2.weight"] = torch.ones(31)
    f = _save(tmp_path, "mismatch.safetensors", sd)
    with pytest.raises(CheckpointError) as e:
        load_text_encoder(f, tokenizer=tiny.tok_dir)
    msg = str(e.value)
    assert str(f) in msg and "blocks.1.norm2.weight: expected [32], found [31]" in msg


def test_unexpected_key_is_named(tiny):
    sd = dict(tiny.official)
    sd["blocks.0.attn.extra.weight"] = torch.zeros(2)
    with pytest.raises(CheckpointError, match=r"unexpected key\(s\), e.g. blocks.0.attn.extra.weight"):
        load_text_encoder(sd, tokenizer=tiny.tok_dir)


def test_explicit_config_that_does_not_fit(tiny):
    from wan_core.config import TEXT_ENCODER_PRESETS

    with pytest.raises(CheckpointError, match=r"shared.weight: expected \[256384, 4096\], found \[512, 32\]"):
        load_text_encoder(tiny.hf_sd, tokenizer=tiny.tok_dir, config=TEXT_ENCODER_PRESETS["umt5-xxl"])


def test_missing_file(tmp_path, tiny):
    with pytest.raises(CheckpointError, match="no such file"):
        load_text_encoder(tmp_path / "umt5_xxl_fp8_e4m3fn_scaled.safetensors", tokenizer=tiny.tok_dir)
