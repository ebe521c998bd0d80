"""Context parallelism on torch.distributed: Ulysses, Ring, USP and CFG-parallel (docs/parallel.md).

``ParallelConfig`` / ``build_groups`` make the process groups, ``context_parallel(dit, groups)`` a parallel view of
a DiT that every rank calls with the same inputs, ``usp_attention`` the attention itself, ``WorkerPool`` /
``get_pool`` the driving-process pool used by the ComfyUI node. Names resolve on first use, so the CLI can
import ``wan_core.cli.parallel`` without torch.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "attention_with_lse": "attention", "heads_to_seq": "attention", "ring_attention": "attention",
    "seq_to_heads": "attention", "usp_attention": "attention",
    "ContextParallelDispatch": "dit", "context_parallel": "dit",
    "ParallelConfig": "groups", "ParallelGroups": "groups", "build_groups": "groups", "check_degrees": "groups",
    "valid_layouts": "groups",
    "LoadSpec": "pool", "WorkerError": "pool", "WorkerPool": "pool", "get_pool": "pool",
    "shutdown_pools": "pool",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'wan_core.parallel' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
