"""ComfyUI's flow sigma schedules ("simple" and "normal" over ModelSamplingDiscreteFlow's table).

Implements the ComfyUI side of docs/wan_spec.md section 6.5 / docs/comfyui.md section 7.6. ComfyUI keeps a float32 table
of 1000 shifted sigmas, ``table[k] = shift_fn((k + 1) / 1000)`` for k = 0..999 (ascending: table[0] = sigma_min,
table[-1] = sigma_max = 1), and its schedulers pick from or interpolate over it:

* ``simple``: step x in 0..N-1 takes ``table[-(1 + int(x * 1000 / N))]``, then 0 is appended;
* ``normal``: N points of ``linspace(1000 * sigma_max, 1000 * sigma_min, N)`` mapped through
  ``sigma(t) = shift_fn(t / 1000)``, then 0 is appended. ComfyUI's ``timestep(sigma) = 1000 * sigma`` is not
  the inverse of ``sigma(t)`` when shift != 1, so the end point is shifted twice: the grid is the shifted
  ``linspace(1, shift_fn(0.001), N)``. We reproduce that behaviour because users compare against it.

Everything is computed in float32 like ComfyUI, so the sigmas match its values bit for bit.
"""
from __future__ import annotations

from typing import Literal, get_args

import torch

__all__ = ["COMFY_SCHEDULERS", "ComfyScheduler", "comfy_flow_table", "comfy_flow_sigmas"]

ComfyScheduler = Literal["simple", "normal"]
COMFY_SCHEDULERS: tuple[str, ...] = get_args(ComfyScheduler)
_TABLE_SIZE = 1000
_MULTIPLIER = 1000.0


def _shift32(t: torch.Tensor, shift: float) -> torch.Tensor:
    """ComfyUI's time-SNR shift on a float32 tensor (identity when shift == 1, as there)."""
    if shift == 1.0:
        return t
    return shift * t / (1 + (shift - 1) * t)


def comfy_flow_table(shift: float) -> torch.Tensor:
    """The 1000-entry ascending float32 sigma table of ModelSamplingDiscreteFlow for ``shift``: ``[1000]``."""
    timesteps = (torch.arange(1, _TABLE_SIZE + 1) / _TABLE_SIZE) * _MULTIPLIER  # float32 "model timesteps"
    return _shift32(timesteps / _MULTIPLIER, shift)


def comfy_flow_sigmas(scheduler: ComfyScheduler, steps: int, shift: float) -> torch.Tensor:
    """ComfyUI's sigmas for ``scheduler`` in ("simple", "normal"): float32 ``[steps + 1]``, last entry 0."""
    table = comfy_flow_table(shift)
    if scheduler == "simple":
        stride = len(table) / steps
        picked = [table[-(1 + int(x * stride))] for x in range(steps)]
        body = torch.stack(picked)
    elif scheduler == "normal":
        start = table[-1] * _MULTIPLIER
        end = table[0] * _MULTIPLIER
        body = _shift32(torch.linspace(float(start), float(end), steps) / _MULTIPLIER, shift)
    else:
        raise ValueError(
            f"unknown ComfyUI scheduler {scheduler!r}; valid: {', '.join(COMFY_SCHEDULERS)}"
        )
    return torch.cat([body.to(torch.float32), torch.zeros(1, dtype=torch.float32)])
