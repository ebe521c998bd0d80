"""Shared pieces for the sampling tests: a deterministic nonlinear stand-in for the DiT."""
from __future__ import annotations

import pytest
import torch


class NonlinearVelocity:
    """v(x, t) = tanh(W x) (1 + t/1000) + 0.5 sin(3 t/1000) x - 0.3 t/1000, W mixing the 16 channels.

    Depends on the timestep the sampler passes (as the DiT does), is nonlinear in x, and is the same on
    every call; ``calls`` counts evaluations and ``timesteps`` records what it was given.
    """

    def __init__(self, seed: int = 0):
        self.weight = torch.randn(16, 16, generator=torch.Generator().manual_seed(seed)) / 4
        self.calls = 0
        self.timesteps: list[torch.Tensor] = []

    def __call__(self, x: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.timesteps.append(timestep.clone())
        tt = (timestep.to(torch.float64) / 1000).to(x.dtype).reshape(-1, *([1] * (x.ndim - 1)))
        mixed = torch.einsum("oc,bc...->bo...", self.weight.to(x.dtype), x)
        return torch.tanh(mixed) * (1 + tt) + 0.5 * torch.sin(3 * tt) * x - 0.3 * tt


@pytest.fixture
def model() -> NonlinearVelocity:
    return NonlinearVelocity()


@pytest.fixture
def start_noise() -> torch.Tensor:
    """A small latent-shaped start sample [1, 16, 2, 4, 4]."""
    return torch.randn(1, 16, 2, 4, 4, generator=torch.Generator().manual_seed(1))
