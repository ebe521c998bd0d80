"""Classifier-free guidance: v = v_u + g (v_c - v_u), as a velocity function for the sampling loop.

Implements docs/wan_spec.md section 6.1 (CFG) and 6.2. Guidance 1 runs only the conditional pass (and 0 only the
unconditional one). Cond and uncond are separate forwards by default (the official code's memory profile);
``batched=True`` runs them as one forward of batch 2B (faster, more memory). Optional cache objects
(``hooks.GuidanceCache``, ``hooks.BranchCache``) plug in without changing this code.
"""
from __future__ import annotations

import contextlib
import math
import numbers
from typing import Any, Callable

import torch
import torch.nn.functional as F

from .hooks import BRANCH_BATCHED, BRANCH_COND, BRANCH_UNCOND, BranchCache, GuidanceCache

__all__ = ["combine_guidance", "concat_contexts", "check_guidance", "ClassifierFreeGuidance", "ModelFn"]

# model_fn(x [B, 16, F, H, W], timestep [B], context) -> velocity [B, 16, F, H, W]; context is
# [B, L, D] or a list of B tensors [L_i, D] (the DiT call of docs/design.md section 4).
ModelFn = Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]


def check_guidance(guidance: float) -> float:
    """Return ``guidance`` as a float if it is finite and >= 0, else raise ``ValueError``."""
    if isinstance(guidance, bool) or not isinstance(guidance, numbers.Real) or not (
        math.isfinite(guidance) and guidance >= 0
    ):
        raise ValueError(
            f"guidance={guidance!r}: guidance must be a finite number >= 0 "
            "(1 = no guidance, one pass; official T2V default 5.0)"
        )
    return float(guidance)


def combine_guidance(v_cond: torch.Tensor, v_uncond: torch.Tensor, guidance: float) -> torch.Tensor:
    """``v_uncond + guidance * (v_cond - v_uncond)``; tensors of equal shape."""
    return v_uncond + guidance * (v_cond - v_uncond)


def concat_contexts(first: Any, second: Any) -> Any:
    """Batch two text contexts: lists of ``[L_i, D]`` are joined; tensors ``[B, L, D]`` are concatenated on
    dim 0, the shorter one zero-padded in L first. Zero rows are what Wan's DiT appends anyway (it pads every
    context to 512 tokens and does not mask them), so padding does not change its output."""
    if isinstance(first, (list, tuple)) and isinstance(second, (list, tuple)):
        return list(first) + list(second)
    if isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor):
        if first.ndim != 3 or second.ndim != 3 or first.shape[2] != second.shape[2]:
            raise ValueError(
                f"cannot batch contexts of shapes {tuple(first.shape)} and {tuple(second.shape)}; "
                "expected [B, L, D] tensors with the same D"
            )
        length = max(first.shape[1], second.shape[1])
        first = F.pad(first, (0, 0, 0, length - first.shape[1]))
        second = F.pad(second, (0, 0, 0, length - second.shape[1]))
        return torch.cat([first, second], dim=0)
    raise ValueError(
        f"cannot batch a {type(first).__name__} context with a {type(second).__name__} context; "
        "give both as lists of [L, D] tensors or both as [B, L, D] tensors"
    )


class ClassifierFreeGuidance:
    """Velocity function ``(x, sigma, timestep) -> v`` applying CFG around ``model_fn``.

    model_fn: ``(x [B,16,F,H,W], timestep [B], context) -> v [B,16,F,H,W]``. cond / uncond: the contexts
    of the prompt and of the negative prompt (``uncond`` may be None only when guidance is 1).
    guidance: g >= 0. batched: one forward of batch 2B instead of two of batch B.
    cfg_cache: optional ``GuidanceCache`` (skip the uncond pass on some steps).
    branch_cache: optional ``BranchCache`` (told which branch each forward computes).
    Both caches are step hooks: the loop reaches them through ``begin_step``.
    """

    def __init__(self, model_fn: ModelFn, cond: Any, uncond: Any = None, guidance: float = 5.0, *,
                 batched: bool = False, cfg_cache: GuidanceCache | None = None,
                 branch_cache: BranchCache | None = None):
        self.model_fn = model_fn
        self.cond = cond
        self.uncond = uncond
        self.guidance = check_guidance(guidance)
        self.batched = batched
        self.cfg_cache = cfg_cache
        self.branch_cache = branch_cache
        if uncond is None and self.guidance != 1.0:
            raise ValueError(
                f"guidance={self.guidance} needs an unconditional context (the negative prompt's embedding; "
                "the official default is DEFAULT_NEGATIVE_PROMPT); pass uncond=... or use guidance=1"
            )
        self._batched_context = concat_contexts(cond, uncond) if batched and uncond is not None else None

    def begin_step(self, step: int, num_steps: int, sigma: float) -> None:
        """Forward the loop's step notice to the caches."""
        for cache in (self.cfg_cache, self.branch_cache):
            if cache is not None:
                cache.begin_step(step, num_steps, sigma)

    def _forward(self, branch: str, x: torch.Tensor, timestep: torch.Tensor, context: Any) -> torch.Tensor:
        scope = self.branch_cache.branch(branch) if self.branch_cache is not None else contextlib.nullcontext()
        with scope:
            return self.model_fn(x, timestep, context)

    def __call__(self, x: torch.Tensor, sigma: float, timestep: torch.Tensor) -> torch.Tensor:
        """Guided velocity at ``x`` ``[B, 16, F, H, W]``; ``timestep`` ``[B]``; ``sigma`` unused by the model."""
        g = self.guidance
        if g == 1.0:
            return self._forward(BRANCH_COND, x, timestep, self.cond)
        if g == 0.0:
            return self._forward(BRANCH_UNCOND, x, timestep, self.uncond)
        if self.cfg_cache is not None and self.cfg_cache.skip_uncond():
            v_cond = self._forward(BRANCH_COND, x, timestep, self.cond)
            return combine_guidance(v_cond, self.cfg_cache.estimate_uncond(v_cond), g)
        if self.batched:
            both = self._forward(BRANCH_BATCHED, torch.cat([x, x]), torch.cat([timestep, timestep]),
                                 self._batched_context)
            v_cond, v_uncond = both.chunk(2)
        else:
            v_cond = self._forward(BRANCH_COND, x, timestep, self.cond)
            v_uncond = self._forward(BRANCH_UNCOND, x, timestep, self.uncond)
        if self.cfg_cache is not None:
            self.cfg_cache.record(v_cond, v_uncond)
        return combine_guidance(v_cond, v_uncond, g)
