"""A tiny random Wan DiT for the FP8 tests (weights scaled like trained ones) and its inputs.

The builders are the attention tests' (one definition); only the config differs (2 blocks, not 6).
"""
from __future__ import annotations

from wan_core.config import DiTConfig

from ..attention import helpers as _shared

CFG = DiTConfig(dim=256, ffn_dim=512, num_heads=2, num_layers=2, text_dim=64, name="tiny-fp8")


def random_dit_state(cfg: DiTConfig = CFG, seed: int = 0):
    return _shared.random_dit_state(cfg, seed)


def dit_inputs(cfg: DiTConfig = CFG, seed: int = 1):
    return _shared.dit_inputs(cfg, grid=(2, 8, 8), seed=seed)
