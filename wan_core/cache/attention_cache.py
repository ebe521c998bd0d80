"""The Wan report's attention cache (section 4.4.2; FasterCache's dynamic feature reuse,
docs/algorithms.md section 4.1 (a)).

Self-attention outputs (after the output projection, before the AdaLN gate) change little between nearby
steps, so inside the window each block's self-attention is computed on anchor steps only and, on the steps in
between, linearly extrapolated in the step index from the last two anchors of the same CFG branch,
``F_new + w (F_new - F_old)`` with ``w = (i - i_new) / (i_new - i_old)`` (``extrapolate``, the default; w = 0.5
at interval 2, diffusers' FasterCache default weight), or taken as is (``reuse``: half the memory, a larger
error: ~6 dB lower PSNR against the uncached video on the demo model). Cross-attention is never reused.
Decisions depend on step indices only, so every rank of a parallel run decides the same (each keeps its own
shard of the stored outputs). Memory: two ``[B, L, D]`` tensors per block and branch that can reuse (one with
``reuse``) in the compute dtype, e.g. ~5.6 GiB (~2.8) for the 1.3B model at 832x480x81 in bf16.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .schedule import Window

__all__ = ["MODES", "AttentionCache", "AttentionScope", "Segment"]

MODES = ("reuse", "extrapolate")


@dataclass(frozen=True)
class Segment:
    """Rows ``start:stop`` of a forward's batch belong to CFG branch ``branch``."""

    branch: str
    start: int
    stop: int

    @property
    def rows(self) -> slice:
        return slice(self.start, self.stop)


@dataclass
class _Stored:
    step: int | None = None          # the anchor step whose outputs are stored
    new: dict[int, torch.Tensor] = field(default_factory=dict)
    old_step: int | None = None
    old: dict[int, torch.Tensor] = field(default_factory=dict)


class AttentionCache:
    """Per-branch store of self-attention outputs. ``evaluated(branch, step)`` tells whether the sampler will
    run ``branch`` at ``step`` (the CFG cache may not), so nothing is stored that could never be reused."""

    def __init__(self, window: Window, mode: str = "reuse", evaluated=None):
        if mode not in MODES:
            raise ValueError(f"attention cache mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.window = window
        self.mode = mode
        self.evaluated = evaluated or (lambda branch, step: True)
        self._stored: dict[str, _Stored] = {}

    def can_reuse(self, branch: str, step: int) -> bool:
        st = self._stored.get(branch)
        return self.window.reuses(step) and st is not None and st.step == self.window.anchor(step)

    def should_store(self, branch: str, step: int) -> bool:
        nxt = step + 1
        return (not self.window.reuses(step) and self.window.reuses(nxt) and self.window.anchor(nxt) == step
                and self.evaluated(branch, nxt))

    def scope(self, step: int, segments: list[Segment], count) -> AttentionScope:
        """The per-forward callable the DiT blocks use; ``count(branch, computed, reused)`` per block."""
        for seg in segments:
            if not self.can_reuse(seg.branch, step) and not self.should_store(seg.branch, step):
                self._stored.pop(seg.branch, None)  # nothing later can use it: free the memory now
            elif self.should_store(seg.branch, step):
                st = self._stored.setdefault(seg.branch, _Stored())
                if st.step != step:
                    keep = self.mode == "extrapolate" and st.step is not None and st.step == step - self.window.interval
                    st.old_step, st.old = (st.step, st.new) if keep else (None, {})
                    st.step, st.new = step, {}
        return AttentionScope(self, step, segments, count)

    def put(self, branch: str, step: int, layer: int, out: torch.Tensor) -> None:
        st = self._stored.get(branch)
        if st is not None and st.step == step:
            st.new[layer] = out

    def estimate(self, branch: str, step: int, layer: int) -> torch.Tensor:
        st = self._stored[branch]
        new = st.new[layer]
        if self.mode == "reuse" or st.step is None or st.old_step is None or layer not in st.old:
            return new
        w = (step - st.step) / (st.step - st.old_step)
        return (new.float() + w * (new.float() - st.old[layer].float())).to(new.dtype)

    def clear(self) -> None:
        self._stored.clear()


class AttentionScope:
    """``(layer, h, compute) -> out`` for one forward: reused rows come from the store, the others from
    ``compute(h_rows)``; outputs of anchor steps are stored. ``h`` ``[B, L, D]`` -> ``[B, L, D]``."""

    def __init__(self, cache: AttentionCache, step: int, segments: list[Segment], count):
        self.cache = cache
        self.step = step
        self.segments = segments
        self.count = count
        self.reuse = {s.branch: cache.can_reuse(s.branch, step) for s in segments}
        self.store = {s.branch: cache.should_store(s.branch, step) for s in segments}

    def __call__(self, layer: int, h: torch.Tensor, compute) -> torch.Tensor:
        segs = self.segments
        fresh = [s for s in segs if not self.reuse[s.branch]]
        if len(fresh) == len(segs):
            out = compute(h)
            parts = {s.branch: out[s.rows] for s in segs}
        else:
            parts = {s.branch: self.cache.estimate(s.branch, self.step, layer) for s in segs if self.reuse[s.branch]}
            for s in fresh:  # at most one: a batched forward where only one branch reuses
                parts[s.branch] = compute(h[s.rows])
            out = torch.cat([parts[s.branch] for s in segs]) if len(segs) > 1 else parts[segs[0].branch]
        for s in segs:
            if s in fresh and self.store[s.branch]:
                part = parts[s.branch]
                self.cache.put(s.branch, self.step, layer, part.clone() if len(segs) > 1 else part)
            self.count(s.branch, int(s in fresh), int(s not in fresh))
        return out
