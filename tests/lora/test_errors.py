"""LoRA refusals (docs/lora.md section 3): one message naming the file, what the LoRA is for and the first key
that does not fit; unused keys reported with their count, never dropped silently."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from wan_core import LoraError, apply_lora
from wan_core.config import DiTConfig
from wan_core.dit.model import WanDiT
from wan_core.lora import LoraWarning

from .helpers import CFG, official_file, random_lora


def model() -> WanDiT:
    torch.manual_seed(0)
    return WanDiT(CFG).eval()


def lowrank(*layers: str, rank: int = 2, width: int = 64, down="lora_A", up="lora_B", sep=".") -> dict:
    sd = {}
    for layer in layers:
        sd[f"{layer}{sep}{down}.weight"] = torch.randn(rank, width)
        sd[f"{layer}{sep}{up}.weight"] = torch.randn(width, rank)
    return sd


def refused(tmp_path, name: str, sd: dict) -> str:
    path = tmp_path / name
    save_file(sd, path)
    with pytest.raises(LoraError) as err:
        apply_lora(model(), path)
    message = str(err.value)
    assert name in message and "\n" not in message
    return message


CASES = {
    # file name: (tensors, what the message must say, first key named: safetensors stores keys sorted)
    "sdxl_style.safetensors": (
        {**lowrank("lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q", down="lora_down", up="lora_up"),
         **lowrank("lora_te2_text_model_encoder_layers_0_mlp_fc1", down="lora_down", up="lora_up")},
        "Stable Diffusion XL", "lora_te2_text_model_encoder_layers_0_mlp_fc1.lora_down.weight"),
    "flux_style.safetensors": (lowrank("diffusion_model.double_blocks.0.img_attn.qkv"), "Flux",
                               "diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight"),
    "flux_diffusers.safetensors": (lowrank("transformer.single_transformer_blocks.0.attn.to_q"), "Flux",
                                   "transformer.single_transformer_blocks.0.attn.to_q.lora_A.weight"),
    "hunyuan_video.safetensors": (
        {**lowrank("diffusion_model.txt_in.individual_token_refiner.blocks.0.self_attn_qkv"),
         **lowrank("diffusion_model.double_blocks.0.img_attn_qkv")},
        "HunyuanVideo", "diffusion_model.double_blocks.0.img_attn_qkv.lora_A.weight"),
    "wan14b_motion.safetensors": (
        official_file(random_lora(DiTConfig(dim=5120, ffn_dim=128, num_heads=40, num_layers=1, text_dim=32),
                                  rank=2, names={"blocks.0.self_attn.q"})),
        "made for Wan 14B", "diffusion_model.blocks.0.self_attn.q.lora_A.weight"),
    "i2v_camera.safetensors": (
        {**official_file(random_lora(names={"blocks.0.self_attn.q"})),
         **lowrank("diffusion_model.blocks.0.cross_attn.k_img")},
        "image-to-video", "diffusion_model.blocks.0.cross_attn.k_img.lora_A.weight"),
    "i2v_kohya.safetensors": (lowrank("lora_unet_blocks_1_cross_attn_v_img", down="lora_down", up="lora_up"),
                              "image-to-video", "lora_unet_blocks_1_cross_attn_v_img.lora_down.weight"),
    "lokr_style.safetensors": ({"lora_unet_blocks_0_self_attn_q.lokr_w1": torch.randn(4, 4),
                                "lora_unet_blocks_0_self_attn_q.lokr_w2": torch.randn(16, 16)},
                               "LoKr is not supported", "lora_unet_blocks_0_self_attn_q.lokr_w1"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_refusal_names_file_purpose_and_first_key(tmp_path, name):
    sd, purpose, first_key = CASES[name]
    message = refused(tmp_path, name, sd)
    assert purpose in message and first_key in message, message


def test_a_full_model_is_not_a_lora(tmp_path):
    message = refused(tmp_path, "wan_dit.safetensors", {k: v.contiguous() for k, v in model().state_dict().items()})
    assert "not a LoRA" in message and "a Wan 2.1 DiT" in message


def test_loha_is_named(tmp_path):
    sd = {"lora_unet_blocks_0_self_attn_q.hada_w1_a": torch.randn(4, 4),
          "lora_unet_blocks_0_self_attn_q.lora_down.weight": torch.randn(2, 32),
          "lora_unet_blocks_0_self_attn_q.lora_up.weight": torch.randn(32, 2)}
    message = refused(tmp_path, "loha.safetensors", sd)  # the low-rank pair does not fit width 64 either
    assert "lora_unet_blocks_0_self_attn_q" in message


def test_unused_keys_are_reported(tmp_path):
    sd = official_file(random_lora(names={"blocks.0.self_attn.q", "blocks.1.ffn.2"}))
    sd.update(lowrank("diffusion_model.blocks.7.self_attn.q"))  # a block this 2-block model lacks
    sd["diffusion_model.blocks.0.self_attn.q.dora_scale"] = torch.ones(64, 1)
    sd["diffusion_model.blocks.0.something_else"] = torch.ones(3)
    path = tmp_path / "partly_used.safetensors"
    save_file(sd, path)
    with pytest.warns(LoraWarning, match=r"partly_used\.safetensors .*4 keys not used") as record:
        applied = apply_lora(model(), path)
    assert applied.parameters == 2 and len(applied.unused) == 4  # every key of the missing layer counts
    text = str(record[0].message)
    assert "diffusion_model.blocks." in text and "\n" not in text  # examples named in the one line
    unused = dict(applied.unused)
    assert unused["diffusion_model.blocks.0.something_else"] == "not a LoRA tensor name"
    assert "blocks.7.self_attn.q" in unused["diffusion_model.blocks.7.self_attn.q.lora_A.weight"]
    assert "blocks.7.self_attn.q" in unused["diffusion_model.blocks.7.self_attn.q.lora_B.weight"]
    assert "DoRA" in unused["diffusion_model.blocks.0.self_attn.q.dora_scale"]


def test_bad_strength_is_refused():
    with pytest.raises(ValueError, match="strength"):
        apply_lora(model(), official_file(random_lora(names={"blocks.0.ffn.0"})), strength=float("nan"))


def test_foreign_lora_from_key_names_alone():
    """The node's pre-queue check: no model at hand, only the header's key names."""
    from wan_core.lora import foreign_lora

    for name, (sd, purpose, _first) in CASES.items():
        verdict = foreign_lora(sd)
        if name.startswith(("wan14b", "i2v", "lokr")):
            assert verdict is None, name  # Wan layer names: decided against the model when it is applied
        else:
            assert verdict is not None and purpose in verdict, (name, verdict)
    for sd in (official_file(random_lora()), kohya_file_of_one()):
        assert foreign_lora(sd) is None


def kohya_file_of_one() -> dict:
    from .helpers import kohya_file

    return kohya_file(random_lora(names={"blocks.0.ffn.2"}))


def _poisoned(kind: str) -> dict:
    sd = official_file(random_lora(names={"blocks.0.ffn.0", "blocks.1.self_attn.q"}))
    key = "diffusion_model.blocks.1.self_attn.q.lora_B.weight"
    if kind == "nan":
        sd[key][3, 1] = float("nan")
    elif kind == "inf":
        sd[key][0, 0] = float("inf")
    elif kind == "alpha":
        sd["diffusion_model.blocks.1.self_attn.q.alpha"] = torch.tensor(float("inf"))
    elif kind == "diff":
        sd = {"diffusion_model.blocks.0.norm3.diff": torch.full((64,), float("-inf"))}
    return sd


@pytest.mark.parametrize("merge", [True, False], ids=["merged", "unmerged"])
@pytest.mark.parametrize("kind, pattern", [
    ("nan", r"blocks\.1\.self_attn\.q\.lora_B\.weight holds NaN/Inf values \(1 of 256\)"),
    ("inf", r"blocks\.1\.self_attn\.q\.lora_B\.weight holds NaN/Inf values \(1 of 256\)"),
    ("alpha", r"blocks\.1\.self_attn\.q\.alpha holds NaN/Inf"),
    ("diff", r"blocks\.0\.norm3\.diff holds NaN/Inf values \(64 of 64\)"),
])
def test_nonfinite_lora_is_refused_naming_file_and_key(tmp_path, kind, pattern, merge):
    path = tmp_path / f"{kind}.safetensors"
    save_file(_poisoned(kind), path)
    m = model()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    with pytest.raises(LoraError, match=rf"^{kind}\.safetensors: .*{pattern}") as err:
        apply_lora(m, path, merge=merge)
    assert "\n" not in str(err.value)
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())  # nothing was touched


def test_infinite_header_alpha_is_refused(tmp_path):
    import json

    path = tmp_path / "peft.safetensors"
    sd = official_file(random_lora(names={"blocks.0.ffn.0"}, alpha=None))
    save_file(sd, path, metadata={"lora_adapter_metadata": json.dumps({"transformer.lora_alpha": float("inf")})})
    with pytest.raises(LoraError, match=r"peft\.safetensors: the alpha of .*blocks\.0\.ffn\.0.* must be a finite"):
        apply_lora(model(), path)


@pytest.mark.parametrize("strength", [1e39, -1e39, 100.5, True])
def test_huge_strength_is_a_value_error_naming_the_range(strength):
    with pytest.raises(ValueError, match=r"strength must be a finite number from -100 to 100"):
        apply_lora(model(), official_file(random_lora(names={"blocks.0.ffn.0"})), strength=strength)


def test_largest_strength_is_applied_finite():
    m = model()
    apply_lora(m, official_file(random_lora(names={"blocks.0.ffn.0"})), strength=-100.0)
    assert torch.isfinite(m.blocks[0].ffn[0].weight).all()


def test_deeply_nested_header_metadata_is_ignored(tmp_path):
    """The PEFT header is untrusted text too: 200k-deep JSON reads as no header alpha, not a RecursionError."""
    path = tmp_path / "deep.safetensors"
    save_file(official_file(random_lora(names={"blocks.0.ffn.0"})), path,
              metadata={"lora_adapter_metadata": "[" * 200000 + "]" * 200000})
    applied = apply_lora(model(), path)
    assert applied.parameters == 1
