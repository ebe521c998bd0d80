"""Context parallelism for ComfyUI's native Wan model: the part every rank runs (docs/parallel.md section 12).

ComfyUI's process is rank 0 and samples as usual; worker processes hold a copy of the patched weights in their
own ComfyUI ``WanModel`` (``parallel_worker``). Per block stack actually computed (a cache may skip it, deciding
on rank 0 only), rank 0 sends the workers the block stack's inputs (hidden states, modulation, RoPE rotations,
text context) and every rank runs the same :func:`run_block` per block: block 0 cuts this rank's batch rows
(CFG-parallel) and token chunk (Ulysses / Ring / USP, ``wan_core.parallel.tokens``), the last block gathers.
Self-attention goes across the ranks through ComfyUI's attention override (:class:`ContextParallelAttention`);
cross-attention stays local (the text is replicated). Embeddings, head and caches run on rank 0 alone.
Plain Python (no ``comfy`` import): the ComfyUI facts come from ``host`` through the node.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from wan_core.parallel.attention import usp_attention
from wan_core.parallel.groups import ParallelGroups
from wan_core.parallel.tokens import TokenShard

from .attention_patch import NativeAttention

SHARD_KEY = "wancore_cp_shard"  # transformer_options entry while a sharded block stack runs
CP_CALLS_KEY = "wancore_cp_calls"  # attention calls in the current block (the first is its self-attention)
OVERRIDE = "optimized_attention_override"


class ContextParallelAttention:
    """ComfyUI's attention override for a block running on a token chunk: the block's self-attention (its first
    attention call, unmasked, q and k of the chunk's length) runs Ulysses / Ring / USP over the ranks, with the
    override it wraps (``inner``, e.g. WanCore Native Attention) or ComfyUI's ``func`` computing whatever is
    local (the whole sequence for a head slice under Ulysses); every other call runs locally unchanged."""

    def __init__(self, inner: Callable | None, groups: ParallelGroups):
        self.inner = inner
        self.groups = groups

    def __call__(self, func: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
                 mask: torch.Tensor | None = None, skip_reshape: bool = False, skip_output_reshape: bool = False,
                 transformer_options: dict | None = None, **kwargs: Any) -> torch.Tensor:
        to = transformer_options if transformer_options is not None else {}

        def local(q, k, v, heads, skip_reshape, skip_output_reshape):
            call = dict(kwargs, mask=mask, skip_reshape=skip_reshape, skip_output_reshape=skip_output_reshape,
                        transformer_options=transformer_options)
            if self.inner is not None:
                return self.inner(func, q, k, v, heads=heads, **call)
            return func(q, k, v, heads, **call)

        shard: TokenShard | None = to.get(SHARD_KEY)
        n = to.get(CP_CALLS_KEY, 0)
        to[CP_CALLS_KEY] = n + 1
        if shard is None or n != 0 or mask is not None or skip_reshape or q.shape[1] != k.shape[1]:
            return local(q, k, v, heads, skip_reshape, skip_output_reshape)
        b, lc = q.shape[0], q.shape[1]
        q4, k4, v4 = (t.reshape(b, lc, heads, -1).transpose(1, 2) for t in (q, k, v))
        g = self.groups
        out = usp_attention(q4, k4, v4, length=shard.length, ulysses_group=g.ulysses_group, ring_group=g.ring_group,
                            backend=lambda qq, kk, vv: local(qq, kk, vv, qq.shape[1], True, True))
        if skip_output_reshape:
            return out
        return out.transpose(1, 2).reshape(b, lc, -1)


def _modulation(e: torch.Tensor, shard: TokenShard) -> torch.Tensor:
    """This rank's rows of the modulation ``[B, 1 or L, 6, D]`` (and tokens when per token: Wan 2.2 TI2V)."""
    e = shard.rows(e)
    if e.dim() == 4 and e.shape[1] == shard.length and shard.length > 1:
        e = shard.tokens(e)
    return e


def run_block(index: int, total: int, block: Callable, x: torch.Tensor, e: torch.Tensor, freqs: torch.Tensor,
              context: torch.Tensor, to: dict, shard: TokenShard) -> torch.Tensor:
    """Block ``index`` of ``total`` on this rank's share: ``block(x, e, freqs, context)`` is ComfyUI's block.

    ``x`` is the full ``[B, L, D]`` at block 0 (cut here), this rank's ``[rows, chunk, D]`` after; ``e`` (``[B, 1
    or L, 6, D]``), ``freqs`` (``[1, L, 1, d/2, 2, 2]``) and ``context`` are the full tensors every block gets.
    The last block returns the gathered ``[B, L, D]`` (every rank the same)."""
    NativeAttention.enter_block(to, index, total)  # the block number for WanCore Native Attention's skiparse
    to[CP_CALLS_KEY] = 0
    to[SHARD_KEY] = shard
    if index == 0:
        x = shard.tokens(shard.rows(x))
    try:
        out = block(x, _modulation(e, shard), shard.tokens(freqs), shard.rows(context))
    finally:
        to.pop(SHARD_KEY, None)
    return shard.gather(out) if index == total - 1 else out


def run_vace_block(block: Callable, c: torch.Tensor, x_orig: torch.Tensor, e: torch.Tensor, freqs: torch.Tensor,
                   context: torch.Tensor, to: dict, shard: TokenShard, first: bool,
                   last: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """A VACE block of ComfyUI's ``VaceWanModel`` on this rank's share: ``block(c, x, e, freqs, context)``
    returns ``(hint, c)``. The VACE tokens ``c`` (``[B, L, D]``, the grid of ``x``) are cut exactly like the
    hidden states (at the ``first`` VACE block; a share after), as is the stack's input ``x_orig`` (full), with
    the same RoPE rows. The hint stays this rank's share, except after the ``last`` main block, whose output is
    gathered already: then it is gathered too. The block's attention calls count apart from its main block's
    (WanCore Native Attention sees them as ComfyUI's loop makes them: after the main block's)."""
    to[CP_CALLS_KEY] = 0
    to[SHARD_KEY] = shard
    if first:
        c = shard.tokens(shard.rows(c))
    try:
        hint, c = block(c, shard.tokens(shard.rows(x_orig)), _modulation(e, shard), shard.tokens(freqs),
                        shard.rows(context))
    finally:
        to.pop(SHARD_KEY, None)
    return (shard.gather(hint) if last else hint), c


def describe_override(override: Any) -> tuple | None:
    """A picklable description of the attention override a native forward runs with, for the workers to build
    the same one: None, or WanCore Native Attention's settings (and the one it wraps). Another pack's override
    (or the ``wan`` cache's attention cache, which skips attention on rank 0 alone) is refused in one line."""
    if override is None:
        return None
    if isinstance(override, NativeAttention):
        return ("native", override.backend, override.skiparse, override.k, override.ks,
                describe_override(override.previous))
    raise ValueError(f"WanCore Native Context Parallel: the attention override {type(override).__name__} cannot "
                     f"run on the worker processes (the wan cache's attention cache skips attention on rank 0 "
                     f"alone; use its attention 'off', or another cache)")


def build_override(desc: tuple | None) -> Any:
    """The override :func:`describe_override` described (worker side)."""
    if desc is None:
        return None
    _, backend, skiparse, k, ks, previous = desc
    attn = NativeAttention(backend, skiparse, k, ks)
    attn.previous = build_override(previous)
    return attn


def check_ring_skiparse(desc: tuple | None, ring: int) -> None:
    """Skiparse needs the whole sequence of its heads on one rank: with Ring it is refused (one line)."""
    while desc is not None:
        if desc[2] != "none" and ring > 1:
            raise ValueError(f"WanCore Native Context Parallel: skiparse ({desc[2]}) runs with ulysses only, "
                             f"not ring={ring}; use ulysses=devices or attention skiparse 'none'")
        desc = desc[5]


def grid_of(x: torch.Tensor, patch: tuple[int, ...]) -> tuple[int, ...]:
    """The token grid of a native forward's latent ``[B, C, F, H, W]``."""
    return tuple(-(-int(n) // int(p)) for n, p in zip(x.shape[2:], patch))


def run_stack(blocks, x: torch.Tensor, e: torch.Tensor, freqs: torch.Tensor, context: torch.Tensor,
              img_len: int | None, to: dict, shard: TokenShard, vace: tuple | None = None) -> torch.Tensor:
    """A worker's mirror of rank 0's block loop: every block of ``blocks`` through :func:`run_block`; ``vace``:
    ``(vace_blocks, {main block: VACE block}, VACE tokens per input, strength per input)`` of a ``VaceWanModel``,
    whose hints are added after their main blocks as ComfyUI's loop adds them."""
    total = len(blocks)
    x_orig = x
    for i, block in enumerate(blocks):
        def fn(x, e, freqs, context, block=block):
            return block(x, e=e, freqs=freqs, context=context, context_img_len=img_len, transformer_options=to)
        x = run_block(i, total, fn, x, e, freqs, context, to, shard)
        if vace is None or vace[1].get(i) is None:
            continue
        vace_blocks, mapping, c, strength = vace
        ii = mapping[i]
        for n in range(len(c)):
            def vfn(c, x, e, freqs, context, block=vace_blocks[ii]):
                return block(c, x=x, e=e, freqs=freqs, context=context, context_img_len=img_len,
                             transformer_options=to)
            hint, c[n] = run_vace_block(vfn, c[n], x_orig, e, freqs, context, to, shard, ii == 0, i == total - 1)
            x = x + hint * strength[n]
    return x
