"""Flow-matching convention shared by the schedule, the solvers and the loop.

Implements docs/wan_spec.md section 6.1: x_sigma = (1 - sigma) x0 + sigma * eps, the model predicts v = eps - x0, so
x0_hat = x - sigma * v. The log-SNR lambda = ln(1 - sigma) - ln(sigma) drives the exponential integrators.
"""
from __future__ import annotations

import math

import torch

__all__ = ["noise_latent", "x0_from_velocity", "log_snr"]


def noise_latent(x0: torch.Tensor, noise: torch.Tensor, sigma: float) -> torch.Tensor:
    """Point on the flow path at ``sigma``: ``(1 - sigma) * x0 + sigma * noise``.

    ``x0``, ``noise``: same shape, e.g. latents ``[B, 16, F, H, W]``; ``sigma`` in [0, 1].
    """
    if x0.shape != noise.shape:
        raise ValueError(
            f"noise_latent: x0 has shape {tuple(x0.shape)} but noise has shape {tuple(noise.shape)}; "
            "they must be equal"
        )
    return (1.0 - sigma) * x0 + sigma * noise


def x0_from_velocity(x: torch.Tensor, sigma: float, velocity: torch.Tensor) -> torch.Tensor:
    """Data estimate ``x0_hat = x - sigma * v`` for a flow prediction ``v = eps - x0`` (shapes equal)."""
    return x - sigma * velocity


def log_snr(sigma: float) -> float:
    """lambda(sigma) = ln(1 - sigma) - ln(sigma) for the flow path (alpha = 1 - sigma).

    Returns ``-inf`` at sigma = 1 (pure noise) and ``+inf`` at sigma = 0 (clean data), so the solvers can
    take the exact limits at both ends of a schedule.
    """
    if sigma >= 1.0:
        return -math.inf
    if sigma <= 0.0:
        return math.inf
    return math.log1p(-sigma) - math.log(sigma)
