"""Shared builders for the cache tests: a tiny random Wan DiT, its prompt embeddings, one sampling run through
the pipeline with a cache, and counters of what the DiT really computed (forward hooks, independent of the
cache's own report)."""
from __future__ import annotations

import contextlib

import torch

from wan_core.config import DiTConfig
from wan_core.dit.model import WanDiT
from wan_core.pipeline import GenerationConfig, WanPipeline

CFG = DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32, name="tiny-cache")
# 5 blocks, so osp13 makes block 2 sparse (the first and last two stay dense)
CFG_ACCEL = DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=5, text_dim=32, name="tiny-cache-accel")
ACCEL = {"attention": "int8", "skiparse": "osp13", "skiparse_k": 2, "weights": "fp8_e4m3fn", "dtype": torch.bfloat16}


def random_state(cfg: DiTConfig = CFG, seed: int = 0) -> dict[str, torch.Tensor]:
    """Weights scaled like trained ones: matrices N(0, 1/fan_in), norms ~1, the rest N(0, 0.2^2)."""
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


def tiny_dit(cfg: DiTConfig = CFG, seed: int = 0) -> WanDiT:
    model = WanDiT(cfg).eval()
    model.load_state_dict(random_state(cfg, seed))
    return model


def prompts(cfg: DiTConfig = CFG, seed: int = 3) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(cond, uncond) embeddings: one prompt of 7 tokens and a negative prompt of 4."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(7, cfg.text_dim, generator=g)], [torch.randn(4, cfg.text_dim, generator=g)]


def run(dit, cache, steps: int = 8, guidance: float = 5.0, batched: bool = False, size: int = 64, frames: int = 9,
        solver: str = "unipc"):
    """One text-to-video sampling run through ``WanPipeline.sample_latents``: (raw latents, cache report)."""
    cond, uncond = prompts(dit.config)
    cfg = GenerationConfig(width=size, height=size, frames=frames, steps=steps, guidance=guidance, solver=solver,
                           seed=5, batched_cfg=batched)
    pipe = WanPipeline(dit=dit)
    with torch.inference_mode():
        out = pipe.sample_latents(cond, uncond if guidance != 1 else None, cfg, cache=cache)
    return out, pipe.cache_report


class Counter:
    """Counts rows (CFG-branch evaluations) through a module: each call adds its input's batch size."""

    def __init__(self):
        self.rows = 0
        self.calls = 0

    def __call__(self, module, args, output):
        self.calls += 1
        self.rows += args[0].shape[0]


@contextlib.contextmanager
def counting(dit):
    """``{"blocks": Counter, "self_attn": Counter, "text_k": Counter}`` over a run: block-stack passes (block
    0's rows), self-attention computations (all blocks) and cross-attention key projections (all blocks)."""
    counters = {"blocks": Counter(), "self_attn": Counter(), "text_k": Counter()}
    handles = [dit.blocks[0].register_forward_hook(counters["blocks"])]
    for block in dit.blocks:
        handles.append(block.self_attn.register_forward_hook(counters["self_attn"]))
        handles.append(block.cross_attn.k.register_forward_hook(counters["text_k"]))
    try:
        yield counters
    finally:
        for h in handles:
            h.remove()
