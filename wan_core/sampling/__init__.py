"""Flow-matching sampling for Wan 2.1: schedules, solvers (UniPC, DPM++ 2M, Euler), CFG, loop, noise.

Implements docs/wan_spec.md section 6. Typical use (the pipeline does this)::

    schedule = build_schedule(steps=50, shift=5.0)                 # official convention
    x = initial_latent(make_noise(seed, [1, 16, 21, 60, 104], device), schedule)
    guide = ClassifierFreeGuidance(dit, cond=ctx, uncond=neg_ctx, guidance=5.0)
    latents = sample(guide, x, schedule, "unipc", callback=..., interrupt=...)
"""
from .cfg import ClassifierFreeGuidance, check_guidance, combine_guidance, concat_contexts
from .comfy_schedule import COMFY_SCHEDULERS, ComfyScheduler, comfy_flow_sigmas, comfy_flow_table
from .distill import LIGHTX2V_SHIFT, LIGHTX2V_STEP_LIST, distill_sigmas, distill_step_list
from .dpmpp import DPMPP2MSolver
from .euler import EulerSolver
from .flow import log_snr, noise_latent, x0_from_velocity
from .hooks import BranchCache, GuidanceCache, StepHook
from .loop import SamplingInterrupted, initial_latent, sample
from .noise import make_noise
from .prompts import DEFAULT_NEGATIVE_PROMPT
from .schedule import (CONVENTIONS, NUM_TRAIN_TIMESTEPS, Convention, FlowSchedule, ScheduleConfig, build_schedule,
                       check_sigmas, sigma_to_timestep, time_shift)
from .solver import SOLVER_NAMES, FlowSolver, Solver, SolverStep, make_solver
from .unipc import UniPCSolver

__all__ = [
    "LIGHTX2V_SHIFT", "LIGHTX2V_STEP_LIST", "distill_sigmas", "distill_step_list",
    "BranchCache", "COMFY_SCHEDULERS", "CONVENTIONS", "ClassifierFreeGuidance", "ComfyScheduler", "Convention",
    "DEFAULT_NEGATIVE_PROMPT", "DPMPP2MSolver", "EulerSolver", "FlowSchedule", "FlowSolver", "GuidanceCache",
    "NUM_TRAIN_TIMESTEPS", "SOLVER_NAMES", "SamplingInterrupted", "ScheduleConfig", "Solver", "SolverStep",
    "StepHook", "UniPCSolver",
    "build_schedule", "check_guidance", "check_sigmas", "combine_guidance", "comfy_flow_sigmas",
    "comfy_flow_table", "concat_contexts", "initial_latent", "log_snr", "make_noise", "make_solver",
    "noise_latent", "sample", "sigma_to_timestep", "time_shift", "x0_from_velocity",
]
