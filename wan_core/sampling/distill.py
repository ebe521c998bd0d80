"""Schedules of the step-distilled Wan LoRAs (lightx2v StepDistill-CfgDistill): N timesteps evenly spaced
from 1000, time-shifted, run at guidance 1 (docs/lora.md section 5).

Source (ModelTC/LightX2V): ``configs/distill/wan21/wan_t2v_distill_lora_4step_cfg.json`` publishes
``"denoising_step_list": [1000, 750, 500, 250]``, ``"sample_shift": 5`` and ``"enable_cfg": false`` for
``wan2.1_t2v_14b_lora_rank64_lightx2v_4step.safetensors``; ``lightx2v/models/schedulers/wan/step_distill/
scheduler.py`` (``WanStepDistillScheduler.set_denoising_timesteps``) turns the list into sigmas as
``shift(linspace(1, 0, 1001)[:-1])[1000 - t]`` in float32 and gives the DiT ``1000 * sigma`` (float). Its
Wan 2.2 scheduler steps ``x0 = x - sigma v; x' = x0 + sigma' v``, which is exactly our Euler step; the Wan 2.1
one re-noises x0 with fresh noise instead (we use the deterministic step).
"""
from __future__ import annotations

import torch

from .schedule import NUM_TRAIN_TIMESTEPS, time_shift

LIGHTX2V_STEP_LIST = (1000, 750, 500, 250)  # configs/distill/wan21/wan_t2v_distill_lora_4step_cfg.json
LIGHTX2V_SHIFT = 5.0  # "sample_shift" of the same file


def distill_step_list(steps: int = 4) -> tuple[int, ...]:
    """``steps`` timesteps evenly spaced from 1000 before the shift: ``(1000, 750, 500, 250)`` for 4 steps (the
    published lightx2v list), ``(1000, 500)`` for 2, ``(1000, 875, ..., 125)`` for 8."""
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= NUM_TRAIN_TIMESTEPS:
        raise ValueError(f"steps={steps!r}: a distilled schedule needs 1 to 1000 steps (lightx2v: 4)")
    if NUM_TRAIN_TIMESTEPS % steps:
        raise ValueError(f"steps={steps}: the distilled schedule spaces its timesteps 1000/steps apart, so steps "
                         f"must divide 1000 (e.g. 2, 4, 5, 8, 10)")
    return tuple(NUM_TRAIN_TIMESTEPS - i * (NUM_TRAIN_TIMESTEPS // steps) for i in range(steps))


def distill_sigmas(steps: int = 4, shift: float = LIGHTX2V_SHIFT) -> list[float]:
    """The ``steps + 1`` sigmas (last 0) of the distilled schedule with time shift ``shift``, computed as
    lightx2v does (float32 table of 1000 shifted sigmas, indexed at ``1000 - t``)."""
    if not shift > 0:
        raise ValueError(f"shift={shift!r}: must be > 0 (lightx2v: 5)")
    table = time_shift(torch.linspace(1.0, 0.0, NUM_TRAIN_TIMESTEPS + 1)[:-1], float(shift))
    picked = table[[NUM_TRAIN_TIMESTEPS - t for t in distill_step_list(steps)]]
    return picked.tolist() + [0.0]
