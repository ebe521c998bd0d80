"""The cache patch for ComfyUI's native Wan model: ``wan_core.cache``'s policies driven from ComfyUI's wrappers.

:class:`NativeCache` holds a ``CacheConfig``; per sampling run it starts a :class:`NativeCacheRun` (the
``OUTER_SAMPLE`` wrapper, :func:`sample_wrapper`) that drives ``wan_core.cache``'s policies from the
``CALC_COND_BATCH`` wrapper (the CFG cache), the ``DIFFUSION_MODEL`` wrapper (EasyCache; the TeaCache / MagCache
decisions) and block replace patches (TeaCache / MagCache reuse of the block-stack residual), and reports the DiT
evaluations skipped. State is kept per context window (:class:`NativeCacheState`, keyed by the frames of
``transformer_options["context_window"]``, which ComfyUI's context-window handler sets; one for the whole video
without windows) and, inside it, per branch (ComfyUI's ``cond_or_uncond``: 0 = cond, 1 = uncond).
:class:`CacheAttention` is the ``wan`` preset's attention cache. The run of the sampling in progress sits in
``transformer_options[RUN_KEY]``. Plain Python (no ``comfy`` import): tested without ComfyUI.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from wan_core.cache import CacheConfig, CacheSession, start_session
from wan_core.cache.attention_cache import Segment
from wan_core.cache.report import COMPUTED, REUSED, WindowCacheReport
from wan_core.config import DiTConfig
from wan_core.dit.embeddings import sinusoidal_embedding
from wan_core.sampling.hooks import BRANCH_COND, BRANCH_UNCOND

from .attention_patch import CACHE_CALLS_KEY, CALLS_KEY, NativeAttention, transformer_options_of

RUN_KEY = "wancore_cache"  # transformer_options entry: the NativeCacheRun of the sampling run in progress


def step_of(sigma: float, sample_sigmas: Sequence[float]) -> int:
    """The sampling step whose sigma is closest to ``sigma`` (``sample_sigmas`` = the run's steps + 1 values)."""
    sig = [float(s) for s in sample_sigmas]
    steps = max(len(sig) - 1, 1)
    return min(range(steps), key=lambda i: abs(sig[i] - sigma))


def branch_name(cond_or_uncond: int) -> str:
    return BRANCH_UNCOND if cond_or_uncond == 1 else BRANCH_COND


def native_config(diffusion_model) -> DiTConfig:
    """A ``DiTConfig`` with the native model's widths (so the published TeaCache/MagCache tables and a
    calibration can recognise it)."""
    d = diffusion_model
    dim = int(d.dim)
    blocks = d.blocks
    try:
        ffn = int(blocks[0].ffn[0].weight.shape[0])
    except (AttributeError, IndexError, TypeError):
        ffn = 4 * dim
    try:
        text_dim = int(d.text_embedding[0].weight.shape[1])
    except (AttributeError, IndexError, TypeError):
        text_dim = 4096
    return DiTConfig(dim=dim, ffn_dim=ffn, num_heads=int(d.num_heads), num_layers=len(blocks),
                     freq_dim=int(getattr(d, "freq_dim", 256)), text_dim=text_dim,
                     in_dim=int(d.patch_embedding.weight.shape[1]), out_dim=int(getattr(d, "out_dim", 16)),
                     name="native")


class NativeDiT:
    """What ``start_session`` needs to know about a native model: its config, and that it runs the session's
    DiT-level caches (``cache_hooks``: this module's patches drive the session, not a WanCore forward)."""

    cache_hooks = True

    def __init__(self, config: DiTConfig):
        self.config = config


class NativeCache:
    """The cache node's setting; :meth:`start` makes the per-run state (a fresh one for every sampling run)."""

    def __init__(self, config: CacheConfig):
        self.config = config

    @property
    def is_noop(self) -> bool:
        return self.config.method in ("off", "exact")

    @property
    def uses_blocks(self) -> bool:
        return self.config.method in ("teacache", "magcache", "calibrate")

    @property
    def uses_attention(self) -> bool:
        """The ``wan`` preset's attention cache: an attention override on the self-attention calls."""
        return self.config.method == "wan" and self.config.attention != "off"

    def native_config(self) -> CacheConfig:
        return self.config

    def start(self, model_config: DiTConfig, steps: int, guidance: float) -> NativeCacheRun:
        return NativeCacheRun(self, model_config, steps, guidance)


def time_embeddings(diffusion_model, timestep: torch.Tensor, x: torch.Tensor):
    """``e [B, D]`` and ``e0 [B, 6, D]`` from the native model's own time layers (TeaCache's indicators)."""
    if diffusion_model is None:
        raise ValueError("cache: the native model is needed for the TeaCache/MagCache decisions")
    t = torch.as_tensor(timestep, device=x.device).flatten()
    b = x.shape[0]
    if t.numel() == 1:
        t = t.expand(b)
    elif t.numel() != b and t.numel() % b == 0:  # per-token timesteps (Wan 2.2 TI2V): the row's largest
        t = t.view(b, -1).amax(1)
    s = sinusoidal_embedding(t, int(getattr(diffusion_model, "freq_dim", 256)))
    dtype = diffusion_model.patch_embedding.weight.dtype
    with torch.no_grad():
        e = diffusion_model.time_embedding(s.to(dtype)).float()
        e0 = diffusion_model.time_projection(e.to(dtype)).float().unflatten(1, (6, -1))
    return e, e0


class NativeCacheState:
    """The cache of one context window (or of the whole video): a ``CacheSession`` of ``wan_core.cache``
    driven from ComfyUI's wrappers, with its own step counter and per-forward bookkeeping."""

    def __init__(self, cache: NativeCache, model_config: DiTConfig, steps: int, guidance: float):
        self.cache = cache
        self.steps = steps
        self.session: CacheSession = start_session(cache.native_config(), NativeDiT(model_config), steps, guidance)
        self.session.report.preset = cache.config.method
        self.step = -1
        # per forward: the rows of each branch, whether each computes, the block stack's input
        self._segments: list[Segment] = []
        self._decide: list[bool] = []
        self._h_in: torch.Tensor | None = None
        self.attention_scope = None  # the wan preset's attention cache for the forward in progress

    @property
    def report(self):
        return self.session.report

    def _begin(self, step: int, sigma: float) -> None:
        if step != self.step:
            self.step = step
            self.session.begin_step(step, self.steps, sigma)
            if self.session.cfg_cache is not None:
                self.session.cfg_cache.begin_step(step, self.steps, sigma)

    def _step_from(self, sigmas, sample_sigmas) -> tuple[int, float]:
        sigma = float(torch.as_tensor(sigmas).flatten()[0])
        if sample_sigmas is None:
            return max(self.step, 0), sigma
        return step_of(sigma, torch.as_tensor(sample_sigmas).flatten().tolist()), sigma

    # ---------------------------------------------------------------- CALC_COND_BATCH: the CFG cache
    def calc_cond_batch(self, executor: Callable, model, conds: list, x_in: torch.Tensor, timestep: torch.Tensor,
                        model_options: dict, *args, **kwargs):
        to = model_options.get("transformer_options", {})
        step, sigma = self._step_from(timestep, to.get("sample_sigmas"))
        self._begin(step, sigma)
        cfg = self.session.cfg_cache
        if cfg is None or len(conds) != 2 or conds[0] is None or conds[1] is None or sigma <= 0:
            return executor(model, conds, x_in, timestep, model_options, *args, **kwargs)
        s = torch.as_tensor(timestep, dtype=torch.float32, device=x_in.device).reshape(-1, *[1] * (x_in.dim() - 1))
        if cfg.skip_uncond():  # marks the uncond pass "estimated" in the report
            out = executor(model, [conds[0], None], x_in, timestep, model_options, *args, **kwargs)
            v_cond = (x_in.float() - out[0].float()) / s
            v_uncond = cfg.estimate_uncond(v_cond)
            return [out[0], (x_in.float() - v_uncond * s).to(out[0].dtype)]
        out = executor(model, conds, x_in, timestep, model_options, *args, **kwargs)
        cfg.record((x_in.float() - out[0].float()) / s, (x_in.float() - out[1].float()) / s)
        return out

    # ---------------------------------------------------------------- DIFFUSION_MODEL: EasyCache, decisions
    def diffusion_model(self, executor: Callable, *args, **kwargs):
        """The native forward ``(x, timestep, context, ..., transformer_options)``, maybe skipped (EasyCache);
        decides per branch whether the block stack computes (TeaCache / MagCache)."""
        x, timestep = args[0], args[1]
        to = transformer_options_of(args, kwargs)
        step, sigma = self._step_from(to.get("sigmas", timestep / 1000.0), to.get("sample_sigmas"))
        self._begin(step, sigma)
        kinds = list(to.get("cond_or_uncond") or [0])
        b = x.shape[0]
        if len(kinds) > 1 and b % len(kinds) == 0:
            rows = b // len(kinds)
            segs = [Segment(branch_name(c), i * rows, (i + 1) * rows) for i, c in enumerate(kinds)]
        else:
            segs = [Segment(branch_name(kinds[0]), 0, b)]
        report = self.session.report
        pol = self.session.model_policy
        out_dim = int(getattr(getattr(executor, "class_obj", None), "out_dim", x.shape[1]))
        xo = x[:, :out_dim]  # I2V models take mask and image channels after the latent ones
        # the cond branch decides for the step, as in WanCore's sampler (ComfyUI batches uncond first)
        lead = next((s for s in segs if s.branch == BRANCH_COND), segs[0])
        if pol is not None and pol.skip(step, lead.branch, xo[lead.rows], [s.branch for s in segs]):
            for s in segs:
                report.mark(step, s.branch, REUSED)
            return torch.cat([pol.reuse(s.branch, xo[s.rows]) for s in segs]).to(x.dtype)
        block_pol = self.session.block_policy
        if block_pol is not None:
            e, e0 = time_embeddings(getattr(executor, "class_obj", None), timestep, x)
            decide = [block_pol.should_compute(s.branch, step, e[s.rows], e0[s.rows]) for s in segs]
        else:
            decide = [True] * len(segs)
        self._segments, self._decide, self._h_in = segs, decide, None
        self.attention_scope = self.session._attention_scope(segs) if all(decide) else None
        if not any(decide) and kwargs.get("vace_strength") is not None:
            # ComfyUI's VACE model adds each VACE block's hint after its main block, outside the block patches:
            # the reused residual holds the hints already, so they must not be added again
            kwargs = {**kwargs, "vace_strength": [0.0] * len(kwargs["vace_strength"])}
        try:
            out = executor(*args, **kwargs)
        finally:
            self._segments, self._h_in, self.attention_scope = [], None, None
        if pol is not None:
            for s in segs:
                pol.computed(s.branch, xo[s.rows], out[s.rows])
        for s, compute in zip(segs, decide):
            report.mark(step, s.branch, COMPUTED if compute else REUSED)
        if not report.tokens:
            report.tokens = int(math.prod(x.shape[2:]) // 4)
        return out

    # ---------------------------------------------------------------- block replace: residual reuse
    def block(self, index: int, args: dict, original: Callable[[dict], dict]) -> dict:
        """``patches_replace["dit"][("double_block", index)]``: the block stack with TeaCache/MagCache reuse."""
        pol = self.session.block_policy
        to = args.get("transformer_options", {})
        # the model's own block count: ComfyUI 0.3.64's Wan forward sets no "total_blocks"
        last = int(getattr(self.session.dit_config, "num_layers", 0) or to.get("total_blocks", index + 1)) - 1
        if pol is None or not self._segments:
            return original(args)
        if index == 0:
            self._h_in = args["img"]
        if not any(self._decide):  # every branch reuses: the first block adds the residual, the rest pass
            if index == 0:
                h = args["img"]
                res = torch.cat([pol.residual(s.branch).to(h.dtype) for s in self._segments])
                return {"img": h + res}
            return {"img": args["img"]}
        out = original(args)
        if index == last and self._h_in is not None:
            h_in, h = self._h_in, out["img"]
            parts = []
            for s, compute in zip(self._segments, self._decide):
                if compute:
                    pol.computed(s.branch, self.step, (h[s.rows] - h_in[s.rows]).float())
                    parts.append(h[s.rows])
                else:  # this branch reuses though the other one had to compute
                    parts.append(h_in[s.rows] + pol.residual(s.branch).to(h.dtype))
            out = dict(out, img=torch.cat(parts) if len(parts) > 1 else parts[0])
            self._h_in = None
        return out

    def finish(self) -> None:
        """Complete the report and free the stored tensors."""
        self.session.finish()


Window = tuple[int, ...]


def window_of(to: dict, x: torch.Tensor | None = None) -> Window | None:
    """The latent frames of the context window a call belongs to, or None (no context windows).

    ComfyUI (>= 0.3.6x, ``comfy/context_windows.py``) puts the window it is about to evaluate in
    ``transformer_options["context_window"]`` (an ``IndexListContextWindow``: ``index_list``, the frames along
    ``dim``) before each window's ``calc_cond_batch``, and never removes it; ``x`` (the call's latent) guards
    against a stale entry: a window counts only when ``x`` holds exactly its frames."""
    window = to.get("context_window")
    frames = getattr(window, "index_list", None)
    if frames is None:
        return None
    dim = int(getattr(window, "dim", 2))
    if x is not None and (x.dim() <= dim or x.shape[dim] != len(frames)):
        return None
    return tuple(int(f) for f in frames)


class NativeCacheRun:
    """One sampling run: one :class:`NativeCacheState` per context window (ComfyUI's ``WanContextWindowsManual``
    and the other context-window nodes), or one for the whole video without windows.

    ComfyUI evaluates every window at every step (a sliding schedule brings other windows on other steps), each
    with its own model calls, so a state must never serve another window: EasyCache's stored output change,
    TeaCache/MagCache's block residual, the CFG cache's guidance difference and the attention cache's outputs
    are those of the window's own frames. A window first seen at a later step starts afresh (computes). The
    report counts per window, like the WanCore sampler's (``WindowCacheReport``)."""

    def __init__(self, cache: NativeCache, model_config: DiTConfig, steps: int, guidance: float):
        self.cache, self.model_config, self.steps, self.guidance = cache, model_config, steps, guidance
        # raises now (e.g. no published table for this model) rather than inside the first window
        self.states: dict[Window | None, NativeCacheState] = {None: self._new_state()}
        self._used: set[Window | None] = set()
        self.active: NativeCacheState | None = None  # the state of the DiT forward in progress

    def _new_state(self) -> NativeCacheState:
        return NativeCacheState(self.cache, self.model_config, self.steps, self.guidance)

    def state(self, window: Window | None) -> NativeCacheState:
        """The state of ``window`` (None: the whole video), made on its first call."""
        self._used.add(window)
        if window not in self.states:
            self.states[window] = self._new_state()
        return self.states[window]

    @property
    def windows(self) -> list[Window]:
        """The context windows that ran, in the order they first ran."""
        return [w for w in self.states if w is not None and w in self._used]

    @property
    def report(self):
        """The whole video's ``CacheReport``; under context windows a ``WindowCacheReport`` over the windows."""
        windows = self.windows
        if not windows:
            return self.states[None].report
        return WindowCacheReport({w: self.states[w].report for w in windows})

    @property
    def attention_scope(self):
        return None if self.active is None else self.active.attention_scope

    def calc_cond_batch(self, executor: Callable, model, conds: list, x_in: torch.Tensor, timestep: torch.Tensor,
                        model_options: dict, *args, **kwargs):
        window = window_of(model_options.get("transformer_options", {}), x_in)
        return self.state(window).calc_cond_batch(executor, model, conds, x_in, timestep, model_options,
                                                  *args, **kwargs)

    def diffusion_model(self, executor: Callable, *args, **kwargs):
        state = self.state(window_of(transformer_options_of(args, kwargs), args[0]))
        outer, self.active = self.active, state
        try:
            return state.diffusion_model(executor, *args, **kwargs)
        finally:
            self.active = outer

    def block(self, index: int, args: dict, original: Callable[[dict], dict]) -> dict:
        if self.active is None:
            return original(args)
        return self.active.block(index, args, original)

    def finish(self) -> str:
        """Complete the reports, free the stored tensors, return the report's text (a ``calibrate`` run under
        windows shows the first window's calibration: each window's is of the same model and steps)."""
        for state in self.states.values():
            state.finish()
        text = self.report.text()
        if self.windows:
            cal = next((s.report.calibration for w, s in self.states.items()
                        if w is not None and s.report.calibration is not None), None)
            if cal is not None:
                text += "\ncalibration (first window; paste into WanCoreCache's calibration input): " + cal.to_json()
        return text


class CacheAttention:
    """The cache node's ``optimized_attention_override``: the ``wan`` preset's attention cache. A block's
    self-attention (its first attention call over the video grid) is computed, stored on anchor steps, or
    estimated from the stored outputs of its branch (``wan_core.cache.AttentionCache``; the outputs before
    the output projection, which is affine, so extrapolating them is extrapolating the projected ones).
    ``inner``: the override that computes (WanCore Native Attention's, another pack's), else ComfyUI's ``func``."""

    wancore_cache_override = True

    def __init__(self, inner: Callable | None = None):
        self.inner = inner

    def __call__(self, func: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
                 mask: torch.Tensor | None = None, transformer_options: dict | None = None,
                 **kwargs: Any) -> torch.Tensor:
        def attend(qq: torch.Tensor, kk: torch.Tensor, vv: torch.Tensor) -> torch.Tensor:
            if self.inner is not None:
                return self.inner(func, qq, kk, vv, heads=heads, mask=mask, transformer_options=transformer_options,
                                  **kwargs)
            return func(qq, kk, vv, heads, mask=mask, transformer_options=transformer_options, **kwargs)

        to = transformer_options if isinstance(transformer_options, dict) else {}
        run = to.get(RUN_KEY)
        scope = getattr(run, "attention_scope", None)
        grid, block = to.get("grid_sizes"), to.get("block_index")
        if scope is None or grid is None or block is None or mask is not None or kwargs.get("skip_reshape"):
            return attend(q, k, v)
        first = NativeAttention._call_number(to, CACHE_CALLS_KEY) == 0
        if not first or q.shape[1] != k.shape[1] or k.shape[1] != math.prod(int(g) for g in grid):
            return attend(q, k, v)
        rows = torch.arange(q.shape[0], device=q.device)  # the scope slices "h" by branch: row numbers
        called = []

        def compute(r: torch.Tensor) -> torch.Tensor:
            called.append(True)
            if r.numel() == q.shape[0]:
                return attend(q, k, v)
            return attend(q[r], k[r], v[r])

        out = scope(int(block), rows, compute)
        if not called:  # an inner NativeAttention did not see this block's self-attention: count it for it
            NativeAttention._call_number(to, CALLS_KEY)
        return out



# ---------------------------------------------------------------------------------------------- wrappers
# Generic ``fn(executor, *args, **kwargs)`` functions of ComfyUI's ``WrappersMP`` and block patches;
# ``patcher.py`` registers them on a ModelPatcher clone.


def guidance_of(guider) -> float:
    """The CFG scale of a ComfyUI guider; 2.0 (both branches) when it is not a single number."""
    try:
        return float(guider.cfg)
    except (AttributeError, TypeError, ValueError):
        return 2.0


def sample_wrapper(cache: NativeCache, clone_options: Callable[[dict], dict], show: Callable[[str], None]):
    """``OUTER_SAMPLE``: a fresh :class:`NativeCacheRun` per sampling run, its report shown afterwards."""

    def wrapper(executor, *args, **kwargs):
        guider = executor.class_obj
        sigmas = args[3] if len(args) > 3 else kwargs["sigmas"]
        run = cache.start(native_config(guider.model_patcher.model.diffusion_model), len(sigmas) - 1,
                          guidance_of(guider))
        original = guider.model_options
        guider.model_options = clone_options(original)
        guider.model_options.setdefault("transformer_options", {})[RUN_KEY] = run
        try:
            return executor(*args, **kwargs)
        finally:
            guider.model_options = original
            show(run.finish())

    return wrapper


def calc_cond_batch_wrapper(executor, *args, **kwargs):
    """``CALC_COND_BATCH``: ``(model, conds, x_in, timestep, model_options)``; the CFG cache."""
    model_options = args[4] if len(args) > 4 else kwargs.get("model_options", {})
    run = model_options.get("transformer_options", {}).get(RUN_KEY)
    if run is None:
        return executor(*args, **kwargs)
    return run.calc_cond_batch(executor, *args, **kwargs)


def diffusion_model_wrapper(executor, *args, **kwargs):
    """``DIFFUSION_MODEL``: the native forward, maybe skipped or with residual reuse."""
    run = transformer_options_of(args, kwargs).get(RUN_KEY)
    if run is None:
        return executor(*args, **kwargs)
    return run.diffusion_model(executor, *args, **kwargs)



def block_patch(index: int, previous: Callable | None = None) -> Callable[[dict, dict], dict]:
    """``patches_replace["dit"][("double_block", index)]``; ``previous``: a replace patch already installed
    there (another pack's), which then stands for the block."""

    def patch(args: dict, extra: dict) -> dict:
        if previous is not None:
            def original(a: dict) -> dict:
                return previous(a, extra)
        else:
            original = extra["original_block"]
        run = args.get("transformer_options", {}).get(RUN_KEY)
        if run is None:
            return original(args)
        return run.block(index, args, original)

    patch.wancore_previous = previous  # type: ignore[attr-defined]
    return patch

