"""Shared fixtures for the VACE conditioning tests: a tiny random Wan 2.1 VAE (float32) and its float64 twin, the
float64 reference the official recipe is recomputed with."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "vae"))

from vae_testlib import randomize_  # noqa: E402


def _tiny_vae(dtype: torch.dtype):
    from wan_core.vae import TINY_VAE, WanVAE, build_model

    model = build_model(TINY_VAE, device="cpu", dtype=torch.float32)
    randomize_(model, seed=3)
    return WanVAE(model.to(dtype))


@pytest.fixture(scope="session")
def vae():
    return _tiny_vae(torch.float32)


@pytest.fixture(scope="session")
def vae64():
    return _tiny_vae(torch.float64)
