"""Euler solver for the flow ODE: x_next = x + (sigma_next - sigma) * v (docs/wan_spec.md section 6.1)."""
from __future__ import annotations

from typing import Sequence

import torch

from .flow import x0_from_velocity
from .solver_base import SolverStep, StepCounter, sigma_list

__all__ = ["EulerSolver"]


class EulerSolver:
    """First-order Euler over ``sigmas`` (``N + 1`` floats); stateless apart from the step order check."""

    name = "euler"

    def __init__(self, sigmas: Sequence[float] | torch.Tensor):
        self.sigmas = sigma_list(sigmas)
        self._counter = StepCounter(len(self.sigmas) - 1, self.name)

    def step(self, index: int, x: torch.Tensor, velocity: torch.Tensor) -> SolverStep:
        """``x``, ``velocity``: same shape (e.g. ``[B, 16, F, H, W]``); returns the sample at sigma_{index+1}."""
        self._counter.advance(index)
        sigma, sigma_next = self.sigmas[index], self.sigmas[index + 1]
        return SolverStep(x + (sigma_next - sigma) * velocity, x0_from_velocity(x, sigma, velocity))
