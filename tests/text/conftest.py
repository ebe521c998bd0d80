"""Session fixtures for the umT5 tests: one tiny tokenizer, one randomised reference encoder, and the
checkpoint files written from it (official .pth/.safetensors, transformers names, ComfyUI prefix, scaled fp8,
transformers folder, diffusers pipeline folder)."""
from __future__ import annotations

import types

import pytest
import torch
from safetensors.torch import save_file

from . import helpers as H


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("umt5")
    spm_bytes = H.train_spiece()
    tok_dir = root / "tokenizer"
    tok_dir.mkdir()
    (tok_dir / "spiece.model").write_bytes(spm_bytes)
    hf_tok = H.hf_tokenizer(tok_dir)
    json_dir = root / "tokenizer_json"
    hf_tok.save_pretrained(str(json_dir))  # writes tokenizer.json (transformers' conversion of the spm)
    assert (json_dir / "tokenizer.json").exists()

    ref = H.reference_model()
    official = H.export_official(ref)
    hf_sd = H.hf_state_dict(ref)

    files = {}
    files["official_pth"] = root / "models_t5_umt5-xxl-enc-bf16.pth"
    torch.save(official, files["official_pth"])
    files["official_st"] = root / "official.safetensors"
    save_file(official, str(files["official_st"]))
    files["hf_st"] = root / "hf.safetensors"
    save_file(hf_sd, str(files["hf_st"]))
    # ComfyUI split file: transformers names without the tied copy, tokenizer embedded.
    comfy = {k: v for k, v in hf_sd.items() if k != "encoder.embed_tokens.weight"}
    comfy["spiece_model"] = H.spiece_tensor(spm_bytes)
    files["comfy_st"] = root / "umt5_xxl_fp32.safetensors"
    save_file(comfy, str(files["comfy_st"]))
    # ComfyUI all-in-one: prefixed text encoder next to DiT keys.
    aio = {H.COMFY_PREFIX + k: v for k, v in hf_sd.items()}
    aio["model.diffusion_model.head.modulation"] = torch.zeros(1, 2, 8)
    aio["model.diffusion_model.blocks.0.self_attn.q.weight"] = torch.zeros(8, 8)
    files["aio_st"] = root / "wan_all_in_one.safetensors"
    save_file(aio, str(files["aio_st"]))
    # Scaled fp8 (umt5_xxl_fp8_e4m3fn_scaled layout) with the tokenizer embedded.
    fp8, deq = H.export_scaled_fp8(ref)
    fp8["spiece_model"] = H.spiece_tensor(spm_bytes)
    files["fp8_st"] = root / "umt5_xxl_fp8_e4m3fn_scaled.safetensors"
    save_file(fp8, str(files["fp8_st"]))
    ref_fp8 = H.reference_model()
    ref_fp8.load_state_dict({**deq, "encoder.embed_tokens.weight": deq["shared.weight"]})
    # transformers folder (tokenizer inside) and diffusers pipeline folder (text_encoder/ + tokenizer/).
    files["hf_folder"] = root / "umt5-tiny"
    ref.save_pretrained(str(files["hf_folder"]))
    hf_tok.save_pretrained(str(files["hf_folder"]))
    files["pipeline"] = root / "Wan2.1-T2V-tiny-Diffusers"
    ref.save_pretrained(str(files["pipeline"] / "text_encoder"))
    hf_tok.save_pretrained(str(files["pipeline"] / "tokenizer"))

    return types.SimpleNamespace(root=root, spm_bytes=spm_bytes, tok_dir=tok_dir, json_dir=json_dir,
                                 hf_tok=hf_tok, ref=ref, ref_fp8=ref_fp8, official=official, hf_sd=hf_sd,
                                 files=files)


@pytest.fixture(scope="session")
def reference_outputs(tiny):
    """Reference hidden states of helpers.PROMPTS (transformers tokenizer + model, official flow)."""
    return H.reference_encode(tiny.ref, tiny.hf_tok, H.PROMPTS)
