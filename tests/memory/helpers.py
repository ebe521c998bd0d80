"""Shared builders for the memory tests: a tiny random Wan DiT (6 blocks) and its inputs."""
from __future__ import annotations

import torch

import wan_core
from wan_core.config import DiTConfig

CFG = DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=6, text_dim=32, text_len=16, name="tiny-swap")


def random_state(cfg: DiTConfig = CFG, seed: int = 0) -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        model = wan_core.WanDiT(cfg)
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=g) * (v[0].numel() ** -0.5 if v.dim() > 1 else 0.2)
            for k, v in model.state_dict().items()}


def inputs(cfg: DiTConfig = CFG):
    g = torch.Generator().manual_seed(1)
    return torch.randn(1, cfg.in_dim, 2, 8, 8, generator=g), torch.tensor([500]), [torch.randn(5, cfg.text_dim,
                                                                                             generator=g)]


def load(**kw):
    return wan_core.load_dit(random_state(), config=CFG, **kw)
