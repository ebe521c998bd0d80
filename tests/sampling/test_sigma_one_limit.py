"""Schedules that start at sigma = 1 (Wan's DPM++ grid, ComfyUI's schedules) have log-SNR -inf there; the
multistep solvers take the exact limit. Reference: continuity. Starting at 1 - delta instead must approach the
sigma = 1 result as delta -> 0 (slowly: the log-SNR only grows like ln(1/delta))."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from wan_core.sampling import make_solver, time_shift

WEIGHT = torch.randn(8, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64) / 3


def velocity(x, sigma):
    return torch.tanh(WEIGHT @ x) * (1 + sigma) - 0.3 * sigma + 0.2 * x


def run(name, sigmas):
    solver = make_solver(name, sigmas)
    x = torch.linspace(-1, 1, 8, dtype=torch.float64)
    for i in range(len(sigmas) - 1):
        x = solver.step(i, x, velocity(x, sigmas[i])).x
    return x


@pytest.mark.parametrize("name", ["unipc", "dpm++"])
def test_start_at_sigma_one_is_the_limit_of_starts_below_one(name):
    grid = [float(time_shift(s, 5.0)) for s in np.linspace(1, 0, 9)]
    at_one = run(name, grid)
    assert torch.isfinite(at_one).all()
    gaps = [(run(name, [1 - d] + grid[1:]) - at_one).abs().max().item() for d in (1e-6, 1e-8, 1e-10, 1e-12, 1e-14)]
    assert all(b < a for a, b in zip(gaps, gaps[1:])), gaps
    # ~1 / ln(1/delta) convergence; measured gaps at 1e-6 -> 1e-14: unipc 1.2e-5 -> 4.4e-6, dpm++ 8.7e-5 -> 3.1e-5
    assert gaps[-1] < 0.5 * gaps[0] and gaps[-1] < 1e-4, gaps
