"""UniPC multistep solver, variant bh2, order 2, data prediction (x0), as in Wan's official sampler.

Implements docs/wan_spec.md section 6.3. Notation for a move from sigma_s to sigma_t: alpha = 1 - sigma,
lambda = ln(alpha) - ln(sigma), h = lambda_t - lambda_s, hh = -h, E = e^hh - 1 (= B(h) for bh2).

* Predictor (step i, m0 = x0_hat at x_i, m1 = x0_hat of step i-1):
  x_{i+1} = (sigma_t / sigma_s) x_i - alpha_t E m0 [- alpha_t E 0.5 D1, D1 = (m1 - m0) / r1 at order 2],
  r1 = (lambda_{i-1} - lambda_i) / h.
* Corrector (every step i > 0, no extra model call): x_i is recomputed from the stored x_{i-1} over the move
  sigma_{i-1} -> sigma_i, now also using m_t = x0_hat at x_i:
  x_i <- (sigma_i / sigma_{i-1}) x_{i-1} - alpha_i E m0 - alpha_i E (rho_1 D1 + rho_last (m_t - m0)),
  with p = the predictor order of step i-1: p = 1 -> rho_last = 1/2; p = 2 -> [[1, 1], [r1, 1]] rho = (b1, b2),
  g1 = E/hh - 1, b1 = g1/E, g2 = g1/hh - 1/2, b2 = 2 g2 / E.
* Orders: 1 at step 0 and at the last step (lower_order_final), 2 otherwise. The last move ends at sigma = 0
  (lambda = +inf, E = -1) and returns x0_hat.

Scalar coefficients are computed in float64 from the schedule's sigmas. A schedule starting at sigma = 1
(lambda = -inf) is handled by the exact limits: the difference terms that reach back to that point vanish
(D1 -> 0, and rho -> (0, b1) in the corrector).
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from .flow import log_snr, x0_from_velocity
from .solver_base import SolverStep, StepCounter, sigma_list

__all__ = ["UniPCSolver"]


class UniPCSolver:
    """UniPC-bh2 (order 2, predictor-corrector, x0 prediction) over ``sigmas`` (``N + 1`` floats)."""

    name = "unipc"

    def __init__(self, sigmas: Sequence[float] | torch.Tensor):
        self.sigmas = sigma_list(sigmas)
        self.lambdas = [log_snr(s) for s in self.sigmas]
        self.num_steps = len(self.sigmas) - 1
        self._counter = StepCounter(self.num_steps, self.name)
        self._x0_history: list[torch.Tensor] = []  # x0_hat of the previous steps, oldest first (at most 2)
        self._last_sample: torch.Tensor | None = None  # x_{i-1} as fed to its predictor
        self._last_order = 0

    def _order(self, index: int) -> int:
        return 1 if index == 0 or index == self.num_steps - 1 else 2

    def step(self, index: int, x: torch.Tensor, velocity: torch.Tensor) -> SolverStep:
        """Correct x_index (index > 0), then predict x_{index+1}. Shapes: any, all equal."""
        self._counter.advance(index)
        x0 = x0_from_velocity(x, self.sigmas[index], velocity)
        if index > 0:
            x = self._correct(index, x0)
        order = self._order(index)
        x_next = self._predict(index, x, x0, order)
        self._last_sample = x
        self._last_order = order
        self._x0_history = (self._x0_history + [x0])[-2:]
        return SolverStep(x_next, x0)

    def _move(self, s: int, t: int) -> tuple[float, float, float, float]:
        """(sigma_t / sigma_s, alpha_t, h, E) for the move from schedule index s to t."""
        h = self.lambdas[t] - self.lambdas[s]
        return self.sigmas[t] / self.sigmas[s], 1.0 - self.sigmas[t], h, math.expm1(-h)

    def _predict(self, i: int, x: torch.Tensor, m0: torch.Tensor, order: int) -> torch.Tensor:
        ratio, alpha_t, h, e = self._move(i, i + 1)
        x_next = ratio * x - (alpha_t * e) * m0
        if order == 2:
            r1 = (self.lambdas[i - 1] - self.lambdas[i]) / h
            d1 = (self._x0_history[-1] - m0) / r1
            x_next = x_next - (alpha_t * e * 0.5) * d1
        return x_next

    def _correct(self, i: int, m_t: torch.Tensor) -> torch.Tensor:
        ratio, alpha_t, h, e = self._move(i - 1, i)
        assert self._last_sample is not None, "UniPC corrector before the first step"
        m0 = self._x0_history[-1]
        x_corr = ratio * self._last_sample - (alpha_t * e) * m0
        if self._last_order == 1:
            residual = 0.5 * (m_t - m0)
        else:
            hh = -h
            g1 = e / hh - 1.0
            b1 = g1 / e
            b2 = 2.0 * (g1 / hh - 0.5) / e
            r1 = (self.lambdas[i - 2] - self.lambdas[i - 1]) / h
            if math.isinf(r1):  # the older point is at sigma = 1: its difference term vanishes
                rho_1, rho_last = 0.0, b1
            else:  # solve [[1, 1], [r1, 1]] (rho_1, rho_last) = (b1, b2)
                rho_1 = (b1 - b2) / (1.0 - r1)
                rho_last = (b2 - r1 * b1) / (1.0 - r1)
            d1 = (self._x0_history[-2] - m0) / r1
            residual = rho_1 * d1 + rho_last * (m_t - m0)
        return x_corr - (alpha_t * e) * residual
