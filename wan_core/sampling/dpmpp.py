"""DPM-Solver++ 2M (multistep, second order, midpoint form, data prediction) for the flow path.

Implements docs/wan_spec.md section 6.4. For a move sigma_s -> sigma_t (alpha = 1 - sigma, lambda = ln alpha - ln sigma,
h = lambda_t - lambda_s), with m0 = x0_hat now and m1 = x0_hat of the previous step:
  first order:  x_t = (sigma_t / sigma_s) x - alpha_t (e^{-h} - 1) m0
  second order: additionally - 0.5 alpha_t (e^{-h} - 1) D1, D1 = (m0 - m1) / r0, r0 = h_prev / h,
                h_prev = lambda_s - lambda_prev.
Order 1 at the first step and at the last one (lower_order_final; the last move ends at sigma = 0 and returns
x0_hat), order 2 otherwise. A start at sigma = 1 (lambda = -inf, Wan's DPM++ grid) gives r0 = inf at the
next step, so D1 = 0 there: the exact limit.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from .flow import log_snr, x0_from_velocity
from .solver_base import SolverStep, StepCounter, sigma_list

__all__ = ["DPMPP2MSolver"]


class DPMPP2MSolver:
    """DPM-Solver++(2M) over ``sigmas`` (``N + 1`` floats, strictly decreasing to 0)."""

    name = "dpm++"

    def __init__(self, sigmas: Sequence[float] | torch.Tensor):
        self.sigmas = sigma_list(sigmas)
        self.lambdas = [log_snr(s) for s in self.sigmas]
        self.num_steps = len(self.sigmas) - 1
        self._counter = StepCounter(self.num_steps, self.name)
        self._prev_x0: torch.Tensor | None = None

    def step(self, index: int, x: torch.Tensor, velocity: torch.Tensor) -> SolverStep:
        """Advance ``x`` to sigma_{index+1}; ``x``, ``velocity``: same shape (e.g. ``[B, 16, F, H, W]``)."""
        self._counter.advance(index)
        i = index
        sigma_s, sigma_t = self.sigmas[i], self.sigmas[i + 1]
        x0 = x0_from_velocity(x, sigma_s, velocity)
        h = self.lambdas[i + 1] - self.lambdas[i]
        alpha_t = 1.0 - sigma_t
        e = math.expm1(-h)
        x_next = (sigma_t / sigma_s) * x - (alpha_t * e) * x0
        # the step counter makes steps run in order, so _prev_x0 is set for every i > 0
        if 0 < i < self.num_steps - 1 and self._prev_x0 is not None:
            r0 = (self.lambdas[i] - self.lambdas[i - 1]) / h
            d1 = (x0 - self._prev_x0) * (1.0 / r0)
            x_next = x_next - (0.5 * alpha_t * e) * d1
        self._prev_x0 = x0
        return SolverStep(x_next, x0)
