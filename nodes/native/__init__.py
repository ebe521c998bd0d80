"""WanCore speed-ups as ``MODEL -> MODEL`` patches for ComfyUI's native Wan model (docs/native_patches.md).

One module per idea. ``host`` (the ComfyUI adapter) never imports this package; ``patcher`` and ``specs`` import
``host``, the patch cores do not:

* ``attention_patch`` - :class:`NativeAttention`, the ``optimized_attention_override`` (backends, skiparse),
  and the block / grid patches that tell it where a call comes from;
* ``cache_patch`` - :class:`NativeCache` / :class:`NativeCacheRun`, ``wan_core.cache`` driven from ComfyUI's
  wrappers, and :class:`CacheAttention` (the ``wan`` preset's attention cache);
* ``riflex_patch`` - :class:`RiflexEmbedder`, RIFLEx on the native model's RoPE, as an object patch on a clone;
* ``patcher`` - puts them on a clone of a ComfyUI ``ModelPatcher`` (the ComfyUI names from ``host``);
* ``parallel_patch`` - context parallelism's per-rank part (block sharding, the cross-rank attention override);
  ``parallel_worker`` - the worker process's ComfyUI Wan model; ``parallel_node`` - WanCore Native Context
  Parallel and its rank-0 driver (docs/parallel.md section 12);
* ``specs`` - the four nodes (WanCore Native Attention, Native Cache, Native RIFLEx, Embeds to Conditioning).

The patch cores are plain Python (no ``comfy`` import), so they are tested without ComfyUI.
"""
from __future__ import annotations

from .. import host
from .attention_patch import (
    CACHE_CALLS_KEY,
    CALLS_KEY,
    NATIVE_BACKENDS,
    NativeAttention,
    attention_block_patch,
    grid_wrapper,
    parse_ks,
    transformer_options_of,
)
from .cache_patch import (
    RUN_KEY,
    CacheAttention,
    NativeCache,
    NativeCacheRun,
    NativeCacheState,
    NativeDiT,
    block_patch,
    branch_name,
    calc_cond_batch_wrapper,
    diffusion_model_wrapper,
    guidance_of,
    native_config,
    sample_wrapper,
    step_of,
    time_embeddings,
    window_of,
)
from .parallel_node import PARALLEL, NativeParallel, patch_parallel, validate_native_parallel
from .patcher import native_attention_patch, native_cache_patch
from .riflex_patch import RiflexEmbedder, native_riflex_patch
from .specs import (
    ATTENTION,
    CACHE,
    CATEGORY,
    CONDITIONING,
    NATIVE_METHODS,
    RIFLEX,
    SKIPARSE_CHOICES,
    attention_override,
    cache_setting,
    patch_attention,
    patch_cache,
    patch_riflex,
    to_conditioning,
    validate_attention,
    validate_cache,
    validate_riflex,
)
from .specs import NODES as _SPEC_NODES

NODES = (*_SPEC_NODES, PARALLEL)

__all__ = [
    "ATTENTION", "CACHE", "CACHE_CALLS_KEY", "CALLS_KEY", "CATEGORY", "CONDITIONING", "CacheAttention",
    "NATIVE_BACKENDS", "NATIVE_METHODS", "NODES", "NativeAttention", "NativeCache", "NativeCacheRun",
    "NativeCacheState", "NativeDiT", "NativeParallel", "PARALLEL", "patch_parallel", "validate_native_parallel",
    "RIFLEX", "RUN_KEY", "RiflexEmbedder", "SKIPARSE_CHOICES", "attention_block_patch", "attention_override",
    "block_patch", "branch_name", "cache_setting", "calc_cond_batch_wrapper", "diffusion_model_wrapper", "grid_wrapper",
    "guidance_of", "host", "native_attention_patch", "native_cache_patch", "native_config", "native_riflex_patch",
    "parse_ks", "patch_attention", "patch_cache", "patch_riflex", "sample_wrapper", "step_of", "time_embeddings",
    "to_conditioning", "transformer_options_of", "validate_attention", "validate_cache", "validate_riflex", "window_of",
]
