"""Shared builders for the attention tests: a tiny random Wan DiT and independent float64 references."""
from __future__ import annotations

import torch

from wan_core.attention import AttentionDispatch, sdpa_attention
from wan_core.config import DiTConfig
from wan_core.dit.model import WanDiT

# head_dim 128 as in the released models; 6 blocks so osp13 has sparse blocks (2..3)
CFG = DiTConfig(dim=256, ffn_dim=512, num_heads=2, num_layers=6, text_dim=64, name="tiny-accel")


def random_dit_state(cfg: DiTConfig = CFG, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights scaled like trained ones (matrices ~ N(0, 1/fan_in), biases and tables ~ N(0, 0.2^2))."""
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


def dit_inputs(cfg: DiTConfig = CFG, grid=(3, 14, 14), seed: int = 1):
    """Latents ``[1, 16, F, H, W]`` with patch grid ``(F, H/2, W/2)``, timestep, context list."""
    g = torch.Generator().manual_seed(seed)
    f, h, w = grid
    x = torch.randn(1, cfg.in_dim, f, 2 * h, 2 * w, generator=g)
    return x, torch.tensor([700]), [torch.randn(9, cfg.text_dim, generator=g)]


class Recorder:
    """A backend that records every call (kind and layer come from the dispatcher wrapper) then runs SDPA."""

    def __init__(self):
        self.calls: list[dict] = []

    def __call__(self, q, k, v, scale=None, attn_mask=None):
        self.calls.append({"q": q.detach().clone(), "k": k.detach().clone(), "v": v.detach().clone(),
                           "mask": attn_mask})
        return sdpa_attention(q, k, v, scale, attn_mask)


class CapturingDispatch(AttentionDispatch):
    """Dense dispatch that keeps (call, q, k, v) of every attention call."""

    def __init__(self):
        super().__init__("sdpa")
        self.records = []

    def __call__(self, q, k, v, call):
        self.records.append((call, q.detach().clone(), k.detach().clone(), v.detach().clone()))
        return super().__call__(q, k, v, call)


def naive_attention(q, k, v, key_mask=None):
    """float64 softmax(q k^T / sqrt(d)) v over the last two dims; ``key_mask`` bool [..., Lk] (True = keep)."""
    q, k, v = q.double(), k.double(), v.double()
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if key_mask is not None:
        s = s.masked_fill(~key_mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def cos_rel_l1(out, ref):
    """Cosine similarity and relative L1 error of ``out`` against ``ref`` (float64)."""
    a, b = out.double().flatten(), ref.double().flatten()
    return (a @ b / (a.norm() * b.norm())).item(), ((a - b).abs().sum() / b.abs().sum()).item()


__all__ = ["CFG", "CapturingDispatch", "Recorder", "cos_rel_l1", "dit_inputs", "naive_attention",
           "random_dit_state"]
