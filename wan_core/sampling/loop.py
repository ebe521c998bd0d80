"""The sampling loop: integrate a velocity function over a flow schedule with a chosen solver.

Implements docs/wan_spec.md sections 6.1-6.4 end to end: at each step i the model sees (x_i, sigma_i, t_i) with t_i from
the schedule (integer or float, see ``schedule.sigma_to_timestep``), the solver advances x. Progress and
interruption are callbacks (the CLI plugs tqdm in, the nodes ComfyUI's progress bar); nothing is printed.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional

import torch

from ..numerics import NonFiniteError, nonfinite_count
from ..progress import InterruptFn, Interrupted, StepCallback
from .flow import noise_latent
from .hooks import StepHook
from .schedule import FlowSchedule
from .solver import Solver, make_solver

__all__ = ["VelocityFn", "StepCallback", "SamplingInterrupted", "NonFiniteError", "initial_latent", "sample"]

# velocity_fn(x [B, 16, F, H, W], sigma: float, timestep [B]) -> v = eps - x0, shape of x
VelocityFn = Callable[[torch.Tensor, float, torch.Tensor], torch.Tensor]


class SamplingInterrupted(Interrupted):
    """``wan_core.progress.Interrupted`` raised before ``step`` (0-based) of ``total`` sampling steps."""

    def __init__(self, step: int, total: int):
        super().__init__("sampling", step, total)
        self.step = step


def initial_latent(noise: torch.Tensor, schedule: FlowSchedule, latent: torch.Tensor | None = None) -> torch.Tensor:
    """Starting sample at ``schedule.sigmas[0]``.

    Without ``latent`` (text-to-video): the noise itself, as the official sampler and ComfyUI do.
    With ``latent`` x0 (denoise < 1, video-to-video): ``(1 - sigma_0) x0 + sigma_0 * noise``.
    ``noise``, ``latent``: ``[B, 16, F, H, W]``.
    """
    if latent is None:
        return noise
    return noise_latent(latent.to(noise.dtype), noise, schedule.start_sigma)


def sample(velocity_fn: VelocityFn, x: torch.Tensor, schedule: FlowSchedule, solver: Solver = "unipc", *,
           callback: Optional[StepCallback] = None, interrupt: Optional[InterruptFn] = None,
           step_hooks: Iterable[StepHook] = ()) -> torch.Tensor:
    """Run ``schedule.num_steps`` steps of ``solver`` ("unipc" | "dpm++" | "euler") from ``x`` and return x at 0.

    x: ``[B, 16, F, H, W]`` floating sample at ``schedule.sigmas[0]`` (see ``initial_latent``); its dtype is
    kept (float32 recommended). velocity_fn: ``(x, sigma, timestep [B]) -> v`` (e.g. a
    ``ClassifierFreeGuidance``). callback: called after every step. interrupt: called before every step; a
    true result raises ``SamplingInterrupted`` (it may also raise its own exception, which propagates).
    step_hooks: objects told ``begin_step(step, total, sigma)`` before each model call; ``velocity_fn`` is told
    too when it has a ``begin_step`` method. Returns the final sample (same shape and dtype as ``x``).
    Raises ``NonFiniteError`` when ``x`` holds NaN/Inf, or naming the step and sigma as soon as a step produces
    them (one reduction per step), so a broken model never runs to the end and yields a black video.
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"x must be a floating-point tensor [B, 16, F, H, W]; got {type(x).__name__} "
                         f"{getattr(x, 'dtype', '')}")
    if nonfinite_count(x):
        raise NonFiniteError(f"the starting sample holds {nonfinite_count(x)} NaN/Inf values (shape "
                             f"{list(x.shape)}): the start latent or the noise is not finite")
    run = make_solver(solver, schedule.sigmas)
    hooks = list(step_hooks)
    if isinstance(velocity_fn, StepHook) and velocity_fn not in hooks:
        hooks.insert(0, velocity_fn)
    total = schedule.num_steps
    for i in range(total):
        if interrupt is not None and interrupt():
            raise SamplingInterrupted(i, total)
        sigma = run.sigmas[i]
        for hook in hooks:
            hook.begin_step(i, total, sigma)
        velocity = velocity_fn(x, sigma, schedule.timestep_batch(i, x.shape[0], x.device))
        if velocity.shape != x.shape:
            raise ValueError(
                f"the model returned a velocity of shape {tuple(velocity.shape)} for a sample of shape "
                f"{tuple(x.shape)}; they must be equal"
            )
        x, x0 = run.step(i, x, velocity.to(x.dtype))
        if nonfinite_count(x):
            raise NonFiniteError(
                f"step {i + 1}/{total} (sigma {float(sigma):.3g}): the model produced NaN/Inf values; sampling "
                f"stopped instead of finishing a black video. Usual causes: float16 overflow (load the model in "
                f"bfloat16 or float32), a corrupt or wrongly scaled model file, or NaN/Inf text embeddings")
        if callback is not None:
            callback(i + 1, total, x, x0)
    return x
