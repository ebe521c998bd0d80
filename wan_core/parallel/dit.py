"""Context-parallel DiT: the block stack runs on a shard of the tokens (docs/parallel.md).

``context_parallel(dit, groups)`` returns a shallow copy of the model (same parameters) whose class adds two
things to the model's own: ``run_blocks`` pads the token sequence to a multiple of the sequence-parallel degree,
keeps this rank's contiguous chunk of the tokens and of the RoPE rotations (and of per-token modulation when the
model has it), runs the blocks and all-gathers the chunks; its attention dispatch
(:class:`ContextParallelDispatch`) runs self-attention with Ulysses / Ring / USP over the chunks while
cross-attention stays local against the replicated text. CFG-parallel splits a batch of 2B (cond + uncond, the
sampler's batched guidance) between the two CFG ranks inside ``run_blocks`` and gathers the halves. Patch
embedding, time / text embedding and the head stay replicated (cheap), so caches and the sampler see the same
model. The DiT code itself is unchanged.
"""
from __future__ import annotations

import copy
import math
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..attention.dispatch import AttentionCall, AttentionDispatch, get_backend, warn_once
from ..lora.stack import lora_state
from .attention import usp_attention
from .groups import ParallelGroups, check_degrees, padded_length
from .windows import WindowSpread


class ContextParallelDispatch(AttentionDispatch):
    """An :class:`AttentionDispatch` that runs self-attention across the sequence-parallel ranks while the
    model's blocks run on a token chunk (``sharded`` is set by the parallel ``run_blocks``). Backend choice,
    overrides and skiparse are those of the dispatch it was built from."""

    def __init__(self, base: AttentionDispatch, groups: ParallelGroups):
        super().__init__(base.backend, overrides=base.overrides, skiparse=base.skiparse)
        self.step, self.total = base.step, base.total
        self.groups = groups
        self.length: int | None = None  # real tokens while a sharded block stack runs, else None

    def pad_multiple(self) -> int:
        """Token count multiple the sequence is padded to: sp, times lcm(k^2) of skiparse under ring."""
        g = self.groups.config
        m = g.sp
        if self.skiparse is not None and g.ring > 1:
            for k in set(self.skiparse.ks):
                if k > 1:
                    m = m * (k * k) // math.gcd(m, k * k)
        return m

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: AttentionCall) -> torch.Tensor:
        if call.kind != "self" or self.length is None:
            return super().__call__(q, k, v, call)  # cross-attention: local queries, replicated text
        g = self.groups
        backend = get_backend(self.backend_for(call))
        if g.ring_group is not None and backend.name != "sdpa":
            warn_once(f"ring-backend-{backend.name}",
                      f"ring attention computes its blocks with torch's fused attention (it needs the log-sum-exp); "
                      f"backend {backend.name!r} is used only when ring = 1")
        return usp_attention(q, k, v, length=self.length, ulysses_group=g.ulysses_group, ring_group=g.ring_group,
                             backend=backend.fn, backend_masks=backend.masks, sparse=self.sparse_plan(call))

    def replace(self, **changes) -> "ContextParallelDispatch":
        return ContextParallelDispatch(super().replace(**changes), self.groups)

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", parallel={self.groups.config.describe()!r})"


def _gather(x: torch.Tensor, group: dist.ProcessGroup, dim: int) -> torch.Tensor:
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=dim)


def _rows(text: Any, rows: slice) -> Any:
    if isinstance(text, list):  # precomputed cross-attention (k, v) per block
        return [tuple(t[rows] for t in kv) for kv in text]
    return text[rows]


def _vace_part(kwargs: dict, part) -> dict:
    """``kwargs`` with a VACE model's embedded VACE inputs (``vace``: ``[(tokens [B, L, D], scale), ...]``) cut
    by ``part`` exactly like the hidden states (docs/vace.md section 1.3)."""
    vace = kwargs.get("vace")
    if not vace:
        return kwargs
    return {**kwargs, "vace": [(part(tokens), scale) for tokens, scale in vace]}


class ContextParallelMixin:
    """Mixed in front of the model's class by :func:`context_parallel`."""

    parallel_groups: ParallelGroups
    attention: ContextParallelDispatch
    window_spread: WindowSpread | None

    @property
    def wants_batched_cfg(self) -> bool:
        """CFG-parallel needs cond and uncond in one forward (the sampler's batched guidance)."""
        return self.parallel_groups.config.cfg > 1

    def run_blocks(self, h: torch.Tensor, e0: torch.Tensor, text, freqs: torch.Tensor, attention_cache=None,
                   *args, **kwargs) -> torch.Tensor:
        """``h [B, L, D]`` (replicated on every rank) -> ``[B, L, D]`` (replicated), computed in parallel."""
        driver = getattr(self, "parallel_driver", None)
        if driver is not None:  # rank 0 of a worker pool: the workers mirror this run
            driver.publish(self, h, e0, text, freqs, attention_cache, args, kwargs)
            return driver.pool.guard(lambda: self._run_parallel(h, e0, text, freqs, None, args, kwargs))
        return self._run_parallel(h, e0, text, freqs, attention_cache, args, kwargs)

    def _run_parallel(self, h, e0, text, freqs, attention_cache, args, kwargs) -> torch.Tensor:
        g = self.parallel_groups
        run = super().run_blocks  # type: ignore[misc]
        if g.cfg_group is not None and h.shape[0] % 2 == 0:
            half = h.shape[0] // 2
            rows = slice(g.cfg_rank * half, (g.cfg_rank + 1) * half)
            e0_rows = e0[rows] if e0.shape[0] == h.shape[0] else e0
            out = self._run_sharded(run, h[rows], e0_rows, _rows(text, rows), freqs, attention_cache, args,
                                    _vace_part(kwargs, lambda t: t[rows]))
            return _gather(out, g.cfg_group, 0)
        # an odd batch (e.g. guidance 1): both CFG ranks compute it (same result, no speed-up)
        return self._run_sharded(run, h, e0, text, freqs, attention_cache, args, kwargs)

    def _run_sharded(self, run, h, e0, text, freqs, attention_cache, args, kwargs) -> torch.Tensor:
        g = self.parallel_groups
        sp = g.config.sp
        if sp == 1:
            return run(h, e0, text, freqs, attention_cache, *args, **kwargs)
        length = h.shape[1]
        lp = padded_length(length, self.attention.pad_multiple())
        chunk = lp // sp
        rows = slice(g.sp_rank * chunk, (g.sp_rank + 1) * chunk)
        pad = lp - length
        hs = F.pad(h, (0, 0, 0, pad))[:, rows]
        fs = torch.cat([freqs, freqs.new_ones((pad,) + freqs.shape[1:])])[rows] if pad else freqs[rows]
        if e0.dim() == 4:  # per-token modulation [B, L, 6, D]
            e0 = F.pad(e0, (0, 0, 0, 0, 0, pad))[:, rows]
        kwargs = _vace_part(kwargs, lambda t: F.pad(t, (0, 0, 0, pad))[:, rows])  # VACE tokens sharded like h
        self.attention.length = length
        try:
            out = run(hs, e0, text, fs, attention_cache, *args, **kwargs)
        finally:
            self.attention.length = None
        assert g.sp_group is not None
        return _gather(out, g.sp_group, 1)[:, :length]


_CLASSES: dict[type, type] = {}


def context_parallel(dit: Any, groups: ParallelGroups) -> Any:
    """A context-parallel view of ``dit`` (shares its parameters): call it exactly like the model, on every
    rank of ``groups`` with the same inputs; every rank returns the full output. With ``windows`` > 1 the
    view carries ``window_spread``, which the pipeline hands to its context windows: each window rank (a whole
    model replica) then samples its share of each step's windows.

    Ulysses needs the head count divisible by the Ulysses degree (checked here)."""
    heads = int(dit.config.num_heads)
    if heads % groups.config.ulysses:
        check_degrees(groups.config, groups.config.world_size, heads)
    base = type(dit)
    if issubclass(base, ContextParallelMixin):
        raise ValueError("this model is already context-parallel")
    cls = _CLASSES.get(base)
    if cls is None:
        cls = _CLASSES[base] = type(f"ContextParallel{base.__name__}", (ContextParallelMixin, base), {})
    lora_state(dit)  # created on the original first, so this view and LoRA views of dit share the weights' state
    par = copy.copy(dit)
    par.__class__ = cls
    par.parallel_groups = groups
    par.attention = ContextParallelDispatch(dit.attention, groups)
    par.window_spread = WindowSpread.of(groups)  # context windows across ranks (None for one window rank)
    return par
