"""DPM-Solver++ 2M (midpoint, lower-order final) vs diffusers.DPMSolverMultistepScheduler
(docs/wan_spec.md section 6.4).

Reference configuration: DPMSolverMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
flow_shift=s, algorithm_type="dpmsolver++", solver_type="midpoint", solver_order=2, lower_order_final=True,
final_sigmas_type="zero"). Its own flow grid is shift(linspace(0.999, 0, N+1)[:N]) (our "official" grid;
asserted below). diffusers 0.42 cannot be configured for Wan's DPM++ grid (first sigma exactly 1: its
set_timesteps takes no sigma list), so for that grid the reference is the same diffusers step() with the grid
written into its ``sigmas`` after set_timesteps (its step reads sigmas[step_index] only).
"""
from __future__ import annotations

import pytest
import torch
from diffusers import DPMSolverMultistepScheduler

from wan_core.sampling import build_schedule, sample

# diffusers 0.42's DPM set_timesteps trips a numpy 2 DeprecationWarning (np.array(copy=False)); not ours
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")


def make_reference(shift, steps):
    sched = DPMSolverMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=shift,
                                        algorithm_type="dpmsolver++", solver_type="midpoint", solver_order=2,
                                        lower_order_final=True, final_sigmas_type="zero")
    sched.set_timesteps(steps)
    return sched


def run_reference(sched, model, x):
    states = []
    for t in sched.timesteps:
        x = sched.step(model(x, t.reshape(1)), t, x).prev_sample
        states.append(x)
    return states


def run_ours(model, x, schedule):
    states = []
    sample(lambda x, sigma, t: model(x, t), x, schedule, "dpm++",
           callback=lambda step, total, x, x0: states.append(x))
    return states


@pytest.mark.parametrize("steps,shift", [(50, 5.0), (10, 3.0), (4, 8.0)])
def test_dpmpp_matches_diffusers_on_its_flow_grid(model, start_noise, steps, shift):
    ref = make_reference(shift, steps)
    schedule = build_schedule(steps=steps, shift=shift, convention="official")
    assert torch.equal(schedule.sigmas, ref.sigmas)
    assert torch.equal(schedule.timesteps, ref.timesteps)
    ref_states = run_reference(ref, model, start_noise.clone())
    states = run_ours(model, start_noise.clone(), schedule)
    err = max((a - b).abs().max().item() for a, b in zip(states, ref_states))
    assert err <= 1e-5, f"max |ours - diffusers| = {err:.3e}"  # measured 1.2e-6 (50/5)


@pytest.mark.parametrize("steps,shift", [(50, 5.0), (10, 3.0), (4, 8.0)])
def test_dpmpp_on_official_dpm_grid_starting_at_sigma_one(model, start_noise, steps, shift):
    schedule = build_schedule(steps=steps, shift=shift, convention="dpm")
    assert schedule.sigmas[0].item() == 1.0 and schedule.timesteps[0].item() == 1000
    ref = make_reference(shift, steps)
    ref.sigmas = schedule.sigmas.clone()
    ref.timesteps = schedule.timesteps.clone()
    ref.set_begin_index(0)
    ref_states = run_reference(ref, model, start_noise.clone())
    states = run_ours(model, start_noise.clone(), schedule)
    assert all(torch.isfinite(s).all() for s in states)
    err = max((a - b).abs().max().item() for a, b in zip(states, ref_states))
    assert err <= 1e-5, f"max |ours - diffusers| = {err:.3e}"  # measured 1.4e-6 (50/5)
