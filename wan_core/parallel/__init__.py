"""Context parallelism on torch.distributed: Ulysses, Ring, USP and CFG-parallel (docs/parallel.md).

``ParallelConfig`` / ``build_groups`` make the process groups, ``context_parallel(dit, groups)`` a parallel view of
a DiT that every rank calls with the same inputs, ``usp_attention`` the attention itself.
"""
from .attention import attention_with_lse, heads_to_seq, ring_attention, seq_to_heads, usp_attention
from .dit import ContextParallelDispatch, context_parallel
from .groups import ParallelConfig, ParallelGroups, build_groups, check_degrees, valid_layouts

__all__ = [
    "ContextParallelDispatch", "ParallelConfig", "ParallelGroups", "attention_with_lse", "build_groups",
    "check_degrees", "context_parallel", "heads_to_seq", "ring_attention", "seq_to_heads", "usp_attention",
    "valid_layouts",
]
