"""Make the Wan VAE modules trainable: out-of-place twins of the in-place inference ops, for training only.

The inference code (``wan_core/vae``) normalises and activates in place to halve peak memory; autograd
needs those inputs kept. ``autograd_safe_vae()`` swaps in the same formulas computed out of place while a
training loop runs and restores the originals afterwards, so the trained weights are those of the
unchanged module code.
"""
from __future__ import annotations

import contextlib
import types

import torch
import torch.nn.functional as F


def _rms_forward(self, x: torch.Tensor) -> torch.Tensor:
    # same as RMSNorm.forward: x / max(||x||_2, 1e-12) * sqrt(C) * gamma, norm in float32
    h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    norm = torch.linalg.vector_norm(h, dim=1, keepdim=True).clamp_min(1e-12)
    return (h / norm * (self.gamma.to(h.dtype) * self.scale)).to(x.dtype)


def _silu(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    # in place only where autograd does not need the input (the no-grad fast paths rely on it)
    return F.silu(x, inplace=inplace and not (torch.is_grad_enabled() and x.requires_grad))


@contextlib.contextmanager
def autograd_safe_vae():
    """Within the block, Wan VAE modules compute out of place (differentiable); restored on exit."""
    from ..vae import blocks, model

    shim = types.SimpleNamespace(**{k: getattr(F, k) for k in dir(F) if not k.startswith("__")})
    shim.silu = _silu
    saved = (blocks.RMSNorm.forward, blocks.F, model.F)
    blocks.RMSNorm.forward, blocks.F, model.F = _rms_forward, shim, shim
    try:
        yield
    finally:
        blocks.RMSNorm.forward, blocks.F, model.F = saved
