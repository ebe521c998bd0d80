"""WanCore speed-ups as ``MODEL -> MODEL`` patches for ComfyUI's native Wan model (docs/native_patches.md).

Everything here is plain Python (no ``comfy`` import), so it is tested without ComfyUI; ``host.py`` installs
it on a ComfyUI ``ModelPatcher`` clone:

* :class:`NativeAttention` is ComfyUI's ``optimized_attention_override``: called as
  ``override(func, q, k, v, heads, mask=None, ..., transformer_options=...)`` instead of the backend ``func``
  ComfyUI would have run, with q/k/v ``[B, L, heads*d]`` (RoPE already applied). It runs ``wan_core``'s
  attention dispatch: the chosen backend, and skiparse on the blocks the schedule makes sparse (self-attention
  only). The block index and the token grid come from ``transformer_options`` (``block_index``,
  ``total_blocks``, ``grid_sizes``, set by the native Wan forward); the first attention call of a block is its
  self-attention (a block replace patch, :func:`attention_block_patch`, resets the per-block call counter and
  sets the block number; :func:`grid_wrapper` sets the grid, for ComfyUI versions whose forward does not).
* :class:`NativeCache` holds a ``CacheConfig``; per sampling run it starts a :class:`NativeCacheRun` (the
  ``OUTER_SAMPLE`` wrapper) that drives ``wan_core.cache``'s policies from the ``CALC_COND_BATCH`` wrapper (the
  CFG cache), the ``DIFFUSION_MODEL`` wrapper (EasyCache; the TeaCache / MagCache decisions) and block replace
  patches (TeaCache / MagCache reuse of the block-stack residual), with per-branch state keyed by ComfyUI's
  ``cond_or_uncond`` (0 = cond, 1 = uncond), and reports the DiT evaluations skipped.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from wan_core.attention import get_backend
from wan_core.attention.skiparse import SCHEDULES, SkiparseSchedule, skiparse_attention, skiparse_schedule
from wan_core.cache import CacheConfig, CacheSession, start_session
from wan_core.cache.attention_cache import Segment
from wan_core.cache.report import COMPUTED, REUSED
from wan_core.config import DiTConfig
from wan_core.dit.embeddings import sinusoidal_embedding
from wan_core.sampling.hooks import BRANCH_COND, BRANCH_UNCOND

NATIVE_BACKENDS = ("sdpa", "sage", "int8")
CALLS_KEY = "wancore_attention_calls"  # transformer_options entry: [block_index, attention calls in that block]
CACHE_CALLS_KEY = "wancore_cache_calls"  # the same count for the cache's attention override
RUN_KEY = "wancore_cache"  # transformer_options entry: the NativeCacheRun of the sampling run in progress


# ---------------------------------------------------------------------------------------------- attention


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


# ---------------------------------------------------------------------------------------------- cache


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


class _NativeDiT:
    """What ``start_session`` needs to know about a model: its config and that it has the hooks."""

    def __init__(self, config: DiTConfig):
        self.config = config
        self.cache = None

    def run_blocks(self, *args, **kwargs):  # pragma: no cover - never called: the patches do the work
        raise NotImplementedError


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


class NativeCacheRun:
    """One sampling run: the ``CacheSession`` of ``wan_core.cache`` driven from ComfyUI's wrappers."""

    def __init__(self, cache: NativeCache, model_config: DiTConfig, steps: int, guidance: float):
        self.cache = cache
        self.steps = steps
        self.session: CacheSession = start_session(cache.native_config(), _NativeDiT(model_config), steps, guidance)
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
            e, e0 = self.time_embeddings(getattr(executor, "class_obj", None), timestep, x)
            decide = [block_pol.should_compute(s.branch, step, e[s.rows], e0[s.rows]) for s in segs]
        else:
            decide = [True] * len(segs)
        self._segments, self._decide, self._h_in = segs, decide, None
        self.attention_scope = self.session._attention_scope(segs) if all(decide) else None
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

    @staticmethod
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

    # ---------------------------------------------------------------- block replace: residual reuse
    def block(self, index: int, args: dict, original: Callable[[dict], dict]) -> dict:
        """``patches_replace["dit"][("double_block", index)]``: the block stack with TeaCache/MagCache reuse."""
        pol = self.session.block_policy
        to = args.get("transformer_options", {})
        last = int(to.get("total_blocks", index + 1)) - 1
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

    def finish(self) -> str:
        """Complete the report, free the stored tensors, return its text."""
        self.session.finish()
        return self.session.report.text()


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
# Generic ``fn(executor, *args, **kwargs)`` functions of ComfyUI's ``WrappersMP`` and block patches; host.py
# registers them on a ModelPatcher clone. The run of the sampling in progress sits in transformer_options.


def transformer_options_of(args: tuple, kwargs: dict) -> dict:
    """The ``transformer_options`` of a native Wan forward call (keyword, else the last dict positional)."""
    to = kwargs.get("transformer_options")
    if isinstance(to, dict):
        return to
    for a in reversed(args):
        if isinstance(a, dict):
            return a
    return {}


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


# ---------------------------------------------------------------------------------------------- nodes
# Imported late: the patch cores above stay importable without the node layer.

from wan_core.cache import ATTENTION_CHOICES, METHODS, TEACACHE_MODES  # noqa: E402

from . import cache as _cache_node  # noqa: E402
from . import host  # noqa: E402
from .declare import Input, NodeSpec, Output  # noqa: E402

CATEGORY = "WanCore/native"
SKIPARSE_CHOICES = SCHEDULES


def attention_override(backend: str = "sdpa", skiparse: str = "none", k: int = 4,
                       custom_ks: str = "") -> NativeAttention:
    """The :class:`NativeAttention` for the node's widget values (one-line ValueError when invalid)."""
    ks = parse_ks(custom_ks) if skiparse == "custom" else None
    return NativeAttention(backend, skiparse, k, ks)


def patch_attention(model, backend: str = "sdpa", skiparse: str = "none", k: int = 4, custom_ks: str = ""):
    what = "WanCore Native Attention"
    dm = host.native_wan_model(model, what)
    override = attention_override(backend, skiparse, k, custom_ks)
    layers = len(dm.blocks)
    try:
        override.check_layers(layers)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    if override.is_noop:
        return (model,)
    host.show_text(f"{what}: {override.describe()} on {type(dm).__name__} ({layers} blocks)")
    return (host.native_attention_patch(model, override, layers),)


def validate_attention(backend: str = "sdpa", skiparse: str = "none", k: int = 4,
                       custom_ks: str | None = "") -> bool | str:
    problems = ATTENTION.range_problems(k=k)
    if problems:
        return "; ".join(problems)
    try:
        if k is not None and custom_ks is not None and backend is not None and skiparse is not None:
            attention_override(backend, skiparse, k, custom_ks)
    except ValueError as e:
        return str(e)
    return True


ATTENTION = NodeSpec(
    node_id="WanCoreNativeAttention", display_name="WanCore Native Attention", category=CATEGORY,
    description="Patches a native Wan 2.1/2.2 MODEL (Load Diffusion Model, LoRA loaders, ModelSamplingSD3...) "
                "with WanCore's attention: 8-bit attention (sage = the SageAttention kernel on CUDA, its int8 "
                "algorithm elsewhere) and skiparse sparse self-attention. Returns a patched copy; sdpa + none "
                "returns the model unchanged.",
    inputs=(
        Input("model", "MODEL"),
        Input("backend", "COMBO", default="sdpa", options=NATIVE_BACKENDS,
              tooltip="sdpa: ComfyUI's own attention; sage: SageAttention kernel (CUDA; falls back to int8); "
                      "int8: the SageAttention algorithm in torch (any device)"),
        Input("skiparse", "COMBO", default="none", options=SKIPARSE_CHOICES,
              tooltip="sparse self-attention schedule: none; osp13 (first/last 2 blocks dense, ratio k); suv "
                      "(U-shaped ratios 1-8); custom (one ratio per block below). Changes the output."),
        Input("k", "INT", default=4, min=2, max=8, step=1, tooltip="osp13: sparse ratio of the sparse blocks"),
        Input("custom_ks", "STRING", default="", optional=True, advanced=True,
              tooltip="custom: one ratio per block, e.g. '1 1 4 4 4 4 1 1' (1 = dense)"),
    ),
    outputs=(Output("MODEL", "model"),),
    fn=patch_attention,
    validate=validate_attention,
    search_aliases=("sage attention", "skiparse", "sparse attention", "int8 attention"),
)


def cache_setting(method: str = "easycache", threshold: float = -1.0, start: float = -1.0, end: float = -1.0,
                  attention: str = "extrapolate", teacache_mode: str = "e", calibration: str = "") -> NativeCache:
    return NativeCache(_cache_node.build(method, threshold, start, end, attention, teacache_mode, calibration))


def patch_cache(model, method: str = "easycache", threshold: float = -1.0, start: float = -1.0, end: float = -1.0,
                attention: str = "extrapolate", teacache_mode: str = "e", calibration: str = ""):
    what = "WanCore Native Cache"
    dm = host.native_wan_model(model, what)
    cache = cache_setting(method, threshold, start, end, attention, teacache_mode, calibration)
    if cache.is_noop:
        return (model,)
    try:  # the errors of a run (no published table for this model, a calibration of another model) now
        start_session(cache.native_config(), _NativeDiT(native_config(dm)), 2, 2.0)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    return (host.native_cache_patch(model, cache, len(dm.blocks)),)


def validate_cache(method: str = "easycache", threshold: float = -1.0, start: float = -1.0, end: float = -1.0,
                   attention: str = "extrapolate", teacache_mode: str = "e",
                   calibration: str | None = "") -> bool | str:
    return _cache_node.validate_cache(method, threshold, start, end, attention, teacache_mode, calibration or "")


NATIVE_METHODS = tuple(m for m in METHODS if m != "exact")

CACHE = NodeSpec(
    node_id="WanCoreNativeCache", display_name="WanCore Native Cache", category=CATEGORY,
    description="Patches a native Wan MODEL with a WanCore diffusion cache (docs/caches.md): wan (the Wan "
                "report's CFG cache and attention cache), teacache, magcache, easycache, or calibrate. Returns a "
                "patched copy; 'off' returns the model unchanged. The DiT evaluations computed and skipped are "
                "shown when sampling ends.",
    inputs=(
        Input("model", "MODEL"),
        Input("method", "COMBO", default="easycache", options=NATIVE_METHODS,
              tooltip="; ".join(f"{m}: {_cache_node.DESCRIPTIONS[m]}" for m in NATIVE_METHODS)),
        Input("threshold", "FLOAT", default=-1.0, min=-1.0, max=100.0, step=0.01,
              tooltip="-1 = the method's published default; 0 never reuses; higher = faster, lossier"),
        Input("start", "FLOAT", default=-1.0, min=-1.0, max=1.0, step=0.01,
              tooltip="fraction of the steps before which every step is computed; -1 = the method's default"),
        Input("end", "FLOAT", default=-1.0, min=-1.0, max=1.0, step=0.01,
              tooltip="fraction of the steps from which every step is computed again; -1 = the method's default"),
        Input("attention", "COMBO", default="extrapolate", options=ATTENTION_CHOICES, advanced=True,
              tooltip="wan: self-attention between computed steps linearly extrapolated from the last two "
                      "(default), reused as is (less memory, less accurate), or off (the CFG cache only)"),
        Input("teacache_mode", "COMBO", default="e", options=TEACACHE_MODES, advanced=True,
              tooltip="teacache indicator: e = timestep embedding, e0 = time projection"),
        Input("calibration", "STRING", default="", multiline=True, optional=True, advanced=True,
              tooltip="teacache / magcache on models without published numbers: the text a 'calibrate' run shows"),
    ),
    outputs=(Output("MODEL", "model"),),
    fn=patch_cache,
    validate=validate_cache,
    search_aliases=("teacache", "magcache", "easycache", "step cache"),
)


def to_conditioning(embeds: dict, text_len: int = 512):
    """WanCore embeddings -> native CONDITIONING ``[[tensor [1, text_len, D], {}]]`` for positive and negative,
    zero-padded to ``text_len`` rows like ComfyUI's own umT5 encoder output."""
    if not isinstance(embeds, dict) or "cond" not in embeds or "uncond" not in embeds:
        raise ValueError("embeds: expected the output of WanCore Text Encode")

    def one(rows: list, which: str) -> list:
        out = []
        for r in rows:
            r = torch.as_tensor(r)
            if r.dim() == 3 and r.shape[0] == 1:
                r = r[0]
            if r.dim() != 2:
                raise ValueError(f"embeds {which}: expected [tokens, dim] rows, got {list(r.shape)}")
            if r.shape[0] > text_len:
                raise ValueError(f"embeds {which}: {r.shape[0]} tokens exceed text_len {text_len}; raise text_len "
                                 f"or shorten the prompt")
            padded = torch.zeros(text_len, r.shape[1], dtype=torch.float32)
            padded[: r.shape[0]] = r.float()
            out.append([padded[None].to(host.intermediate_device()), {}])
        return out

    return (one(embeds["cond"], "positive"), one(embeds["uncond"], "negative"))


CONDITIONING = NodeSpec(
    node_id="WanCoreEmbedsToConditioning", display_name="WanCore Embeds to Conditioning", category=CATEGORY,
    description="Turns WanCore Text Encode's embeddings (our umT5 loader: fp8 scaled files, prompt cache) into "
                "native CONDITIONING for KSampler and the other native samplers.",
    inputs=(
        Input("embeds", "WANCORE_EMBEDS"),
        Input("text_len", "INT", default=512, min=1, max=4096, step=1,
              tooltip="rows of the conditioning (zero-padded): 512 for the released Wan models, like ComfyUI's "
                      "umT5 encoder; the built-in demo model uses 32"),
    ),
    outputs=(Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative")),
    fn=to_conditioning,
)

NODES = (ATTENTION, CACHE, CONDITIONING)
