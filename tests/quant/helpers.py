"""A tiny random Wan DiT for the FP8 tests (weights scaled like trained ones) and its inputs."""
from __future__ import annotations

import torch

from wan_core.config import DiTConfig
from wan_core.dit.model import WanDiT

CFG = DiTConfig(dim=256, ffn_dim=512, num_heads=2, num_layers=2, text_dim=64, name="tiny-fp8")


def random_dit_state(cfg: DiTConfig = CFG, seed: int = 0) -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        model = WanDiT(cfg)
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, v in model.state_dict().items():
        if k.endswith(("norm_q.weight", "norm_k.weight", "norm3.weight")):
            out[k] = 1.0 + 0.1 * torch.randn(v.shape, generator=g)
        elif v.dim() > 1 and "modulation" not in k:
            out[k] = torch.randn(v.shape, generator=g) * v[0].numel() ** -0.5
        else:
            out[k] = torch.randn(v.shape, generator=g) * 0.2
    return out


def dit_inputs(cfg: DiTConfig = CFG, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, cfg.in_dim, 2, 16, 16, generator=g), torch.tensor([700]),
            [torch.randn(9, cfg.text_dim, generator=g)])
