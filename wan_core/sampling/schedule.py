"""Shifted flow-matching schedules: the official, DPM++ and ComfyUI conventions, custom lists, denoise.

Implements docs/wan_spec.md sections 6.1-6.5. A schedule is data: ``ScheduleConfig`` says what was asked for,
``build_schedule`` turns it into a ``FlowSchedule`` (the sigmas the solver integrates over and the timesteps
the DiT sees). The one sigma <-> timestep mapping lives in ``sigma_to_timestep``.

Conventions (N = steps, shift_fn(sigma) = s*sigma / (1 + (s-1)*sigma)):

* ``official`` (Wan's FlowUniPC): shift_fn(linspace(0.999, 0, N+1)[:N]) in float64, then 0 appended;
  timesteps int64(1000 * sigma') (truncated); the solver uses the float32 sigmas.
* ``dpm`` (Wan's DPM++ path): shift_fn(linspace(1, 0, N+1)[:N]) (first sigma exactly 1, t_0 = 1000), 0
  appended, integer timesteps as above.
* ``comfyui``: ComfyUI's "simple"/"normal" scheduler over ModelSamplingDiscreteFlow's table (see
  ``comfy_schedule``); float timesteps 1000 * sigma. ``discard_penultimate`` mirrors KSampler's handling of
  its uni_pc samplers (one extra step computed, the second-to-last sigma dropped).
* ``custom``: the given sigma list as is (already shifted; strictly decreasing, ending at 0).

Denoise d < 1 (all but ``custom``), as ComfyUI's KSampler does it: build the schedule for
``int(N / d)`` steps and keep its last N steps, so N model steps run starting at a lower sigma. The start
latent is then ``(1 - sigma_0) x0 + sigma_0 * noise`` (``loop.initial_latent``).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from typing import Literal, Sequence, get_args

import numpy as np
import torch

from .comfy_schedule import COMFY_SCHEDULERS, ComfyScheduler, comfy_flow_sigmas

__all__ = [
    "NUM_TRAIN_TIMESTEPS",
    "CONVENTIONS",
    "Convention",
    "time_shift",
    "sigma_to_timestep",
    "ScheduleConfig",
    "FlowSchedule",
    "build_schedule",
    "check_sigmas",
]

NUM_TRAIN_TIMESTEPS = 1000
Convention = Literal["official", "dpm", "comfyui", "custom"]
CONVENTIONS: tuple[str, ...] = get_args(Convention)
_OFFICIAL_SIGMA_MAX = 0.999  # sigma_max of the official 1000-step training table
_MAX_SCHEDULE_STEPS = 100_000


def time_shift(sigma, shift: float):
    """Time-SNR shift ``sigma' = s*sigma / (1 + (s-1)*sigma)``; works on floats, numpy arrays and tensors."""
    return shift * sigma / (1 + (shift - 1) * sigma)


def sigma_to_timestep(sigmas: torch.Tensor, integer: bool) -> torch.Tensor:
    """The sigma -> DiT timestep mapping, ``t = 1000 * sigma``, in one place.

    ``integer=True`` (official): ``int64`` truncation toward zero of ``1000 * sigma`` computed in float64
    (pass the float64 sigmas when you have them, as the official scheduler does). ``integer=False``
    (ComfyUI): ``float32(sigma) * 1000`` in float32. The inverse for float timesteps is ``sigma = t / 1000``.
    ``sigmas``: any shape; returns the same shape.
    """
    if integer:
        return (sigmas.to(torch.float64) * NUM_TRAIN_TIMESTEPS).to(torch.int64)
    return sigmas.to(torch.float32) * NUM_TRAIN_TIMESTEPS


@dataclass(frozen=True)
class ScheduleConfig:
    """What schedule to build (see the module docstring for the conventions).

    steps: model evaluations (>= 1). shift: time-SNR shift s > 0 (not used by ``custom``).
    convention: one of ``CONVENTIONS``. scheduler: ComfyUI scheduler ("simple" | "normal"), ``comfyui`` only.
    discard_penultimate: ComfyUI KSampler's uni_pc handling, ``comfyui`` only. denoise: in (0, 1].
    sigmas: the ``custom`` list (N+1 values, strictly decreasing, in [0, 1], last 0).
    integer_timesteps: None = the convention's default (official/dpm: int64, comfyui/custom: float).
    """

    steps: int = 50
    shift: float = 5.0
    convention: Convention = "official"
    scheduler: ComfyScheduler = "simple"
    discard_penultimate: bool = False
    denoise: float = 1.0
    sigmas: tuple[float, ...] | None = None
    integer_timesteps: bool | None = None

    @classmethod
    def from_sigmas(cls, sigmas: Sequence[float], integer_timesteps: bool = False) -> "ScheduleConfig":
        """A ``custom`` config for an explicit sigma list (N+1 values ending at 0)."""
        values = tuple(float(s) for s in sigmas)
        return cls(steps=len(values) - 1, convention="custom", sigmas=values,
                   integer_timesteps=integer_timesteps)

    @property
    def schedule_length(self) -> int:
        """Steps of the full schedule whose tail is used: ``int(steps / denoise)`` (= steps at denoise 1)."""
        if self.convention == "custom":
            return self.steps
        return int(self.steps / self.denoise)

    @property
    def uses_integer_timesteps(self) -> bool:
        if self.integer_timesteps is not None:
            return bool(self.integer_timesteps)
        return self.convention in ("official", "dpm")

    def validate(self) -> None:
        """Raise ``ValueError`` naming the bad field, the value given and what would be valid."""
        if self.convention not in CONVENTIONS:
            raise ValueError(f"convention={self.convention!r} is not known; valid: {', '.join(CONVENTIONS)}")
        if isinstance(self.steps, bool) or not isinstance(self.steps, numbers.Integral) or self.steps < 1:
            raise ValueError(f"steps={self.steps!r}: steps must be an integer >= 1 (the official T2V default is 50)")
        if not (isinstance(self.denoise, numbers.Real) and 0.0 < self.denoise <= 1.0):
            raise ValueError(f"denoise={self.denoise!r}: denoise must be in (0, 1] (1 = start from pure noise)")
        if self.discard_penultimate and self.convention != "comfyui":
            raise ValueError("discard_penultimate is ComfyUI KSampler behaviour; it needs convention='comfyui'")
        if self.convention == "custom":
            self._validate_custom()
            return
        if self.sigmas is not None:
            raise ValueError(
                f"sigmas were given with convention={self.convention!r}; a sigma list needs "
                "convention='custom' (use ScheduleConfig.from_sigmas)"
            )
        if not (isinstance(self.shift, numbers.Real) and math.isfinite(self.shift) and self.shift > 0):
            raise ValueError(f"shift={self.shift!r}: shift must be a finite number > 0 (official T2V: 5.0)")
        if self.convention == "comfyui" and self.scheduler not in COMFY_SCHEDULERS:
            raise ValueError(
                f"scheduler={self.scheduler!r} is not a supported ComfyUI scheduler; valid: "
                f"{', '.join(COMFY_SCHEDULERS)}"
            )
        total = self.schedule_length
        if total > _MAX_SCHEDULE_STEPS:
            raise ValueError(
                f"steps={self.steps} with denoise={self.denoise} needs a schedule of int(steps / denoise) = "
                f"{total} steps; at most {_MAX_SCHEDULE_STEPS} are supported: raise denoise or lower steps"
            )
        if self.convention == "comfyui" and self.scheduler == "simple" and total + self.discard_penultimate > 1000:
            raise ValueError(
                f"ComfyUI's 'simple' scheduler picks sigmas from a 1000-entry table, so it supports at most "
                f"1000 steps; steps={self.steps}, denoise={self.denoise} asks for {total}"
                + (" (+1 for discard_penultimate)" if self.discard_penultimate else "")
                + ": lower steps or use scheduler='normal'"
            )

    def _validate_custom(self) -> None:
        if self.sigmas is None:
            raise ValueError("convention='custom' needs a sigma list (use ScheduleConfig.from_sigmas)")
        sig = list(self.sigmas)
        if len(sig) < 2:
            raise ValueError(f"custom sigmas {sig}: need at least 2 values (one step), e.g. [1.0, 0.0]")
        if self.steps != len(sig) - 1:
            raise ValueError(f"steps={self.steps} but the custom list has {len(sig)} sigmas = {len(sig) - 1} steps")
        check_sigmas(sig, "custom sigmas")
        if self.denoise != 1.0:
            raise ValueError(
                f"denoise={self.denoise} with a custom sigma list: slice the list instead (denoise must be 1)"
            )


def check_sigmas(sigmas: Sequence[float], what: str) -> None:
    """Sigmas must be finite, in [0, 1], strictly decreasing and end at 0; raise ``ValueError`` otherwise."""
    sig = [float(s) for s in sigmas]
    bad = [s for s in sig if not (math.isfinite(s) and 0.0 <= s <= 1.0)]
    if bad:
        raise ValueError(f"{what}: every sigma must be a finite number in [0, 1]; got {bad[:4]}")
    for i in range(len(sig) - 1):
        if not sig[i + 1] < sig[i]:
            raise ValueError(
                f"{what}: sigmas must be strictly decreasing, but sigma[{i}]={sig[i]!r} and "
                f"sigma[{i + 1}]={sig[i + 1]!r}"
            )
    if sig[-1] != 0.0:
        raise ValueError(f"{what}: the last sigma must be 0 (clean data); got {sig[-1]!r}")


@dataclass(frozen=True)
class FlowSchedule:
    """A built schedule.

    sigmas: float32 ``[N + 1]`` strictly decreasing, ``sigmas[N] == 0`` (what the solver integrates over).
    timesteps: ``[N]`` what the DiT receives at each step (int64 or float32, see ``sigma_to_timestep``).
    config: the ``ScheduleConfig`` it was built from.
    """

    sigmas: torch.Tensor
    timesteps: torch.Tensor
    config: ScheduleConfig

    @property
    def num_steps(self) -> int:
        return int(self.timesteps.shape[0])

    @property
    def start_sigma(self) -> float:
        return float(self.sigmas[0])

    def timestep_batch(self, step: int, batch: int, device: torch.device | str | None = None) -> torch.Tensor:
        """Timestep of ``step`` repeated for a batch: ``[batch]`` on ``device``, dtype of ``timesteps``."""
        return self.timesteps[step].repeat(batch).to(device)


def _official_grid(steps: int, shift: float, sigma_max: float) -> tuple[torch.Tensor, torch.Tensor]:
    shifted = time_shift(np.linspace(sigma_max, 0.0, steps + 1)[:steps], shift)  # float64
    sig64 = torch.from_numpy(np.ascontiguousarray(shifted))
    sigmas = torch.cat([sig64.to(torch.float32), torch.zeros(1, dtype=torch.float32)])
    return sigmas, sig64


def _full_schedule(cfg: ScheduleConfig, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(float32 sigmas ``[steps+1]``, the sigmas the timesteps are computed from ``[steps]``)."""
    if cfg.convention == "official":
        return _official_grid(steps, cfg.shift, _OFFICIAL_SIGMA_MAX)
    if cfg.convention == "dpm":
        return _official_grid(steps, cfg.shift, 1.0)
    if cfg.convention == "comfyui":
        if cfg.discard_penultimate:
            longer = comfy_flow_sigmas(cfg.scheduler, steps + 1, cfg.shift)
            sigmas = torch.cat([longer[:-2], longer[-1:]])
        else:
            sigmas = comfy_flow_sigmas(cfg.scheduler, steps, cfg.shift)
        return sigmas, sigmas[:-1]
    sig64 = torch.tensor(cfg.sigmas, dtype=torch.float64)
    return sig64.to(torch.float32), sig64[:-1]


def build_schedule(config: ScheduleConfig | None = None, **fields) -> FlowSchedule:
    """Build the ``FlowSchedule`` for ``config`` (or ``ScheduleConfig(**fields)``; fields override config).

    Example: ``build_schedule(steps=50, shift=5.0)`` is Wan's official T2V schedule (t = 999, 995, ...).
    """
    cfg = ScheduleConfig(**fields) if config is None else replace(config, **fields)
    cfg.validate()
    sigmas, t_source = _full_schedule(cfg, cfg.schedule_length)
    sigmas = sigmas[-(cfg.steps + 1):].contiguous()
    t_source = t_source[-cfg.steps:]
    check_sigmas(sigmas.tolist(), f"the {cfg.convention} schedule for steps={cfg.steps}, shift={cfg.shift}")
    timesteps = sigma_to_timestep(t_source, integer=cfg.uses_integer_timesteps)
    return FlowSchedule(sigmas=sigmas, timesteps=timesteps.contiguous(), config=cfg)
