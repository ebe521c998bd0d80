"""What every solver is: the step result, the one-run solver protocol, the sigma list and the step-order check.

The solvers (``euler``, ``unipc``, ``dpmpp``) build on this module; the registry that picks one by name
(``solver.make_solver``) imports them, so it lives apart from these types (no import circle).
"""
from __future__ import annotations

from typing import NamedTuple, Protocol, Sequence

import torch

__all__ = ["FlowSolver", "SolverStep", "StepCounter", "sigma_list"]


class SolverStep(NamedTuple):
    """Result of one step: ``x`` the sample at sigma_{i+1}, ``x0`` the data estimate made at step i."""

    x: torch.Tensor
    x0: torch.Tensor


class FlowSolver(Protocol):
    """One run of a flow-matching solver over ``sigmas`` (``N + 1`` floats, strictly decreasing to 0)."""

    sigmas: list[float]

    def step(self, index: int, x: torch.Tensor, velocity: torch.Tensor) -> SolverStep:
        """Advance ``x`` (any shape, e.g. ``[B, 16, F, H, W]``) from sigma_index to sigma_{index+1}.

        ``velocity``: the model's flow prediction ``v = eps - x0`` at (x, sigma_index), same shape as ``x``.
        Steps must be taken in order 0, 1, ..., N-1.
        """
        ...


def sigma_list(sigmas: Sequence[float] | torch.Tensor) -> list[float]:
    """Sigmas as Python floats (exact copies of float32 values); needs at least 2 entries."""
    values = sigmas.tolist() if isinstance(sigmas, torch.Tensor) else [float(s) for s in sigmas]
    if len(values) < 2:
        raise ValueError(f"a solver needs at least 2 sigmas (one step); got {values}")
    return values


class StepCounter:
    """Checks that a solver's steps come in order 0..N-1 (its history is only valid that way)."""

    def __init__(self, num_steps: int, name: str):
        self.num_steps = num_steps
        self.name = name
        self.next_index = 0

    def advance(self, index: int) -> None:
        if index != self.next_index or index >= self.num_steps:
            raise RuntimeError(
                f"{self.name} solver: step {index} requested, but the next step of this run is "
                f"{self.next_index} of {self.num_steps}; create a new solver (make_solver) for each run"
            )
        self.next_index += 1
