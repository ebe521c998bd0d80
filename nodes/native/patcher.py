"""The model-patch adapter: puts the attention and cache patches on a clone of a native ComfyUI MODEL.

A MODEL is a ComfyUI ``ModelPatcher``; the patches go on its ``clone()`` (``model_options`` copied), never on
the input MODEL. The ComfyUI names it needs (wrapper kinds, the ``model_options`` clone) come from ``host``.
"""
from __future__ import annotations

from collections.abc import Callable

from .. import host
from .attention_patch import NativeAttention, attention_block_patch, grid_wrapper
from .cache_patch import (
    CacheAttention,
    NativeCache,
    block_patch,
    calc_cond_batch_wrapper,
    diffusion_model_wrapper,
    sample_wrapper,
)


def native_attention_patch(model, override: NativeAttention, num_layers: int):
    """A clone of ``model`` whose attention calls go through ``override`` (``optimized_attention_override``;
    one already set by another patch is called for the calls ``override`` leaves dense). With skiparse, block
    replace patches tell the override the block, and a DIFFUSION_MODEL wrapper the token grid."""
    patched = model.clone()
    to = host.transformer_options(patched)
    previous = to.get("optimized_attention_override")
    if isinstance(previous, CacheAttention):  # the cache's attention cache stays outermost
        override.previous = previous.inner
        to["optimized_attention_override"] = CacheAttention(override)
    else:
        override.previous = previous
        to["optimized_attention_override"] = override
    if override.skiparse != "none":
        patched.add_wrapper_with_key(host.wrappers_mp("DIFFUSION_MODEL"), "wancore_attention", grid_wrapper)
        host.chain_block_patches(patched, lambda i, prev: attention_block_patch(i, num_layers, prev), num_layers)
    return patched


def native_cache_patch(model, cache: NativeCache, num_layers: int, show: Callable[[str], None] | None = None):
    """A clone of ``model`` with the cache's wrappers (OUTER_SAMPLE, CALC_COND_BATCH, DIFFUSION_MODEL) and,
    for the block-stack caches, a replace patch per block (chained to one already there)."""
    clone_options = host.model_options_clone()
    patched = model.clone()
    key = "wancore_cache"
    patched.add_wrapper_with_key(host.wrappers_mp("OUTER_SAMPLE"), key,
                                 sample_wrapper(cache, clone_options, show or (lambda text: host.show_text(text))))
    patched.add_wrapper_with_key(host.wrappers_mp("CALC_COND_BATCH"), key, calc_cond_batch_wrapper)
    patched.add_wrapper_with_key(host.wrappers_mp("DIFFUSION_MODEL"), key, diffusion_model_wrapper)
    if cache.uses_blocks:
        host.chain_block_patches(patched, block_patch, num_layers)
    if cache.uses_attention:  # the wan preset's attention cache, around any attention override already set
        to = host.transformer_options(patched)
        to["optimized_attention_override"] = CacheAttention(to.get("optimized_attention_override"))
        patched.add_wrapper_with_key(host.wrappers_mp("DIFFUSION_MODEL"), "wancore_cache_grid", grid_wrapper)
        host.chain_block_patches(patched, lambda i, prev: attention_block_patch(i, num_layers, prev), num_layers)
    return patched
