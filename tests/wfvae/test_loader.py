"""``wan_core.load_vae`` on the released WF-VAE layouts, built from the official fixture's weights."""
from __future__ import annotations

import argparse
import json

import pytest
import torch
from safetensors.torch import save_file

import wan_core
from wan_core.checkpoint import CheckpointError
from wan_core.wfvae.autoencoder import WFVAE

from .test_parity import official, rel


def release(kwargs: dict) -> dict:
    return {"_class_name": "WFVAEModel", **kwargs}


def check_matches(vae, refs, frames: int = 9) -> None:
    assert isinstance(vae, WFVAE)
    mean = vae.encode(refs["video"][:, :, :frames])
    assert rel(mean, refs[f"mean_{frames}"]) <= 1e-4
    assert rel(vae.decode(refs[f"mean_{frames}"]), refs[f"decoded_{frames}"]) <= 1e-4


@pytest.mark.parametrize("structure", ["4x8x8", "8x8x8"])
def test_diffusers_folder(tmp_path, structure):
    weights, kwargs, refs = official(structure)
    (tmp_path / "config.json").write_text(json.dumps(release(kwargs)))
    save_file(weights, tmp_path / "diffusion_pytorch_model.safetensors")
    vae = wan_core.load_vae(tmp_path)
    assert vae.config.temporal_factor == int(structure[0]) and vae.config.scale == tuple(kwargs["scale"])
    check_matches(vae, refs)


def test_merged_ckpt_with_config(tmp_path):
    weights, kwargs, refs = official("4x8x8")
    (tmp_path / "config.json").write_text(json.dumps(release(kwargs)))
    torch.save({"state_dict": {"gen_model": weights, "dis_model": {"x": torch.zeros(1)}}}, tmp_path / "merged.ckpt")
    for src in (tmp_path, tmp_path / "merged.ckpt"):
        vae = wan_core.load_vae(src)
        assert vae.config.shift == tuple(kwargs["shift"])
        check_matches(vae, refs)


def test_bare_ema_ckpt(tmp_path):
    weights, _, refs = official("8x8x8")
    ema = {f"module.{k}": v for k, v in weights.items() if "wavelet" not in k}  # EMA keeps trainable ones only
    torch.save({"ema_state_dict": ema, "state_dict": {"gen_model": {}}, "step": 3}, tmp_path / "wfvae_888.ckpt")
    vae = wan_core.load_vae(tmp_path / "wfvae_888.ckpt", dtype=torch.float32)
    assert vae.config.temporal_factor == 8 and vae.config.latent_scale == (0.18215,) * 4
    check_matches(vae, refs)


def test_partial_mismatched_and_unsafe_files_are_refused_in_one_line(tmp_path):
    weights, kwargs, _ = official("4x8x8")
    partial = {k: v for k, v in weights.items() if "decoder.layer.1." not in k}
    torch.save(partial, tmp_path / "partial.ckpt")
    wrong = dict(weights, **{"decoder.conv_out.weight": torch.zeros(24, 3, 3, 3)})
    torch.save(wrong, tmp_path / "wrong.ckpt")
    torch.save({"state_dict": weights, "args": argparse.Namespace(lr=1)}, tmp_path / "unsafe.ckpt")
    bad_filter = dict(weights, **{"encoder.wavelet_transform_in.h_conv.conv.weight": torch.ones(1, 1, 2, 2, 2)})
    torch.save(bad_filter, tmp_path / "filter.ckpt")
    expect = {"partial": "missing key", "wrong": "shape mismatch", "unsafe": "weights_only=True",
              "filter": "not a Haar filter"}
    for name, words in expect.items():
        with pytest.raises(CheckpointError, match=words) as err:
            wan_core.load_vae(tmp_path / f"{name}.ckpt")
        assert "\n" not in str(err.value)
    (tmp_path / "config.json").write_text(json.dumps(release(dict(kwargs, base_channels=64))))
    save_file(weights, tmp_path / "w.safetensors")
    with pytest.raises(CheckpointError, match="does not match its weights"):
        wan_core.load_vae(tmp_path)
