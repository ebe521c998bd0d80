"""TeaCache for Wan 2.1 (Liu et al., CVPR 2025; docs/algorithms.md section 4.2): skip the block stack when the timestep
embedding has barely changed since the last computed step, reusing that step's block-stack residual.

Per CFG branch: ``d_i = mean|I_i - I_{i-1}| / mean|I_{i-1}|`` of the indicator ``I`` (``e`` = the timestep
embedding, or ``e0`` = the time projection), rescaled by a polynomial fitted per model, accumulated
``A += poly(d_i)``; while ``A < threshold`` the step reuses ``R`` (output = input + R), else it computes, stores
``R`` and resets ``A``. Steps outside ``[first, stop)`` always compute. The indicator is a function of the
timestep only, so every rank of a parallel run takes the same decisions. Follows the t2v branch of
ali-vilab/TeaCache@7c10efc4702c TeaCache4Wan2.1/teacache_generate.py, with per-branch state instead of
alternating call counters, and threshold 0 meaning "never skip" (published polynomials can be negative).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .calibration import relative_l1

__all__ = ["TeaCache", "polynomial"]


def polynomial(coefficients: Sequence[float], x: float) -> float:
    """``numpy.poly1d(coefficients)(x)``: coefficients highest degree first (Horner's rule)."""
    y = 0.0
    for c in coefficients:
        y = y * x + c
    return y


@dataclass
class _Branch:
    accumulated: float = 0.0
    previous: torch.Tensor | None = None
    residual: torch.Tensor | None = None


class TeaCache:
    """Block-stack policy. ``mode``: "e" (``e [b, D]``) or "e0" (``e0 [b, 6, D]``) as the indicator."""

    name = "teacache"

    def __init__(self, coefficients: Sequence[float], threshold: float, mode: str, first: int, stop: int):
        self.coefficients = tuple(coefficients)
        self.threshold = threshold
        self.mode = mode
        self.first, self.stop = first, stop
        self._state: dict[str, _Branch] = {}

    def should_compute(self, branch: str, step: int, e: torch.Tensor, e0: torch.Tensor) -> bool:
        indicator = (e0 if self.mode == "e0" else e).float()
        st = self._state.setdefault(branch, _Branch())
        if not self.first <= step < self.stop or st.previous is None or st.residual is None:
            compute, st.accumulated = True, 0.0
        else:
            st.accumulated += polynomial(self.coefficients, relative_l1(indicator, st.previous))
            compute = not (self.threshold > 0 and st.accumulated < self.threshold)
            if compute:
                st.accumulated = 0.0
        st.previous = indicator.clone()
        return compute

    def residual(self, branch: str) -> torch.Tensor:
        return self._state[branch].residual  # type: ignore[return-value]

    def computed(self, branch: str, step: int, residual: torch.Tensor) -> None:
        self._state[branch].residual = residual
