"""A tiny random VACE DiT for the pipeline, CLI and node tests."""
from __future__ import annotations

import torch

from wan_core.config import DIT_PRESETS
from wan_core.demo import randomize_
from wan_core.dit.model import WanDiT


def vace_dit(seed: int, text_dim: int = 32) -> WanDiT:
    """The tiny DiT (2 blocks) with a VACE block on each, every weight random (``before_proj`` / ``after_proj``
    too: zero in a fresh official model, which would make VACE a no-op)."""
    cfg = DIT_PRESETS["tiny"].replace(text_dim=text_dim, vace_layers=(0, 1), vace_in_dim=96)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        dit = WanDiT(cfg).eval()
        randomize_(dit)
    return dit
