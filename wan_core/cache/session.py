"""One cached sampling run: the object the sampler and the DiT talk to.

``start_session(cache, dit, steps, guidance)`` resolves a ``CacheConfig`` for the model and step count (every
error is raised here, before the first step) and returns a ``CacheSession``. The sampler passes it to
``ClassifierFreeGuidance`` as its ``branch_cache`` (and ``session.cfg_cache`` as its ``cfg_cache``), and runs
inside ``with session.attached(dit):``, which sets ``dit.cache`` so the DiT's forward consults the session:

* ``reuse_output`` - EasyCache may return the whole output without running the model;
* ``run_blocks`` - the text-KV cache supplies cross-attention K/V, TeaCache / MagCache may reuse the block
  stack's residual, the attention cache may reuse self-attention outputs;
* ``record_output`` - EasyCache learns from the computed output.

A forward's batch is split into per-branch segments (a batched CFG forward holds ``[cond; uncond]``), so every
branch keeps its own state and takes the same decisions batched or not; when only one branch of a batched
forward can reuse, the other one is computed on its own rows. ``session.report`` says what happened.
"""
from __future__ import annotations

import contextlib

import torch

from ..sampling.hooks import BRANCH_BATCHED, BRANCH_COND, BRANCH_UNCOND
from .attention_cache import AttentionCache, Segment
from .calibration import Calibrator, published_model
from .cfg_cache import CFGCache
from .config import CacheConfig, as_config
from .easycache import EasyCache
from .magcache import MagCache
from .report import COMPUTED, ESTIMATED, REUSED, CacheReport
from .runners import METHOD_RUNNERS, RunFacts
from .teacache import TeaCache
from .text_kv import TextKVCache

__all__ = ["CacheSession", "branches_for", "start_session"]


def _vace_kw(vace, rows: slice) -> dict:
    """``run_blocks``' VACE keyword for batch rows ``rows`` (none for a model without VACE: other models keep
    their ``run_blocks`` signature)."""
    return {} if vace is None else {"vace": [(tokens[rows], scale) for tokens, scale in vace]}


def branches_for(guidance: float) -> tuple[str, ...]:
    """The passes a step needs: cond only at guidance 1, uncond only at 0, else both."""
    if guidance == 1:
        return (BRANCH_COND,)
    if guidance == 0:
        return (BRANCH_UNCOND,)
    return (BRANCH_COND, BRANCH_UNCOND)


def _has_hooks(dit) -> bool:
    """Whether ``dit`` runs the session's DiT-level hooks: a model that says so (``cache_hooks``, e.g. an adapter
    whose own patches drive the session, as the nodes' native one does), or a WanCore DiT (a ``cache`` slot and
    ``run_blocks``)."""
    if dit is None:
        return False
    declared = getattr(dit, "cache_hooks", None)
    if declared is not None:
        return bool(declared)
    return hasattr(dit, "cache") and callable(getattr(dit, "run_blocks", None))


def start_session(cache, dit, steps: int, guidance: float) -> CacheSession:
    """Resolve ``cache`` (None = ``exact``, a preset name or a ``CacheConfig``) for ``dit`` and ``steps``;
    raises ``ValueError`` (one line naming the setting and the valid values) before anything runs. The
    method's own builder (``runners.METHOD_RUNNERS``) puts its parts on the session."""
    config = as_config(cache)
    m = config.method
    runner = METHOD_RUNNERS[m]
    hooks = _has_hooks(dit)
    dit_config = getattr(dit, "config", None) if hooks else None
    if runner.needs_dit(config) and not hooks:
        raise ValueError(f"cache {m}: needs a WanCore DiT (wan_core.load_dit), got {type(dit).__name__}; use "
                         f"'exact' or 'off' with other models")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"cache {m}: steps={steps!r} must be an integer >= 1")
    branches = branches_for(guidance)
    report = CacheReport(m, steps, branches, num_layers=getattr(dit_config, "num_layers", 0),
                         dim=getattr(dit_config, "dim", 0), ffn_dim=getattr(dit_config, "ffn_dim", 0),
                         text_len=getattr(dit_config, "text_len", 512))
    session = CacheSession(report, config, text_kv=TextKVCache() if (config.uses_text_kv and hooks) else None,
                           uses_dit=hooks and m != "off")
    cal = config.calibration
    if cal is not None and dit_config is not None:
        cal.check_model(dit_config, f"cache {m}: calibration")
    runner.build(session, RunFacts(config, steps, branches, dit_config, published_model(dit_config), cal))
    session.dit_config = dit_config
    return session


class CacheSession:
    """State of one cached run: ``StepHook`` + ``BranchCache`` for the sampler, hooks for the DiT."""

    def __init__(self, report: CacheReport, config: CacheConfig, text_kv: TextKVCache | None = None,
                 uses_dit: bool = False):
        self.report = report
        self.config = config
        self.text_kv = text_kv
        self.uses_dit = uses_dit
        self.cfg_cache: CFGCache | None = None
        self.attention: AttentionCache | None = None
        self.block_policy: TeaCache | MagCache | Calibrator | None = None  # may reuse the block-stack residual
        self.model_policy: EasyCache | None = None
        self.calibrator: Calibrator | None = None
        self.dit_config = None
        self.step = -1
        self._branch: str | None = None
        self._segments: list[Segment] | None = None
        self._marked: set[str] = set()

    # ---------------------------------------------------------------- sampler side
    def begin_step(self, step: int, num_steps: int, sigma: float) -> None:
        self.step = step

    @contextlib.contextmanager
    def branch(self, name: str):
        self._branch, self._segments, self._marked = name, None, set()
        try:
            yield
        finally:
            for b in ((BRANCH_COND, BRANCH_UNCOND) if name == BRANCH_BATCHED else (name,)):
                if b not in self._marked:  # a model without the hooks, or a forward that ran plainly
                    self.report.mark(self.step, b, COMPUTED)
            self._branch = None

    def evaluates(self, branch: str, step: int) -> bool:
        """Whether the sampler will run ``branch`` at ``step`` (the CFG cache estimates some uncond passes)."""
        if branch not in self.report.branches:
            return False
        return branch != BRANCH_UNCOND or self.cfg_cache is None or self.cfg_cache.computes_uncond(step)

    def _estimated(self, step: int) -> None:
        self.report.mark(step, BRANCH_UNCOND, ESTIMATED)

    @contextlib.contextmanager
    def attached(self, dit):
        """Make ``dit`` consult this session during the run (restored afterwards); the report is completed
        and the stored tensors are freed on exit."""
        try:
            with self.active_on(dit):
                yield self
        finally:
            self.finish()

    @contextlib.contextmanager
    def active_on(self, dit):
        """``attached`` without the end of the run: ``dit`` consults this session inside the block and its state
        survives it (context windows switch one model between the windows' sessions within a step; each
        session is finished once, after the run)."""
        prev = dit.cache if self.uses_dit else None
        if self.uses_dit:
            dit.cache = self
        try:
            yield self
        finally:
            if self.uses_dit:
                dit.cache = prev

    def finish(self) -> None:
        if self.text_kv is not None:
            self.report.text_kv_computed, self.report.text_kv_reused = self.text_kv.computed, self.text_kv.reused
            self.text_kv.clear()
        if self.calibrator is not None and self.dit_config is not None and self.report.calibration is None:
            self.report.calibration = self.calibrator.result(self.dit_config, self.report.steps)
        for part in (self.cfg_cache, self.attention):
            if part is not None:
                part.clear()
        self.block_policy = self.model_policy = None  # drop the stored residuals

    # ---------------------------------------------------------------- DiT side
    def _mark(self, segments: list[Segment], status: str) -> None:
        for s in segments:
            self.report.mark(self.step, s.branch, status)
            self._marked.add(s.branch)

    def _split(self, batch: int) -> list[Segment]:
        name = self._branch or BRANCH_COND
        if name == BRANCH_BATCHED:
            if batch % 2:
                raise ValueError(f"a batched cond+uncond forward needs an even batch, got {batch}")
            half = batch // 2
            return [Segment(BRANCH_COND, 0, half), Segment(BRANCH_UNCOND, half, batch)]
        return [Segment(name, 0, batch)]

    def reuse_output(self, dit, x: torch.Tensor, t) -> torch.Tensor | None:
        """Called first in the DiT forward with ``x [B, 16, F, H, W]``; a tensor = the forward's output."""
        segs = self._segments = self._split(x.shape[0])
        pol = self.model_policy
        if pol is None or not pol.skip(self.step, segs[0].branch, x[segs[0].rows], [s.branch for s in segs]):
            return None
        self._mark(segs, REUSED)
        return torch.cat([pol.reuse(s.branch, x[s.rows]) for s in segs])

    def run_blocks(self, dit, h: torch.Tensor, e: torch.Tensor, e0: torch.Tensor, context, freqs,
                   clip_tokens=None, vace=None) -> torch.Tensor:
        """The block stack with the caches: ``h [B, L, D]``, ``e [B, D]``, ``e0 [B, 6, D]`` -> ``[B, L, D]``.
        ``clip_tokens``: the image tokens of a Wan 2.1 I2V model (part of its cross-attention context); ``vace``:
        a VACE model's embedded VACE inputs (``wan_core.dit.vace``). The VACE hints are part of the block stack: a
        reused residual includes them (the VACE context is the same at every step, docs/vace.md section 1)."""
        b = h.shape[0]
        segs = self._segments or self._split(b)
        self.report.tokens = h.shape[1]
        if self.text_kv is not None:
            text = self.text_kv.states(dit, context, b, clip_tokens)
        elif clip_tokens is not None:
            text = dit.embed_context(context, b, clip_tokens)
        else:
            text = dit.embed_text(context, b)
        pol = self.block_policy
        decide = [True if pol is None else pol.should_compute(s.branch, self.step, e[s.rows], e0[s.rows])
                  for s in segs]
        if all(decide):
            out = dit.run_blocks(h, e0, text, freqs, self._attention_scope(segs), **_vace_kw(vace, slice(None)))
            if pol is not None:
                for s in segs:
                    pol.computed(s.branch, self.step, out[s.rows] - h[s.rows])
        else:
            assert pol is not None  # only a policy says "reuse"
            parts = []
            for s, compute in zip(segs, decide):
                hs = h[s.rows]
                if compute:
                    sub = [tuple(t[s.rows] for t in kv) for kv in text] if isinstance(text, list) else text[s.rows]
                    local = [Segment(s.branch, 0, s.stop - s.start)]
                    o = dit.run_blocks(hs, e0[s.rows], sub, freqs, self._attention_scope(local),
                                       **_vace_kw(vace, s.rows))
                    pol.computed(s.branch, self.step, o - hs)
                else:
                    o = hs + pol.residual(s.branch)
                parts.append(o)
            out = torch.cat(parts) if len(parts) > 1 else parts[0]
        for s, compute in zip(segs, decide):
            self._mark([s], COMPUTED if compute else REUSED)
        return out

    def record_output(self, dit, x: torch.Tensor, out: torch.Tensor) -> None:
        """Called last in a computed forward: ``x`` its input, ``out`` its velocity ``[B, 16, F, H, W]``."""
        if self.model_policy is not None:
            for s in self._segments or self._split(x.shape[0]):
                self.model_policy.computed(s.branch, x[s.rows], out[s.rows])

    def _attention_scope(self, segments: list[Segment]):
        if self.attention is None:
            return None
        step = self.step
        return self.attention.scope(step, segments,
                                    lambda branch, c, r: self.report.count_attention(step, branch, c, r))
