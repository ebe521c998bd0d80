"""Plug-in contracts for step-aware caches (CFG cache, attention cache), used by ``cfg`` and ``loop``.

These are the interfaces; ``wan_core.cache`` fills them (docs/algorithms.md section 4, docs/caches.md): its
``CFGCache`` is a ``GuidanceCache`` (the Wan report's CFG cache) and its ``CacheSession`` a ``BranchCache``
(text-KV, attention cache, TeaCache, MagCache, EasyCache). The loop tells every hook which step is about to
run; the guidance wrapper asks a ``GuidanceCache`` whether the unconditional branch may be skipped and tells
a ``BranchCache`` which branch the model is evaluating, so a cache inside the DiT keeps per-branch state.
"""
from __future__ import annotations

from typing import ContextManager, Protocol, runtime_checkable

import torch

__all__ = ["StepHook", "GuidanceCache", "BranchCache", "BRANCH_COND", "BRANCH_UNCOND", "BRANCH_BATCHED"]

BRANCH_COND = "cond"
BRANCH_UNCOND = "uncond"
BRANCH_BATCHED = "cond+uncond"  # one batched forward holding [cond; uncond]


@runtime_checkable
class StepHook(Protocol):
    """Told by the sampling loop before the model is evaluated at each step."""

    def begin_step(self, step: int, num_steps: int, sigma: float) -> None:
        """``step`` in 0..num_steps-1 is about to run at noise level ``sigma``."""
        ...


class GuidanceCache(StepHook, Protocol):
    """A CFG cache: on some steps the unconditional velocity is estimated instead of computed.

    Per step the guidance wrapper calls ``skip_uncond()``; if True it runs only the conditional pass and uses
    ``estimate_uncond(v_cond)`` (e.g. v_cond plus a stored, rescaled frequency-domain residual); otherwise it
    runs both passes and calls ``record(v_cond, v_uncond)``. Tensors: ``[B, 16, F, H, W]`` velocities.
    """

    def skip_uncond(self) -> bool: ...

    def estimate_uncond(self, v_cond: torch.Tensor) -> torch.Tensor: ...

    def record(self, v_cond: torch.Tensor, v_uncond: torch.Tensor) -> None: ...


class BranchCache(StepHook, Protocol):
    """A cache inside the model (e.g. attention reuse) that keeps separate state per CFG branch.

    ``branch(name)`` is entered around each model call; name is ``BRANCH_COND``, ``BRANCH_UNCOND`` or
    ``BRANCH_BATCHED``.
    """

    def branch(self, name: str) -> ContextManager[None]: ...
