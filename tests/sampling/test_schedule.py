"""Schedules: the official timesteps of docs/wan_spec.md section 6.3, the DPM++ grid of 6.4, ComfyUI's simple/normal
(6.5, docs/comfyui.md section 7.6), custom lists, denoise, and the validation messages."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from wan_core.sampling import ScheduleConfig, build_schedule, time_shift


def odds_shift(sigma, shift):
    """Reference form of the time-SNR shift: it multiplies the noise odds sigma / (1 - sigma) by s."""
    sigma = np.asarray(sigma, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # sigma = 1: infinite odds -> 1
        odds = shift * sigma / (1 - sigma)
        return np.where(np.isinf(odds), 1.0, odds / (1 + odds))


# docs/wan_spec.md section 6.3, N = 50: leading and trailing official timesteps per shift
SPEC_TIMESTEPS = {
    5.0: ([999, 995, 991, 987, 982, 978], [302, 241, 172, 92]),
    3.0: ([999, 992, 985, 978], [160, 111, 57]),
    8.0: ([999, 997, 994], [337, 249, 140]),
}


@pytest.mark.parametrize("shift", sorted(SPEC_TIMESTEPS))
def test_official_timesteps_match_spec_examples(shift):
    schedule = build_schedule(steps=50, shift=shift, convention="official")
    head, tail = SPEC_TIMESTEPS[shift]
    assert schedule.timesteps.dtype == torch.int64
    assert schedule.timesteps[: len(head)].tolist() == head
    assert schedule.timesteps[-len(tail):].tolist() == tail


def test_official_sigmas_match_spec_examples():
    sig = build_schedule(steps=50, shift=5.0).sigmas
    assert sig.dtype == torch.float32 and sig.shape == (51,)
    assert [round(v, 5) for v in sig[:3].tolist()] == [0.99980, 0.99573, 0.99153]
    assert [round(v, 5) for v in sig[-3:].tolist()] == [0.17227, 0.09251, 0.0]


def test_shift_multiplies_noise_odds():
    sigma = np.linspace(0.0, 0.99, 34)
    for shift in (0.5, 1.0, 3.0, 8.0):
        np.testing.assert_allclose(time_shift(sigma, shift), odds_shift(sigma, shift), rtol=1e-12, atol=1e-15)


def test_official_grid_is_shifted_linspace_and_truncated():
    steps, shift = 37, 6.5
    schedule = build_schedule(steps=steps, shift=shift)
    expected = odds_shift(0.999 * (1 - np.arange(steps) / steps), shift)
    np.testing.assert_allclose(schedule.sigmas[:-1].numpy(), expected, rtol=0, atol=1e-7)
    assert schedule.sigmas[-1].item() == 0.0
    assert schedule.timesteps.tolist() == [math.floor(1000 * s) for s in expected]


def test_dpm_grid_starts_at_one():
    steps, shift = 20, 5.0
    schedule = build_schedule(steps=steps, shift=shift, convention="dpm")
    expected = odds_shift(1 - np.arange(steps) / steps, shift)
    assert schedule.sigmas[0].item() == 1.0 and schedule.timesteps[0].item() == 1000
    np.testing.assert_allclose(schedule.sigmas[:-1].numpy(), expected, rtol=0, atol=1e-7)
    assert schedule.timesteps.dtype == torch.int64


@pytest.mark.parametrize("steps,shift", [(30, 8.0), (7, 3.0), (1000, 5.0)])
def test_comfyui_simple_picks_table_entries(steps, shift):
    # closed form of ComfyUI's simple scheduler over the 1000-entry table: step x takes the table entry of
    # unshifted time 1 - int(x * 1000 / steps) / 1000
    schedule = build_schedule(steps=steps, shift=shift, convention="comfyui", scheduler="simple")
    t = np.array([1 - int(x * 1000 / steps) / 1000 for x in range(steps)])
    np.testing.assert_allclose(schedule.sigmas[:-1].numpy(), odds_shift(t, shift), rtol=0, atol=2e-7)
    assert schedule.sigmas[0].item() == 1.0 and schedule.sigmas[-1].item() == 0.0


def test_comfyui_normal_interpolates_model_timesteps():
    # ComfyUI's normal: linspace from timestep(sigma_max) = 1000 to timestep(sigma_min) = 1000 * shift(0.001),
    # each mapped through sigma(t) = shift(t / 1000) (so the end point is shifted twice)
    steps, shift = 12, 8.0
    schedule = build_schedule(steps=steps, shift=shift, convention="comfyui", scheduler="normal")
    t = np.linspace(1.0, float(odds_shift(0.001, shift)), steps)
    np.testing.assert_allclose(schedule.sigmas[:-1].numpy(), odds_shift(t, shift), rtol=0, atol=2e-7)


def test_comfyui_timesteps_are_float_1000_sigma():
    schedule = build_schedule(steps=30, shift=8.0, convention="comfyui")
    assert schedule.timesteps.dtype == torch.float32
    assert torch.equal(schedule.timesteps, schedule.sigmas[:-1] * 1000)
    assert schedule.timesteps[1].item() != int(schedule.timesteps[1].item())  # not truncated


def test_comfyui_discard_penultimate_drops_one_sigma_of_a_longer_schedule():
    longer = build_schedule(steps=11, shift=8.0, convention="comfyui").sigmas
    schedule = build_schedule(steps=10, shift=8.0, convention="comfyui", discard_penultimate=True)
    assert schedule.sigmas.tolist() == longer[:-2].tolist() + [0.0]
    assert schedule.num_steps == 10


@pytest.mark.parametrize("convention", ["official", "dpm", "comfyui"])
def test_denoise_uses_the_tail_of_a_longer_schedule(convention):
    steps, denoise = 10, 0.4
    full = build_schedule(steps=int(steps / denoise), shift=5.0, convention=convention)
    partial = build_schedule(steps=steps, shift=5.0, convention=convention, denoise=denoise)
    assert partial.num_steps == steps
    assert torch.equal(partial.sigmas, full.sigmas[-(steps + 1):])
    assert torch.equal(partial.timesteps, full.timesteps[-steps:])
    assert partial.start_sigma == full.sigmas[-(steps + 1)].item() < 1.0


def test_custom_sigmas_are_used_as_given():
    sigmas = [1.0, 0.8, 0.5, 0.25, 0.1, 0.0]
    schedule = build_schedule(ScheduleConfig.from_sigmas(sigmas))
    assert schedule.sigmas.tolist() == pytest.approx(sigmas, abs=1e-7)
    assert schedule.timesteps.dtype == torch.float32
    assert schedule.timesteps.tolist() == pytest.approx([1000, 800, 500, 250, 100], abs=1e-4)
    integer = build_schedule(ScheduleConfig.from_sigmas([0.9995, 0.4567, 0.0], integer_timesteps=True))
    assert integer.timesteps.tolist() == [999, 456]


def test_build_schedule_overrides_config_fields():
    base = ScheduleConfig(steps=8, shift=3.0)
    assert build_schedule(base, shift=5.0).config.shift == 5.0
    assert build_schedule(base).config == base


@pytest.mark.parametrize("fields,needle", [
    (dict(steps=0), "steps=0"),
    (dict(steps=2.5), "steps=2.5"),
    (dict(shift=0.0), "shift=0.0"),
    (dict(shift=-2.0), "shift=-2.0"),
    (dict(shift=float("nan")), "shift=nan"),
    (dict(denoise=0.0), "denoise=0.0"),
    (dict(denoise=1.5), "denoise=1.5"),
    (dict(convention="karras"), "'karras'"),
    (dict(convention="comfyui", scheduler="karras"), "'karras'"),
    (dict(convention="comfyui", steps=1001), "1000 steps"),
    (dict(discard_penultimate=True), "discard_penultimate"),
    (dict(steps=10, denoise=1e-6), "int(steps / denoise)"),
    (dict(sigmas=(1.0, 0.0)), "convention='custom'"),
    (dict(convention="custom", steps=2, sigmas=(1.0, 0.5, 0.6)), "strictly decreasing"),
    (dict(convention="custom", steps=2, sigmas=(1.0, 0.5, 0.5)), "strictly decreasing"),
    (dict(convention="custom", steps=2, sigmas=(1.0, 0.5, 0.1)), "last sigma must be 0"),
    (dict(convention="custom", steps=1, sigmas=(1.5, 0.0)), "[0, 1]"),
    (dict(convention="custom", steps=3, sigmas=(1.0, 0.5, 0.0)), "steps=3"),
    (dict(convention="custom", steps=1, sigmas=(1.0, 0.0), denoise=0.5), "denoise=0.5"),
    (dict(convention="custom"), "sigma list"),
])
def test_invalid_configs_are_rejected_with_the_value(fields, needle):
    with pytest.raises(ValueError) as info:
        build_schedule(**fields)
    assert needle in str(info.value)
