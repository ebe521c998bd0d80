"""Parity with the official Open-Sora Plan ``WFVAEModel`` (fixture and how it was made: tests/wfvae/data/README.md)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from wan_core.wfvae.config import config_from_shapes
from wan_core.wfvae.model import build_model

FIXTURE = Path(__file__).parent / "data" / "wfvae_official_tiny.safetensors"
CASES = [("4x8x8", 1), ("4x8x8", 9), ("4x8x8", 33), ("8x8x8", 1), ("8x8x8", 9), ("8x8x8", 57)]


def official(structure: str) -> tuple[dict[str, torch.Tensor], dict, dict[str, torch.Tensor]]:
    """(official state dict in float32, its WFVAEModel kwargs, the reference tensors) of one structure."""
    tensors = load_file(FIXTURE)
    with safe_open(FIXTURE, "pt") as f:
        kwargs = json.loads(f.metadata()["configs"])[structure]
    weights = {k.split("/", 2)[2]: v.float() for k, v in tensors.items() if k.startswith(f"{structure}/weights/")}
    refs = {k.split("/", 1)[1]: v.float() for k, v in tensors.items() if k.startswith(f"{structure}/")
            and "/weights/" not in k}
    return weights, kwargs, refs


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("structure,frames", CASES)
def test_encode_decode_match_official(structure, frames):
    weights, kwargs, refs = official(structure)
    own = {k: v for k, v in weights.items() if "wavelet" not in k}
    cfg = config_from_shapes({k: tuple(v.shape) for k, v in own.items()}, release=kwargs)
    assert cfg.temporal_factor == int(structure[0])
    model = build_model(cfg).eval()
    model.load_state_dict(own, strict=True)
    with torch.no_grad():
        mean = model.encode_mean(refs["video"][:, :, :frames])
        video = model.decode(refs[f"mean_{frames}"])
    assert mean.shape == refs[f"mean_{frames}"].shape
    assert rel(mean, refs[f"mean_{frames}"]) <= 1e-4
    assert video.shape == refs[f"decoded_{frames}"].shape == (1, 3, frames, 8, 16)
    assert rel(video, refs[f"decoded_{frames}"]) <= 1e-4
