"""Solver registry: a solver integrates one sampling run over a fixed sigma schedule.

Implements the solver choice of docs/wan_spec.md sections 6.2-6.4 ("euler", "unipc", "dpm++"). Every solver here uses
one model evaluation per step: the loop evaluates the velocity at (x_i, sigma_i) and calls ``step(i, x_i, v_i)``.
A solver instance holds the multistep history of exactly one run (create one per run with ``make_solver``);
there is no module-level state. The types every solver shares are in ``solver_base``.
"""
from __future__ import annotations

from typing import Callable, Literal, Sequence, get_args

import torch

from .dpmpp import DPMPP2MSolver
from .euler import EulerSolver
from .solver_base import FlowSolver, SolverStep, sigma_list
from .unipc import UniPCSolver

__all__ = ["SolverStep", "FlowSolver", "SOLVER_NAMES", "Solver", "make_solver", "sigma_list"]

Solver = Literal["unipc", "dpm++", "euler"]
SOLVER_NAMES: tuple[str, ...] = get_args(Solver)

_SOLVERS: dict[str, Callable[[Sequence[float] | torch.Tensor], FlowSolver]] = {
    "euler": EulerSolver, "unipc": UniPCSolver, "dpm++": DPMPP2MSolver}


def make_solver(name: Solver, sigmas: Sequence[float] | torch.Tensor) -> FlowSolver:
    """A fresh solver ``name`` in ``SOLVER_NAMES`` for one run over ``sigmas`` (``[N + 1]``)."""
    cls = _SOLVERS.get(name)
    if cls is None:
        raise ValueError(f"solver={name!r} is not known; valid: {', '.join(SOLVER_NAMES)}")
    return cls(sigmas)
