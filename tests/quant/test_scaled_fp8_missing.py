"""A scaled fp8 file whose scale tensors are missing for some fp8 weights is refused, naming them: used with scale
1 its weights would be max|W|/448 times off (about 3,584x for a layer with max|W| = 0.125). Plain fp8 files (no
marker, no scales) still load with scale 1, and scales stored under diffusers layer names are found.

The files are written the way ComfyUI's scaled-fp8 files are (``scaled_fp8`` marker, 0-d ``scale_weight``), or
in the newer spelling (``weight_scale``, no marker); expected values are computed here from the file.
"""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

import wan_core
from wan_core.checkpoint import CheckpointError, materialize, missing_fp8_scales, open_checkpoint
from wan_core.dit.keys import official_to_diffusers

from .helpers import CFG, random_dit_state

F8 = torch.float8_e4m3fn


def linear_weights(sd):
    return [k for k, v in sd.items() if k.endswith(".weight") and v.dim() == 2]


def scaled(sd, spelling="scale_weight", marker=True):
    """Every Linear weight in fp8 with a per-tensor scale; everything else bf16."""
    out = {"scaled_fp8": torch.empty(0, dtype=F8)} if marker else {}
    for k, v in sd.items():
        out[k] = v.to(torch.bfloat16)
    for k in linear_weights(sd):
        s = sd[k].abs().amax() / 448
        out[k] = (sd[k] / s).to(F8)
        out[f"{k[: -len('.weight')]}.{spelling}"] = s.reshape(())
    return out


@pytest.fixture(scope="module")
def weights():
    return random_dit_state()


DROPPED = ("blocks.0.self_attn.q", "blocks.1.ffn.2", "head.head")


@pytest.mark.parametrize("spelling,marker", [("scale_weight", True), ("weight_scale", False)])
@pytest.mark.parametrize("weights_opt", [None, "fp8_scaled"])
def test_missing_scales_are_refused_with_their_names(weights, tmp_path, spelling, marker, weights_opt):
    sd = scaled(weights, spelling, marker)
    for layer in DROPPED:
        del sd[f"{layer}.{spelling}"]
    path = tmp_path / "wan_fp8_scaled.safetensors"
    save_file({f"model.diffusion_model.{k}": v for k, v in sd.items()}, path)
    with pytest.raises(CheckpointError) as e:
        wan_core.load_dit(path, config=CFG, weights=weights_opt)
    msg = str(e.value)
    assert str(path) in msg and "3 fp8 weight(s) have no scale tensor" in msg
    for layer in DROPPED:
        assert f"{layer}.weight" in msg


def test_marker_without_any_scale_is_refused(weights, tmp_path):
    sd = {k: v for k, v in scaled(weights).items() if not k.endswith(".scale_weight")}
    save_file(sd, tmp_path / "m.safetensors")
    n = len(linear_weights(weights))
    with pytest.raises(CheckpointError, match=rf"{n} fp8 weight\(s\) have no scale tensor"):
        wan_core.load_dit(tmp_path / "m.safetensors", config=CFG)


def test_missing_scales_found_from_the_header_only(weights, tmp_path):
    sd = scaled(weights)
    del sd["blocks.1.cross_attn.k.scale_weight"]
    save_file(sd, tmp_path / "m.safetensors")
    lazy = open_checkpoint(tmp_path / "m.safetensors")
    assert missing_fp8_scales(lazy) == ["blocks.1.cross_attn.k.weight"]
    with pytest.raises(CheckpointError, match="blocks.1.cross_attn.k.weight"):
        materialize(lazy, torch.float32)


def test_plain_fp8_file_still_loads_with_unit_scale(weights, tmp_path):
    sd = {k: (v.to(F8) if k in linear_weights(weights) else v) for k, v in weights.items()}
    save_file(sd, tmp_path / "m_fp8_e4m3fn.safetensors")
    lazy = open_checkpoint(tmp_path / "m_fp8_e4m3fn.safetensors")
    assert missing_fp8_scales(lazy) == []
    model = wan_core.load_dit(lazy, config=CFG, dtype=torch.float32)
    key = "blocks.0.ffn.0.weight"
    assert torch.equal(model.state_dict()[key], sd[key].float())


def test_diffusers_named_scaled_file_uses_its_scales(weights, tmp_path):
    """Guard: scales under diffusers layer names (``attn1.to_q.scale_weight``) are found, not reported missing."""
    sd = scaled(weights)
    names = {k: (official_to_diffusers(k) if k != "scaled_fp8" else k) for k in sd
             if not k.endswith(".scale_weight")}
    out = {}
    for k, v in sd.items():
        if k.endswith(".scale_weight"):
            weight = names[k.replace(".scale_weight", ".weight")]
            out[weight.replace(".weight", ".scale_weight")] = v
        else:
            out[names[k]] = v
    assert "blocks.0.attn1.to_q.scale_weight" in out
    save_file(out, tmp_path / "diffusers_fp8.safetensors")
    model = wan_core.load_dit(tmp_path / "diffusers_fp8.safetensors", config=CFG, dtype=torch.float32)
    for k in ("blocks.0.self_attn.q.weight", "blocks.1.ffn.2.weight", "head.head.weight", "text_embedding.0.weight"):
        expected = sd[k].float() * sd[k.replace(".weight", ".scale_weight")]
        assert torch.equal(model.state_dict()[k], expected), k


def test_text_encoder_with_missing_scales_is_refused(tmp_path):
    from wan_core.demo import tiny_tokenizer_bytes
    from wan_core.text.encoder import load_text_encoder

    from ..text import helpers as text_helpers

    sd, _ = text_helpers.export_scaled_fp8(text_helpers.reference_model())
    gone = "encoder.block.0.layer.1.DenseReluDense.wi_1.scale_weight"
    del sd[gone]
    save_file(sd, tmp_path / "umt5_fp8_scaled.safetensors")
    with pytest.raises(CheckpointError, match=r"umt5_fp8_scaled\.safetensors: a scaled fp8 file, but 1 fp8 "
                                              r"weight\(s\) have no scale tensor .*wi_1\.weight"):
        load_text_encoder(tmp_path / "umt5_fp8_scaled.safetensors", tokenizer=tiny_tokenizer_bytes())
