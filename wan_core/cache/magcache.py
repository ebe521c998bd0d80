"""MagCache for Wan 2.1 (Ma et al., NeurIPS 2025; docs/algorithms.md section 4.3): skip the block stack while the
calibrated magnitude ratio of consecutive residuals says the accumulated error stays small.

Per CFG branch, from the retention point on: ``G *= gamma_i; k += 1; E += |1 - G|``; while ``E < threshold``
and ``k <= K`` the step reuses the last residual ``R`` (output = input + R), else it computes, stores ``R`` and
resets ``G = 1, E = 0, k = 0``. ``gamma`` is a per-step table (published for Wan 2.1 T2V 1.3B / 14B, or
measured by the ``calibrate`` method), resampled nearest-neighbour when the step count differs. No tensor
enters a decision, so every rank of a parallel run decides the same. Follows the t2v branch of
Zehong-Ma/MagCache@df81cb181776 MagCache4Wan2.1/magcache_generate.py (``magcache_forward``, ``nearest_interp``),
with per-branch state instead of alternating call counters.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..sampling.hooks import BRANCH_UNCOND

__all__ = ["MagCache", "nearest_resample"]


def nearest_resample(values: Sequence[float], length: int) -> list[float]:
    """MagCache's ``nearest_interp``: index ``round(i * (n - 1) / (length - 1))`` (round half to even)."""
    n = len(values)
    if length == 1:
        return [values[-1]]
    scale = (n - 1) / (length - 1)
    return [values[round(i * scale)] for i in range(length)]


@dataclass
class _Branch:
    ratio: float = 1.0
    error: float = 0.0
    skipped: int = 0
    residual: torch.Tensor | None = None


class MagCache:
    """Block-stack policy. ``cond_ratios`` / ``uncond_ratios``: one ratio per step of this run.

    ``retention_calls``: ``int(2 * steps * retention)``, compared, as in the source, with the call counter
    ``2 * step`` (cond) or ``2 * step + 1`` (uncond). ``stop``: steps from here on always compute."""

    name = "magcache"

    def __init__(self, cond_ratios: Sequence[float], uncond_ratios: Sequence[float], threshold: float,
                 max_skips: int, retention_calls: int, stop: int):
        self.ratios = {"cond": list(cond_ratios), "uncond": list(uncond_ratios or cond_ratios)}
        self.threshold = threshold
        self.max_skips = max_skips
        self.retention_calls = retention_calls
        self.stop = stop
        self._state: dict[str, _Branch] = {}

    def should_compute(self, branch: str, step: int, e: torch.Tensor, e0: torch.Tensor) -> bool:
        st = self._state.setdefault(branch, _Branch())
        call = 2 * step + (1 if branch == BRANCH_UNCOND else 0)
        if call < self.retention_calls:
            return True
        if step >= self.stop or st.residual is None:
            st.ratio, st.error, st.skipped = 1.0, 0.0, 0
            return True
        st.ratio *= self.ratios["uncond" if branch == BRANCH_UNCOND else "cond"][step]
        st.skipped += 1
        st.error += abs(1.0 - st.ratio)
        if self.threshold > 0 and st.error < self.threshold and st.skipped <= self.max_skips:
            return False
        st.ratio, st.error, st.skipped = 1.0, 0.0, 0
        return True

    def residual(self, branch: str) -> torch.Tensor:
        return self._state[branch].residual  # type: ignore[return-value]

    def computed(self, branch: str, step: int, residual: torch.Tensor) -> None:
        self._state[branch].residual = residual
