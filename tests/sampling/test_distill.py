"""Distilled schedule (wan_core.sampling.distill): the published lightx2v 4-step list
(ModelTC/LightX2V configs/distill/wan21/wan_t2v_distill_lora_4step_cfg.json: [1000, 750, 500, 250], shift 5) and
the sigmas of its scheduler (shift(t / 1000)), as the DiT receives them through build_schedule."""
from __future__ import annotations

import pytest
import torch

from wan_core.sampling import LIGHTX2V_STEP_LIST, ScheduleConfig, build_schedule, distill_sigmas, distill_step_list


def test_four_steps_are_the_published_list():
    assert distill_step_list(4) == LIGHTX2V_STEP_LIST == (1000, 750, 500, 250)
    schedule = build_schedule(ScheduleConfig.from_sigmas(distill_sigmas(4, shift=1.0)))
    assert schedule.timesteps.tolist() == [1000.0, 750.0, 500.0, 250.0]


def test_shifted_sigmas_by_hand():
    shift = 5.0
    expected = [shift * s / (1 + (shift - 1) * s) for s in (1.0, 0.75, 0.5, 0.25)] + [0.0]  # 1, .9375, .8333, .625
    got = distill_sigmas(4, shift)
    assert got == pytest.approx(expected, abs=1e-7)
    schedule = build_schedule(ScheduleConfig.from_sigmas(got))
    assert torch.allclose(schedule.timesteps, torch.tensor([1000.0, 937.5, 833.3333, 625.0]))
    assert schedule.timesteps.dtype == torch.float32


def test_other_step_counts_and_errors():
    assert distill_step_list(2) == (1000, 500) and distill_step_list(8)[-1] == 125
    with pytest.raises(ValueError, match="must divide 1000"):
        distill_step_list(3)
    with pytest.raises(ValueError, match="shift"):
        distill_sigmas(4, 0.0)
