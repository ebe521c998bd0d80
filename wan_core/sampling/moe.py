"""Expert switching inside one sampler run (docs/wan22.md section 4): each expert of a ``WanMoE`` gets its own
guidance scale and its own diffusion-cache session, and the expert of each step is fixed from the schedule's
timesteps before the step runs, so nothing a cache learnt from one expert is reused by the other."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..dit.moe import WanMoE
from .cfg import ClassifierFreeGuidance


class MoEGuidance:
    """Velocity function for a ``WanMoE``: one ``ClassifierFreeGuidance`` per expert, each with its own
    guidance scale and cache session; the expert of each step is fixed from the schedule's timesteps before
    the step runs (``begin_step``), and the switch is recorded in ``switch_step``."""

    def __init__(self, moe: WanMoE, guides: dict[str, ClassifierFreeGuidance], timesteps: Sequence[float],
                 device: torch.device | str | None = None):
        self.moe, self.guides, self.timesteps = moe, guides, [float(t) for t in timesteps]
        self.device = device
        self.active: str | None = None
        self.switch_step: int | None = None  # first step run by the low-noise expert
        self.steps: list[str] = []  # expert name per step

    def begin_step(self, step: int, num_steps: int, sigma: float) -> None:
        name = self.moe.expert_name(self.timesteps[step])
        if name != self.active:
            if self.active is not None and self.switch_step is None:
                self.switch_step = step
            self.moe.activate(name, self.device)
            self.active = name
        self.steps.append(name)
        self.guides[name].begin_step(step, num_steps, sigma)

    def __call__(self, x: torch.Tensor, sigma: float, timestep: torch.Tensor) -> torch.Tensor:
        name = self.active or self.moe.expert_name(float(timestep.max()))
        return self.guides[name](x, sigma, timestep)
