"""The Wan report's CFG cache (section 4.4.2), with FasterCache's frequency-split residual compensation.

Inside its window the unconditional pass runs only on anchor steps (every ``interval`` steps); on the other
steps its velocity is estimated from the conditional one (docs/algorithms.md section 4.1 (b)):

    u_hat = c + a_L * LF(u - c) + a_H * HF(u - c)      (u, c of the last full step)

where LF keeps the spatial frequencies inside a centred disk of radius ``min(H, W) // 5`` of every frame's 2D
spectrum and HF the rest. Before each estimate the stored bands are rescaled in place by ``alpha_low`` while the
timestep is inside ``low_window`` and by ``alpha_high`` inside ``high_window``, so the scaling compounds over
consecutive skipped steps: diffusers' ``FasterCacheConfig`` defaults (1.1, 1.1, (99, 901), (-1, 301)).
Splitting in the spatial domain (``LF(d) = IFFT(mask * FFT(d))``, ``HF(d) = d - LF(d)``) is the same linear map
as FasterCache's frequency-domain sum, computed once per full step instead of an FFT pair per skipped step.
Decisions depend on the step index only (replicated on every rank).
"""
from __future__ import annotations

import torch

from .schedule import Window

__all__ = ["ALPHA", "HIGH_WINDOW", "LOW_WINDOW", "CFGCache", "low_frequency"]

ALPHA = 1.1
LOW_WINDOW = (99.0, 901.0)   # timesteps (0..1000) where the low band is rescaled, exclusive
HIGH_WINDOW = (-1.0, 301.0)  # ... the high band


def _disk(height: int, width: int, device) -> torch.Tensor:
    """Mask ``[H, W]`` of the unshifted 2D spectrum: True where the signed frequency indices satisfy
    ``fy^2 + fx^2 <= (min(H, W) // 5)^2`` (the centred disk after ``fftshift``)."""
    radius = min(height, width) // 5

    def signed(n: int) -> torch.Tensor:  # integer frequency index: 0, 1, ..., then the negative half
        k = torch.arange(n, device=device)
        return torch.where(k < (n + 1) // 2, k, k - n)

    fy, fx = signed(height), signed(width)
    return fy[:, None] ** 2 + fx[None, :] ** 2 <= radius ** 2


def low_frequency(d: torch.Tensor) -> torch.Tensor:
    """Low band of ``d [..., H, W]`` (real): ``Re IFFT2(mask * FFT2(d))`` over the last two dims, float32+."""
    d = d if d.dtype in (torch.float32, torch.float64) else d.float()
    spectrum = torch.fft.fft2(d, dim=(-2, -1))
    mask = _disk(d.shape[-2], d.shape[-1], d.device)
    return torch.fft.ifft2(spectrum * mask, dim=(-2, -1)).real.to(d.dtype)


class CFGCache:
    """``GuidanceCache`` (``wan_core.sampling.hooks``): velocities ``[B, 16, F, H, W]``.

    ``on_estimate(step)`` is called for every estimated (not computed) unconditional pass (the report)."""

    def __init__(self, window: Window, alpha_low: float = ALPHA, alpha_high: float = ALPHA,
                 low_window: tuple[float, float] = LOW_WINDOW, high_window: tuple[float, float] = HIGH_WINDOW,
                 on_estimate=None):
        self.window = window
        self.alpha_low, self.alpha_high = alpha_low, alpha_high
        self.low_window, self.high_window = low_window, high_window
        self.on_estimate = on_estimate
        self.step = -1
        self.timestep = 1000.0
        self.low: torch.Tensor | None = None
        self.high: torch.Tensor | None = None

    def begin_step(self, step: int, num_steps: int, sigma: float) -> None:
        self.step = step
        self.timestep = 1000.0 * float(sigma)

    def computes_uncond(self, step: int) -> bool:
        """Whether the schedule runs the unconditional pass at ``step``."""
        return not self.window.reuses(step)

    def skip_uncond(self) -> bool:
        skip = self.window.reuses(self.step) and self.low is not None
        if skip and self.on_estimate is not None:
            self.on_estimate(self.step)
        return skip

    def estimate_uncond(self, v_cond: torch.Tensor) -> torch.Tensor:
        if self.low is None or self.high is None:
            raise RuntimeError("CFGCache.estimate_uncond before any record(); skip_uncond() must have said False")
        t = self.timestep
        if self.low_window[0] < t < self.low_window[1]:
            self.low.mul_(self.alpha_low)
        if self.high_window[0] < t < self.high_window[1]:
            self.high.mul_(self.alpha_high)
        return (v_cond.float() + self.low + self.high).to(v_cond.dtype)

    def record(self, v_cond: torch.Tensor, v_uncond: torch.Tensor) -> None:
        d = v_uncond.float() - v_cond.float()
        self.low = low_frequency(d)
        self.high = d - self.low

    def clear(self) -> None:
        self.low = self.high = None
