"""UniPC (bh2, order 2, corrector, lower-order final) vs diffusers.UniPCMultistepScheduler
(docs/wan_spec.md section 6.3).

Reference: diffusers' UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
flow_shift=s, solver_order=2, solver_type="bh2") given the same unshifted grid linspace(0.999, 0, N+1)[:N]
through set_timesteps(sigmas=...); docs/wan_spec.md section 6.3 verified that this equals Wan's official FlowUniPC
scheduler. Both drive the same deterministic nonlinear model; every intermediate sample is compared.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers import UniPCMultistepScheduler

from wan_core.sampling import build_schedule, sample


def diffusers_unipc_run(model, x, steps, shift):
    sched = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=shift,
                                    solver_order=2, solver_type="bh2")
    sched.set_timesteps(sigmas=np.linspace(0.999, 0, steps + 1)[:-1])
    states = []
    for t in sched.timesteps:
        x = sched.step(model(x, t.reshape(1)), t, x).prev_sample
        states.append(x)
    return sched, states


@pytest.mark.parametrize("steps,shift", [(50, 5.0), (10, 3.0), (4, 8.0)])
def test_unipc_matches_diffusers(model, start_noise, steps, shift):
    ref_sched, ref_states = diffusers_unipc_run(model, start_noise.clone(), steps, shift)
    schedule = build_schedule(steps=steps, shift=shift, convention="official")
    assert torch.equal(schedule.timesteps, ref_sched.timesteps)
    assert torch.equal(schedule.sigmas, ref_sched.sigmas)

    states = []
    sample(lambda x, sigma, t: model(x, t), start_noise.clone(), schedule, "unipc",
           callback=lambda step, total, x, x0: states.append(x))
    assert len(states) == len(ref_states) == steps
    err = max((a - b).abs().max().item() for a, b in zip(states, ref_states))
    # measured: 1.4e-6 (50/5), 7.2e-7 (10/3), 4.8e-7 (4/8): the float32 rounding floor of this model
    # (our coefficients are float64, diffusers' float32; both are ~1.6e-6 from a float64 run)
    assert err <= 1e-5, f"max |ours - diffusers| over {steps} steps = {err:.3e}"


def test_unipc_model_sees_official_integer_timesteps(model, start_noise):
    schedule = build_schedule(steps=6, shift=5.0)
    sample(lambda x, sigma, t: model(x, t), start_noise, schedule, "unipc")
    assert [t.dtype for t in model.timesteps] == [torch.int64] * 6
    assert torch.equal(torch.cat(model.timesteps), schedule.timesteps)
