"""Attention dispatch: named backends behind one call, chosen per model and overridable per call site.

Tensors use the "HND" layout of torch SDPA (also accepted by SageAttention): q ``[B, N, Lq, d]``,
k/v ``[B, N, Lk, d]`` -> ``[B, N, Lq, d]``, contiguous (CPU SDPA is ~1.4x slower on strided inputs). Backends are plain functions ``fn(q, k, v, scale=None) -> out`` registered by name;
wrappers (skiparse, context parallelism, caches) attach by replacing the model's dispatch object, so model
code never branches on them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

AttentionFn = Callable[..., torch.Tensor]

_BACKENDS: dict[str, AttentionFn] = {}


def register_backend(name: str, fn: AttentionFn) -> None:
    """Make ``fn(q, k, v, scale=None)`` available as backend ``name``."""
    _BACKENDS[name] = fn


def attention_backends() -> list[str]:
    return sorted(_BACKENDS)


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """torch scaled_dot_product_attention; q ``[B, N, Lq, d]``, k/v ``[B, N, Lk, d]`` -> ``[B, N, Lq, d]``."""
    return F.scaled_dot_product_attention(q, k, v, scale=scale)


register_backend("sdpa", sdpa_attention)


@dataclass(frozen=True)
class AttentionCall:
    """Where an attention call comes from, so a dispatcher can route per block, per kind and per step."""

    kind: str  # "self" | "cross"
    layer: int


class AttentionDispatch:
    """Callable that routes ``(q, k, v, call)`` to the configured backend.

    ``backend`` names a registered backend for the whole model.
    """

    def __init__(self, backend: str = "sdpa"):
        if backend not in _BACKENDS:
            raise ValueError(f"unknown attention backend {backend!r}; available: {', '.join(attention_backends())}")
        self.backend = backend

    def select(self, call: AttentionCall) -> AttentionFn:
        return _BACKENDS[self.backend]

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> torch.Tensor:
        return self.select(call)(q, k, v)

    def __repr__(self) -> str:
        return f"AttentionDispatch(backend={self.backend!r})"
