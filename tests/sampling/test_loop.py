"""The sampling loop: what the model is given, progress and interrupt callbacks, denoise start, errors."""
from __future__ import annotations

import pytest
import torch

from wan_core.sampling import (SamplingInterrupted, build_schedule, initial_latent, make_solver, sample)


def recorder():
    seen = []

    def velocity(x, sigma, timestep):
        seen.append((sigma, timestep.clone(), x.clone()))
        return torch.tanh(x) - 0.1
    return velocity, seen


def test_comfyui_convention_passes_float_timesteps_of_1000_sigma(start_noise):
    velocity, seen = recorder()
    schedule = build_schedule(steps=5, shift=8.0, convention="comfyui")
    sample(velocity, start_noise, schedule, "euler")
    for i, (sigma, timestep, _) in enumerate(seen):
        assert timestep.dtype == torch.float32 and timestep.shape == (1,)
        assert sigma == schedule.sigmas[i].item()
        assert timestep.item() == pytest.approx(1000 * sigma, rel=1e-6)


def test_official_convention_passes_truncated_integer_timesteps(start_noise):
    velocity, seen = recorder()
    schedule = build_schedule(steps=5, shift=5.0)
    sample(velocity, start_noise.repeat(3, 1, 1, 1, 1), schedule, "dpm++")
    for i, (sigma, timestep, _) in enumerate(seen):
        assert timestep.dtype == torch.int64 and timestep.tolist() == [int(1000 * sigma)] * 3


def test_denoise_starts_at_the_tail_sigma_from_a_noised_latent():
    gen = torch.Generator().manual_seed(4)
    x0, noise = torch.randn(1, 16, 2, 4, 4, generator=gen), torch.randn(1, 16, 2, 4, 4, generator=gen)
    schedule = build_schedule(steps=8, shift=5.0, denoise=0.5)
    full = build_schedule(steps=16, shift=5.0)
    s0 = full.sigmas[8].item()
    assert schedule.start_sigma == s0
    x = initial_latent(noise, schedule, latent=x0)
    assert torch.allclose(x, (1 - s0) * x0 + s0 * noise, atol=1e-6, rtol=0)
    velocity, seen = recorder()
    sample(velocity, x, schedule, "unipc")
    assert seen[0][0] == s0 and seen[0][1].item() == full.timesteps[8].item()
    assert torch.equal(seen[0][2], x)
    assert initial_latent(noise, schedule) is noise  # text-to-video: the noise itself


def test_progress_callback_every_step(start_noise):
    calls = []
    schedule = build_schedule(steps=7, shift=5.0)
    out = sample(lambda x, s, t: torch.tanh(x), start_noise, schedule, "unipc",
                 callback=lambda step, total, x, x0: calls.append((step, total, x.shape, x0.shape)))
    assert [(c[0], c[1]) for c in calls] == [(i, 7) for i in range(1, 8)]
    assert all(c[2] == c[3] == start_noise.shape for c in calls)
    assert out.shape == start_noise.shape and out.dtype == start_noise.dtype


def test_interrupt_is_checked_every_step_and_stops(start_noise):
    checks = []
    model_calls = []

    def interrupt():
        checks.append(len(checks))
        return len(checks) == 4  # ask to stop before the 4th step

    def velocity(x, s, t):
        model_calls.append(s)
        return torch.tanh(x)

    with pytest.raises(SamplingInterrupted) as info:
        sample(velocity, start_noise, build_schedule(steps=10, shift=5.0), "euler", interrupt=interrupt)
    assert (info.value.step, info.value.total) == (3, 10)
    assert len(model_calls) == 3 and len(checks) == 4

    class Stop(BaseException):
        pass

    def raising():
        raise Stop()

    with pytest.raises(Stop):  # ComfyUI-style checks raise their own exception: it propagates
        sample(velocity, start_noise, build_schedule(steps=10, shift=5.0), "euler", interrupt=raising)


def test_step_hooks_are_told_each_step(start_noise):
    class Hook:
        def __init__(self):
            self.log = []

        def begin_step(self, step, num_steps, sigma):
            self.log.append((step, num_steps, sigma))

    hook = Hook()
    schedule = build_schedule(steps=4, shift=3.0)
    sample(lambda x, s, t: torch.tanh(x), start_noise, schedule, "euler", step_hooks=[hook])
    assert hook.log == [(i, 4, schedule.sigmas[i].item()) for i in range(4)]


def test_bad_inputs_are_rejected(start_noise):
    schedule = build_schedule(steps=3, shift=5.0)
    with pytest.raises(ValueError, match="'heun'.*valid: unipc, dpm\\+\\+, euler"):
        sample(lambda x, s, t: x, start_noise, schedule, "heun")
    with pytest.raises(ValueError, match=r"shape \(1, 16, 2, 4\)"):
        sample(lambda x, s, t: x[..., 0], start_noise, schedule, "unipc")
    with pytest.raises(ValueError, match="floating-point"):
        sample(lambda x, s, t: x, start_noise.long(), schedule, "unipc")


@pytest.mark.parametrize("name", ["euler", "unipc", "dpm++"])
def test_solver_steps_must_come_in_order(name):
    solver = make_solver(name, [1.0, 0.5, 0.0])
    x = torch.ones(2)
    solver.step(0, x, x)
    with pytest.raises(RuntimeError, match="step 0 requested"):
        solver.step(0, x, x)
    solver.step(1, x, x)
    with pytest.raises(RuntimeError, match="new solver"):
        solver.step(2, x, x)
