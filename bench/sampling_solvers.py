"""Solver overhead per step, ours vs diffusers, on a Wan 1.3B 480p latent (not a test).

Usage: python bench/sampling_solvers.py [--steps 20] [--device cpu]
The model is a cheap stand-in (v = tanh(x) - x) so the time measured is the solver's own arithmetic; on a
real run it is negligible next to the DiT forward.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from diffusers import DPMSolverMultistepScheduler, UniPCMultistepScheduler

from wan_core.sampling import build_schedule, sample

SHAPE = (1, 16, 21, 60, 104)  # 81 frames, 480x832


def model(x, t):
    return torch.tanh(x) - x


def time_ours(solver, x, steps):
    schedule = build_schedule(steps=steps, shift=5.0)
    start = time.perf_counter()
    sample(lambda x, s, t: model(x, t), x, schedule, solver)
    return (time.perf_counter() - start) / steps


def time_diffusers(sched, x):
    start = time.perf_counter()
    for t in sched.timesteps:
        x = sched.step(model(x, t), t, x).prev_sample
    return (time.perf_counter() - start) / len(sched.timesteps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(0)).to(args.device)
    unipc = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=5.0,
                                    solver_order=2, solver_type="bh2")
    unipc.set_timesteps(sigmas=np.linspace(0.999, 0, args.steps + 1)[:-1], device=args.device)
    dpm = DPMSolverMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=5.0,
                                      algorithm_type="dpmsolver++", solver_type="midpoint", final_sigmas_type="zero")
    dpm.set_timesteps(args.steps, device=args.device)
    time_ours("euler", x.clone(), 2)  # warm-up
    rows = [
        ("unipc", time_ours("unipc", x.clone(), args.steps), time_diffusers(unipc, x.clone())),
        ("dpm++", time_ours("dpm++", x.clone(), args.steps), time_diffusers(dpm, x.clone())),
        ("euler", time_ours("euler", x.clone(), args.steps), float("nan")),
    ]
    print(f"latent {SHAPE}, {args.steps} steps, {args.device}; ms per step including the stand-in model")
    for name, ours, ref in rows:
        print(f"  {name:6s} ours {1e3 * ours:8.1f}   diffusers {1e3 * ref:8.1f}")


if __name__ == "__main__":
    main()
