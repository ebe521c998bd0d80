"""Solvers on flows whose exact solution is known in closed form (no reference implementation involved).

* Single data point x0: the exact velocity at (x, sigma) is v = (x - x0) / sigma, the path
  x_sigma = (1 - sigma) x0 + sigma * eps is a straight line and every solver here must follow it and land on x0.
* Gaussian data N(mu, diag(c^2)): the flow ODE maps the start quantile z to mu + c z; the exact velocity is
  v = -mu + (d std/d sigma) / std * (x - (1 - sigma) mu), std(sigma)^2 = (1 - sigma)^2 c^2 + sigma^2.
"""
from __future__ import annotations

import pytest
import torch

from wan_core.sampling import build_schedule, sample

SOLVERS = ["euler", "unipc", "dpm++"]
CONVENTIONS = ["official", "dpm", "comfyui"]


@pytest.mark.parametrize("steps", [1, 2, 20])
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("convention", CONVENTIONS)
def test_single_data_point_is_reached_exactly(solver, convention, steps):
    gen = torch.Generator().manual_seed(3)
    x0 = torch.randn(2, 16, 3, 4, 4, generator=gen)
    eps = torch.randn(2, 16, 3, 4, 4, generator=gen)
    schedule = build_schedule(steps=steps, shift=5.0, convention=convention)
    s0 = schedule.start_sigma
    path = []

    def exact_velocity(x, sigma, timestep):
        return (x - x0) / sigma

    out = sample(exact_velocity, (1 - s0) * x0 + s0 * eps, schedule, solver,
                 callback=lambda step, total, x, x0_hat: path.append((x, x0_hat)))
    assert (out - x0).abs().max().item() <= 1e-5
    for i, (x, x0_hat) in enumerate(path):  # stays on the straight path, predicts x0 all the way
        s = schedule.sigmas[i + 1].item()
        assert (x - ((1 - s) * x0 + s * eps)).abs().max().item() <= 1e-5
        assert (x0_hat - x0).abs().max().item() <= 1e-5


MU = torch.tensor([0.7, -1.2, 0.3, 2.0], dtype=torch.float64)
C = torch.tensor([0.5, 1.5, 0.8, 1.0], dtype=torch.float64)


def gaussian_std(sigma):
    return torch.sqrt((1 - sigma) ** 2 * C ** 2 + sigma ** 2)


def gaussian_velocity(x, sigma, timestep):
    d_std = (-(1 - sigma) * C ** 2 + sigma) / gaussian_std(sigma)
    return -MU + d_std / gaussian_std(sigma) * (x - (1 - sigma) * MU)


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_gaussian_flow_map_is_approached_as_steps_grow(convention):
    z = torch.tensor([1.3, -0.4, 0.8, -2.1], dtype=torch.float64)
    target = MU + C * z
    errors = {}
    for solver in SOLVERS:
        errors[solver] = []
        for steps in (10, 20, 40, 80):
            schedule = build_schedule(steps=steps, shift=5.0, convention=convention)
            s0 = schedule.start_sigma
            x = (1 - s0) * MU + gaussian_std(s0) * z
            out = sample(gaussian_velocity, x, schedule, solver)
            errors[solver].append((out - target).abs().max().item())
        errs = errors[solver]
        assert all(b < a for a, b in zip(errs, errs[1:])), (solver, errs)
    for n in range(4):  # the second-order multistep solvers beat Euler at every step count
        assert errors["unipc"][n] < errors["euler"][n] and errors["dpm++"][n] < errors["euler"][n], errors
    assert errors["unipc"][-1] < 2e-2 and errors["dpm++"][-1] < 2e-2, errors
