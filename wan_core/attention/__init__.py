"""The single attention dispatch point (docs/design.md section 3): every attention call in the models goes here.

Backends: ``sdpa`` (torch), ``sage`` (SageAttention on CUDA, named fallback elsewhere), ``int8`` /
``int8_fp8`` (the SageAttention algorithm in torch). Skiparse wraps self-attention per block.
"""
from .dispatch import (ATTENTION_BACKENDS, Attention, AttentionCall, AttentionDispatch, AttentionOverride,
                       attention_backends, get_backend, register_backend, sdpa_attention)
from .int8 import int8_attention, int8_fp8_attention, quantize_int8_blocks
from .sage import sage_attention
from .skiparse import (SCHEDULES, Skiparse, SkiparseMode, SkiparseSchedule, group_lengths,
                       skiparse_attention, skiparse_index, skiparse_key_mask, skiparse_permute, skiparse_schedule,
                       skiparse_unpermute, suv_stage_blocks)
from .steps import step_in_range

register_backend("int8", int8_attention, masks=True)
register_backend("int8_fp8", int8_fp8_attention, masks=True)
register_backend("sage", sage_attention, masks=False)

__all__ = [
    "ATTENTION_BACKENDS", "Attention", "AttentionCall", "AttentionDispatch", "AttentionOverride", "SCHEDULES",
    "Skiparse", "SkiparseMode", "SkiparseSchedule", "attention_backends", "get_backend", "group_lengths",
    "int8_attention", "int8_fp8_attention", "quantize_int8_blocks", "register_backend", "sage_attention",
    "sdpa_attention", "skiparse_attention", "skiparse_index", "skiparse_key_mask", "skiparse_permute",
    "skiparse_schedule", "skiparse_unpermute", "step_in_range", "suv_stage_blocks",
]
