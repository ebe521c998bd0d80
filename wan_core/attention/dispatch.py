"""Attention dispatch: named backends behind one call, chosen per model and overridable per call site.

Tensors use the "HND" layout of torch SDPA (also accepted by SageAttention): q ``[B, N, Lq, d]``,
k/v ``[B, N, Lk, d]`` -> ``[B, N, Lq, d]``, contiguous (CPU SDPA is ~1.4x slower on strided inputs).
Backends are plain functions ``fn(q, k, v, scale=None, attn_mask=None) -> out`` registered by name (a
backend registered with ``masks=False`` is never given a mask). The dispatcher picks the backend per call
(model default, then per-block / per-step-range overrides) and wraps skiparse around self-attention, so
model code never branches on either. The sampling loop tells it the current step with ``set_step``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F

from .skiparse import SkiparseMode, SkiparseSchedule, skiparse_attention
from .steps import check_step_range, step_in_range

AttentionFn = Callable[..., torch.Tensor]

# The built-in backends (a test keeps the two equal); register_backend adds names, so parameters that take a
# backend are typed ``Attention | str``.
Attention = Literal["sdpa", "sage", "int8", "int8_fp8"]
ATTENTION_BACKENDS: tuple[str, ...] = get_args(Attention)


@dataclass(frozen=True)
class Backend:
    name: str
    fn: AttentionFn
    masks: bool  # accepts ``attn_mask``


_BACKENDS: dict[str, Backend] = {}
_WARNED: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """Emit ``message`` as a RuntimeWarning the first time ``key`` is seen in this process."""
    if key in _WARNED:
        return
    _WARNED.add(key)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def register_backend(name: str, fn: AttentionFn, *, masks: bool = False) -> None:
    """Make ``fn(q, k, v, scale=None[, attn_mask=None])`` available as backend ``name``.

    ``masks=True``: fn accepts ``attn_mask`` (bool, True = attend, or additive float; broadcastable to
    ``[B, N, Lq, Lk]``), used by skiparse padding. Without it skiparse splits padded calls by length.
    """
    _BACKENDS[name] = Backend(name, fn, masks)


def attention_backends() -> list[str]:
    return sorted(_BACKENDS)


def get_backend(name: str) -> Backend:
    try:
        return _BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown attention backend {name!r}; available: {', '.join(attention_backends())}") \
            from None


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
                   attn_mask: torch.Tensor | None = None) -> torch.Tensor:
    """torch scaled_dot_product_attention; q ``[B, N, Lq, d]``, k/v ``[B, N, Lk, d]`` -> ``[B, N, Lq, d]``."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)


register_backend("sdpa", sdpa_attention, masks=True)


@dataclass(frozen=True)
class AttentionCall:
    """Where an attention call comes from, so a dispatcher can route per block, per kind and per step."""

    kind: str  # "self" | "cross"
    layer: int


@dataclass(frozen=True)
class AttentionOverride:
    """Use ``backend`` for the calls that match: ``blocks`` (indices; None = all), ``steps`` (a step range,
    see ``steps.py``; None = every step) and ``kind`` ("self" | "cross" | None = both). Later overrides win."""

    backend: Attention | str
    blocks: tuple[int, ...] | None = None
    steps: tuple | None = None
    kind: str | None = None

    def __post_init__(self):
        get_backend(self.backend)
        if self.blocks is not None:
            object.__setattr__(self, "blocks", tuple(int(b) for b in self.blocks))
        object.__setattr__(self, "steps", check_step_range(self.steps, "override steps"))
        if self.kind not in (None, "self", "cross"):
            raise ValueError(f"override kind must be 'self', 'cross' or None, got {self.kind!r}")

    def matches(self, call: AttentionCall, step: int | None, total: int | None) -> bool:
        return ((self.kind is None or self.kind == call.kind)
                and (self.blocks is None or call.layer in self.blocks)
                and step_in_range(self.steps, step, total))


class AttentionDispatch:
    """Callable that routes ``(q, k, v, call)`` to the configured backend.

    ``backend``: registered backend for the whole model. ``overrides``: :class:`AttentionOverride` rules.
    ``skiparse``: a :class:`SkiparseSchedule` applied to self-attention (None = dense everywhere).
    Step-dependent rules read the step given by :meth:`set_step` (or :meth:`at_step`, or ``begin_step``,
    which makes the dispatcher a sampling-loop step hook); until then only step-independent rules apply.
    """

    def __init__(self, backend: Attention | str = "sdpa", *, overrides: Iterable[AttentionOverride] = (),
                 skiparse: SkiparseSchedule | None = None):
        get_backend(backend)
        self.backend = backend
        self.overrides = tuple(overrides)
        for o in self.overrides:
            if not isinstance(o, AttentionOverride):
                raise TypeError(f"overrides must be AttentionOverride objects, got {type(o).__name__}")
        if skiparse is not None and not isinstance(skiparse, SkiparseSchedule):
            raise TypeError(f"skiparse must be a SkiparseSchedule or None, got {type(skiparse).__name__}")
        self.skiparse = skiparse
        self.step: int | None = None
        self.total: int | None = None

    # ---- sampling step
    def set_step(self, step: int | None, total: int | None = None) -> None:
        """Tell the dispatcher the sampling step about to run (0-based) of ``total``; None clears it."""
        if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
            raise ValueError(f"step must be a non-negative int or None, got {step!r}")
        self.step, self.total = step, (total if step is not None else None)

    def begin_step(self, step: int, num_steps: int, sigma: float | None = None) -> None:
        """``StepHook`` protocol of ``wan_core.sampling``: pass the dispatcher in ``step_hooks``."""
        self.set_step(step, num_steps)

    @contextlib.contextmanager
    def at_step(self, step: int, total: int | None = None):
        """``with dispatch.at_step(i, n): model(...)``; restores the previous step afterwards."""
        prev = (self.step, self.total)
        self.set_step(step, total)
        try:
            yield self
        finally:
            self.step, self.total = prev

    # ---- routing
    def backend_for(self, call: AttentionCall) -> str:
        name = self.backend
        for o in self.overrides:
            if o.matches(call, self.step, self.total):
                name = o.backend
        return name

    def select(self, call: AttentionCall) -> AttentionFn:
        return get_backend(self.backend_for(call)).fn

    def sparse_plan(self, call: AttentionCall) -> tuple[int, SkiparseMode] | None:
        """``(k, mode)`` when this call runs skiparse, else None."""
        if call.kind != "self" or self.skiparse is None:
            return None
        return self.skiparse.plan(call.layer, self.step, self.total)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> torch.Tensor:
        backend = get_backend(self.backend_for(call))
        plan = self.sparse_plan(call)
        if plan is None:
            return backend.fn(q, k, v)
        return skiparse_attention(q, k, v, plan[0], plan[1], backend.fn, masks=backend.masks)

    def replace(self, **changes) -> "AttentionDispatch":
        """A copy with ``backend``, ``overrides`` or ``skiparse`` changed (the step is not copied)."""
        args: dict[str, Any] = {"backend": self.backend, "overrides": self.overrides, "skiparse": self.skiparse}
        unknown = set(changes) - set(args)
        if unknown:
            raise TypeError(f"AttentionDispatch.replace: unknown field(s) {', '.join(sorted(unknown))}")
        args.update(changes)
        return AttentionDispatch(args.pop("backend"), **args)

    def __repr__(self) -> str:
        parts = [f"backend={self.backend!r}"]
        if self.overrides:
            parts.append(f"overrides={[dataclasses.astuple(o) for o in self.overrides]}")
        if self.skiparse is not None:
            parts.append(f"skiparse={self.skiparse.name!r}")
        return f"AttentionDispatch({', '.join(parts)})"
