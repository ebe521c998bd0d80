"""Context-parallel node: WANCORE_MODEL -> WANCORE_MODEL running on several devices (docs/parallel.md).

This ComfyUI process is rank 0 and keeps driving the sampler; one worker process per extra device loads the
same checkpoint itself and mirrors every block-stack run (``wan_core.parallel.pool``). The pool is started
here, reused by later prompts with the same settings and replaced when they change."""
from __future__ import annotations

import contextlib
import os
import sys
import types
from collections.abc import Iterator

import torch

from wan_core.parallel import ParallelConfig, check_degrees
from wan_core.parallel.pool import get_pool

from . import host
from .declare import Input, NodeSpec, Output


HEAD_COUNTS = (12, 24, 40)  # Wan 2.1 1.3B, Wan 2.2 TI2V 5B, 14B


def device_list(devices: int) -> list[str]:
    """``devices`` device names, this process's first ("cpu" each on a server without GPUs)."""
    first = host.torch_device()
    if first.type != "cuda":
        return ["cpu"] * devices  # CPU processes with gloo: for tests, no speed-up
    start = first.index or 0
    return [f"cuda:{(start + i) % torch.cuda.device_count()}" for i in range(devices)]


# A server option (set before starting ComfyUI): how many processes the node may run on a server without GPUs, for
# tests. Unset, a CPU-only server starts none: each worker loads the whole model, so a client asking for many
# devices could exhaust the machine.
CPU_PROCESSES_ENV = "WANCORE_CPU_PROCESSES"


def cpu_processes_allowed() -> int:
    """The processes a CPU-only server allows (this one included): ``WANCORE_CPU_PROCESSES``, at most the CPU
    count; 1 (no worker) when unset or not a whole number."""
    raw = os.environ.get(CPU_PROCESSES_ENV, "").strip()
    try:
        allowed = int(raw) if raw else 1
    except ValueError:
        allowed = 1
    return max(1, min(allowed, os.cpu_count() or 1))


def devices_problem(devices: int) -> str | None:
    """Why ``devices`` processes cannot run on this machine (more than its GPUs; on a CPU-only server more than
    the allowed CPU processes), or None."""
    if host.torch_device().type == "cuda":
        present = torch.cuda.device_count()
        return None if devices <= present else f"devices={devices} but this machine has {present} GPU(s)"
    allowed = cpu_processes_allowed()
    if devices <= allowed:
        return None
    return (f"devices={devices} but this server has no GPU: context parallel needs one GPU per device (CPU "
            f"worker processes, for tests, only up to {CPU_PROCESSES_ENV}={allowed} set when the server starts)")


@contextlib.contextmanager
def host_main_hidden() -> Iterator[None]:
    """While the workers start, ``__main__`` is a bare module. A spawned process first re-runs its parent's main
    file: in ComfyUI that is the server's main.py, which the worker does not need and which may not even import
    there (ComfyUI 0.33.0: ``utils`` found as ``comfy/utils.py`` first on ``sys.path``, "'utils' is not a
    package"); how the server was started (cwd, ``--base-directory``, a launcher) must not matter."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def validate_parallel(devices: int = 2, ulysses: int = 2, ring: int = 1, cfg_parallel: bool = False) -> bool | str:
    """Pre-queue: degrees multiply to ``devices`` and that many GPUs exist (the head count is checked when the
    model arrives, before any work)."""
    problems = PARALLEL.range_problems(devices=devices, ulysses=ulysses, ring=ring)
    if problems:
        return "; ".join(problems)
    if not any(h % ulysses == 0 for h in HEAD_COUNTS):
        return (f"ulysses={ulysses} divides no Wan head count (12 for 1.3B, 24 for Wan 2.2 5B, 40 for 14B); "
                f"valid: 1, 2, 3, 4, 5, 6, 8, 10, 12, 20, 24, 40 as the model allows")
    try:
        check_degrees(ParallelConfig(ulysses, ring, 2 if cfg_parallel else 1), devices, 120)  # lcm of the counts
    except ValueError as e:
        return str(e)
    return devices_problem(devices) or True


def apply(model, devices: int = 2, ulysses: int = 2, ring: int = 1, cfg_parallel: bool = False):
    config = ParallelConfig(ulysses, ring, 2 if cfg_parallel else 1)
    check_degrees(config, devices, int(model.config.num_heads))
    if devices == 1:
        return (model,)
    problem = devices_problem(devices)
    if problem:
        raise ValueError(problem)
    with host_main_hidden():
        pool = get_pool(model, config, device_list(devices))
    host.show_text(f"context parallel: {config.describe()} on {devices} processes")
    return (pool.view(model),)  # this model's LoRA stack (if any): the workers apply the same files


PARALLEL = NodeSpec(
    node_id="WanCoreContextParallel", display_name="WanCore Context Parallel", category="WanCore/model",
    description="Runs the model on several GPUs: the video tokens are split between them (Ulysses: heads "
                "all-to-all, Ring: K/V passed around, both: USP) and optionally cond/uncond on different GPUs "
                "(CFG-parallel). Exact: same video as one GPU. Extra GPUs get a worker process that loads the same "
                "file; the sampler needs no change.",
    inputs=(
        Input("model", "WANCORE_MODEL"),
        Input("devices", "INT", default=2, min=1, max=64, tooltip="GPUs to use (this one first)"),
        Input("ulysses", "INT", default=2, min=1, max=64,
              tooltip="all-to-all degree: must divide the head count (12 for 1.3B, 40 for 14B); fast links"),
        Input("ring", "INT", default=1, min=1, max=64, tooltip="ring degree: K/V rotation, covers the rest"),
        Input("cfg_parallel", "BOOLEAN", default=False,
              tooltip="cond and uncond on different GPUs (needs guidance != 1; doubles the processes)"),
    ),
    outputs=(Output("WANCORE_MODEL", "model"),),
    fn=apply,
    validate=validate_parallel,
    search_aliases=("multi gpu", "ulysses", "ring attention", "usp", "sequence parallel"),
)

NODES = (PARALLEL,)
