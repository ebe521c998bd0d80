"""The attention patch for ComfyUI's native Wan model: WanCore's attention backends and skiparse.

:class:`NativeAttention` is ComfyUI's ``optimized_attention_override``: called as
``override(func, q, k, v, heads, mask=None, ..., transformer_options=...)`` instead of the backend ``func``
ComfyUI would have run, with q/k/v ``[B, L, heads*d]`` (RoPE already applied). It runs ``wan_core``'s
attention dispatch: the chosen backend, and skiparse on the blocks the schedule makes sparse (self-attention
only). The block index and the token grid come from ``transformer_options`` (``block_index``,
``total_blocks``, ``grid_sizes``, set by the native Wan forward); the first attention call of a block is its
self-attention (a block replace patch, :func:`attention_block_patch`, resets the per-block call counter and
sets the block number; :func:`grid_wrapper` sets the grid, for ComfyUI versions whose forward does not).
Plain Python (no ``comfy`` import): tested without ComfyUI.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from wan_core.attention import get_backend
from wan_core.attention.skiparse import SCHEDULES, SkiparseSchedule, skiparse_attention, skiparse_schedule

NATIVE_BACKENDS = ("sdpa", "sage", "int8")
CALLS_KEY = "wancore_attention_calls"  # transformer_options entry: [block_index, attention calls in that block]
CACHE_CALLS_KEY = "wancore_cache_calls"  # the same count for the cache's attention override


def parse_ks(text: str) -> tuple[int, ...]:
    """``"1 1 4 4 2 1"`` or ``"1,1,4"`` -> ratios per block (custom skiparse); one-line ValueError otherwise."""
    parts = [p for p in text.replace(",", " ").split() if p]
    try:
        ks = tuple(int(p) for p in parts)
    except ValueError:
        raise ValueError(f"skiparse custom ratios must be integers separated by spaces or commas, got {text!r}") \
            from None
    if not ks or min(ks) < 1:
        raise ValueError(f"skiparse custom ratios: one integer >= 1 per block (1 = dense), got {text!r}")
    return ks


class NativeAttention:
    """The attention override for a native Wan model: ``backend`` for every call, skiparse per block.

    ``skiparse``: ``none``, ``osp13`` (ratio ``k``), ``suv`` or ``custom`` (``ks``: one ratio per block). The
    schedule is built for the model's block count on the first call (``transformer_options["total_blocks"]``).
    Calls that are not a Wan self-attention over the video grid, calls with a mask and calls that ask for no
    low-precision attention (the I2V image cross-attention) run dense; with backend ``sdpa`` a dense call runs
    ComfyUI's own ``func``, so only the skiparse blocks change.
    """

    def __init__(self, backend: str = "sdpa", skiparse: str = "none", k: int = 4, ks: Sequence[int] | None = None):
        if backend not in NATIVE_BACKENDS:
            raise ValueError(f"attention backend {backend!r}: choose one of {', '.join(NATIVE_BACKENDS)}")
        if skiparse not in SCHEDULES:
            raise ValueError(f"skiparse {skiparse!r}: choose one of {', '.join(SCHEDULES)}")
        if skiparse == "custom" and not ks:
            raise ValueError("skiparse 'custom' needs one ratio per block (e.g. '1 1 4 4 4 1 1')")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"skiparse k={k!r}: an integer >= 1")
        self.backend = backend
        self.skiparse = skiparse
        self.k = k
        self.ks = tuple(ks) if ks else None
        self._schedules: dict[int, SkiparseSchedule | None] = {}
        self.previous: Callable | None = None  # an override another patch had set: runs the dense calls

    @property
    def is_noop(self) -> bool:
        """``sdpa`` without skiparse changes nothing: the node then returns the model unpatched."""
        return self.backend == "sdpa" and self.skiparse == "none"

    def describe(self) -> str:
        sk = "" if self.skiparse == "none" else f", skiparse {self.skiparse}" + (
            f" k={self.k}" if self.skiparse == "osp13" else "")
        return f"attention {self.backend}{sk}"

    def schedule(self, num_layers: int) -> SkiparseSchedule | None:
        if num_layers not in self._schedules:
            self._schedules[num_layers] = skiparse_schedule(self.skiparse, num_layers, k=self.k,  # type: ignore[arg-type]
                                                            ks=self.ks)
        return self._schedules[num_layers]

    def check_layers(self, num_layers: int) -> None:
        """Build the schedule now (one-line ValueError, e.g. custom ratios for another block count)."""
        self.schedule(num_layers)

    # ---- where in the model a call comes from
    @staticmethod
    def enter_block(to: dict, index: int, total: int) -> None:
        """A block starts: its number (ComfyUI >= 0.3.6x's Wan forward sets it too, older ones do not) and a
        fresh call counter, so the next attention call is this block's self-attention."""
        to["block_index"], to["total_blocks"] = index, total
        to.pop(CALLS_KEY, None)
        to.pop(CACHE_CALLS_KEY, None)

    @staticmethod
    def _call_number(to: dict, key: str = CALLS_KEY) -> int:
        block = to.get("block_index")
        state = to.get(key)
        if not state or state[0] != block:
            state = [block, 0]
        n = state[1]
        to[key] = [block, n + 1]
        return n

    def plan(self, q_len: int, k_len: int, to: dict | None) -> tuple[int, str] | None:
        """``(k, mode)`` when this call is a self-attention in a sparse block, else None."""
        if not to or self.skiparse == "none":
            return None
        grid, block, total = to.get("grid_sizes"), to.get("block_index"), to.get("total_blocks")
        if grid is None or block is None or total is None:
            return None
        first = self._call_number(to) == 0
        if not first or q_len != k_len or k_len != math.prod(int(g) for g in grid):
            return None
        sched = self.schedule(int(total))
        return None if sched is None else sched.plan(int(block))

    def __call__(self, func: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
                 mask: torch.Tensor | None = None, attn_precision=None, skip_reshape: bool = False,
                 skip_output_reshape: bool = False, transformer_options: dict | None = None,
                 **kwargs: Any) -> torch.Tensor:
        def native() -> torch.Tensor:
            if self.previous is not None:
                return self.previous(func, q, k, v, heads=heads, mask=mask, attn_precision=attn_precision,
                                     skip_reshape=skip_reshape, skip_output_reshape=skip_output_reshape,
                                     transformer_options=transformer_options, **kwargs)
            return func(q, k, v, heads, mask=mask, attn_precision=attn_precision, skip_reshape=skip_reshape,
                        skip_output_reshape=skip_output_reshape, transformer_options=transformer_options, **kwargs)

        seq = 2 if skip_reshape else 1
        plan = self.plan(q.shape[seq], k.shape[seq], transformer_options)
        if mask is not None or kwargs.get("low_precision_attention") is False or (
                plan is None and self.backend == "sdpa"):
            return native()
        if skip_reshape:  # already [B, N, L, d]
            q4, k4, v4 = q, k, v
        else:
            b = q.shape[0]
            q4, k4, v4 = (t.view(b, t.shape[1], heads, -1).transpose(1, 2).contiguous() for t in (q, k, v))
        backend = get_backend(self.backend)
        scale = kwargs.get("scale")
        fn = backend.fn if scale is None else (lambda *a, **kw: backend.fn(*a, scale=scale, **kw))
        if plan is None:
            out = fn(q4, k4, v4)
        else:
            out = skiparse_attention(q4, k4, v4, plan[0], plan[1], fn, masks=backend.masks)  # type: ignore[arg-type]
        if skip_output_reshape:
            return out
        return out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)



# ---------------------------------------------------------------------------------------------- forward patches
# Generic ``fn(executor, *args, **kwargs)`` functions of ComfyUI's ``WrappersMP`` and block patches;
# ``patcher.py`` registers them on a ModelPatcher clone.


def transformer_options_of(args: tuple, kwargs: dict) -> dict:
    """The ``transformer_options`` of a native Wan forward call (keyword, else the last dict positional)."""
    to = kwargs.get("transformer_options")
    if isinstance(to, dict):
        return to
    for a in reversed(args):
        if isinstance(a, dict):
            return a
    return {}



def grid_wrapper(executor, *args, **kwargs):
    """``DIFFUSION_MODEL`` for the attention patch: the token grid of this forward in ``transformer_options``
    (the Wan forward of ComfyUI 0.33 sets it again itself; 0.3.64's does not)."""
    to = transformer_options_of(args, kwargs)
    x = args[0] if args else kwargs["x"]
    patch = getattr(getattr(executor, "class_obj", None), "patch_size", (1, 2, 2))
    to["grid_sizes"] = tuple(-(-int(n) // int(p)) for n, p in zip(x.shape[2:], patch))
    return executor(*args, **kwargs)


def attention_block_patch(index: int, total: int, previous: Callable | None = None) -> Callable[[dict, dict], dict]:
    """``patches_replace["dit"][("double_block", index)]`` for the attention patch: tells the override which block
    runs (:meth:`NativeAttention.enter_block`), then runs the block (or the replace patch already there)."""

    def patch(args: dict, extra: dict) -> dict:
        to = args.get("transformer_options")
        if isinstance(to, dict):
            NativeAttention.enter_block(to, index, total)
        if previous is not None:
            return previous(args, extra)
        return extra["original_block"](args)

    patch.wancore_previous = previous  # type: ignore[attr-defined]
    return patch

