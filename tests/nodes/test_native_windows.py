"""The native cache under context windows, without ComfyUI (nodes/native/cache_patch.py; docs/native_patches.md).

ComfyUI's context-window handler (``comfy/context_windows.py``, 0.3.64) calls ``calc_cond_batch`` once per window
inside a step, after putting the window (``index_list``: its latent frames) in
``model_options["transformer_options"]["context_window"]``, and fuses the windows' outputs. ``sample`` below does
the same with a plain Euler loop and equal fuse weights, driving the cache's wrappers exactly as ComfyUI does.

* threshold 0 (never reuse) under windows == no cache under windows, bit-exact;
* with reuse, each window's cache state is its own: the run equals a reference that gives every window a cache
  run of its own (one pre-window ``NativeCacheRun`` per window, dispatched by the test), and differs from the
  pre-window behaviour (one state for all windows, the last window's state reused in the others);
* a sliding schedule (new windows on later steps) starts the new windows' states afresh (their first step
  computes); the report counts per window;
* the attention override on window-sized grids: skiparse planned on the window's grid.
"""
from __future__ import annotations

import pytest
import torch

from nodes import native
from nodes.native import cache_patch
from wan_core.attention import AttentionCall, AttentionDispatch, SkiparseSchedule
from wan_core.cache import CacheConfig, Calibration

from .test_native_patches import Executor, TinyNative, flat, native_sdpa

FRAMES = 5
STATIC = [[0, 1, 2], [2, 3, 4]]


class Window:
    """Stands for ``comfy.context_windows.IndexListContextWindow`` (frames along ``dim``)."""

    def __init__(self, index_list, dim=2):
        self.index_list, self.dim, self.context_length = list(index_list), dim, len(index_list)


def config(method: str, threshold: float, steps: int) -> CacheConfig:
    if method == "magcache":
        cal = Calibration(model=None, steps=steps, mag_cond=(1.0,) * steps, mag_uncond=(1.0,) * steps)
        return CacheConfig.preset("magcache", threshold=threshold, calibration=cal)
    if method == "wan":
        return CacheConfig.preset("wan", attention="off")
    return CacheConfig.preset(method, threshold=threshold)


def sample(dm, run, steps=8, schedule=lambda step: STATIC, guidance=5.0, seed=0):
    """Euler sampling of a ``[1, 16, FRAMES, 2, 2]`` latent through the cache's wrappers (``run`` None: none),
    windows from ``schedule(step)`` (None: no windows) fused with equal weights, as ComfyUI's handler does."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 16, FRAMES, 2, 2, generator=g)
    ctx = {0: torch.ones(1, 3, 8), 1: -torch.ones(1, 3, 8)}
    sig = torch.linspace(1.0, 0.0, steps + 1)
    patches = {("double_block", i): native.block_patch(i) for i in range(len(dm.blocks))}
    ex = Executor(dm, class_obj=dm)

    def calc(model, conds, x_in, timestep, model_options):
        kinds = [i for i, c in enumerate(conds) if c is not None]
        to = dict(model_options["transformer_options"], cond_or_uncond=kinds, sigmas=timestep,
                  patches_replace={"dit": patches})
        xb = torch.cat([x_in] * len(kinds))
        v = native.diffusion_model_wrapper(ex, xb, timestep.repeat(len(kinds)) * 1000,
                                           torch.cat([ctx[k] for k in kinds]), None, None, to)
        den = (xb - timestep * v).chunk(len(kinds))
        out = [torch.zeros_like(x_in), torch.zeros_like(x_in)]
        for k, d in zip(kinds, den):
            out[k] = d
        return out

    for i in range(steps):
        t = sig[i:i + 1]
        mo = {"transformer_options": {"sample_sigmas": sig} | ({} if run is None else {native.RUN_KEY: run})}
        fused, counts = [torch.zeros_like(x), torch.zeros_like(x)], torch.zeros(1, 1, FRAMES, 1, 1)
        windows = schedule(i)
        for w in windows or [list(range(FRAMES))]:
            if windows is not None:  # without windows ComfyUI calls calc_cond_batch once, no window set
                mo["transformer_options"]["context_window"] = Window(w)
            res = native.calc_cond_batch_wrapper(Executor(calc), None, ["c", "u"], x[:, :, w], t, mo)
            for j in range(2):
                fused[j][:, :, w] += res[j]
            counts[:, :, w] += 1
        d_c, d_u = (f / counts for f in fused)
        d = d_u + guidance * (d_c - d_u)
        x = x + (sig[i + 1] - sig[i]) * (x - d) / sig[i]
    return x


class PerWindowReference:
    """Every window gets a cache run of its own, dispatched here by the window's frames; the runs themselves
    are used with the window unseen (``window_of`` patched to None by the caller), i.e. as pre-window runs."""

    def __init__(self, make):
        self.make, self.runs, self.current = make, {}, None

    def _select(self, to):
        w = to.get("context_window")
        key = tuple(w.index_list) if w is not None else None
        self.current = self.runs.setdefault(key, self.make())
        return self.current

    def calc_cond_batch(self, executor, model, conds, x_in, timestep, model_options, *a, **kw):
        return self._select(model_options["transformer_options"]).calc_cond_batch(
            executor, model, conds, x_in, timestep, model_options, *a, **kw)

    def diffusion_model(self, executor, *args, **kwargs):
        return self._select(native.transformer_options_of(args, kwargs)).diffusion_model(executor, *args, **kwargs)

    def block(self, index, args, original):
        return self.current.block(index, args, original)

    @property
    def attention_scope(self):
        return None if self.current is None else self.current.attention_scope

    def finish(self):
        return "\n".join(r.finish() for r in self.runs.values())


def pre_window(monkeypatch):
    """The cache as it was before it knew windows: one state for all of them."""
    monkeypatch.setattr(cache_patch, "window_of", lambda to, x=None: None)


def model():
    torch.manual_seed(0)
    return TinyNative()


def start(method, threshold, steps=8):
    return native.NativeCache(config(method, threshold, steps)).start(native.native_config(model()), steps, 5.0)


@pytest.mark.parametrize("method", ["easycache", "magcache"])
def test_threshold_zero_under_windows_is_no_cache(method):
    dm = model()
    ref = sample(dm, None)
    run = start(method, 0.0)
    out = sample(dm, run)
    text = run.finish()
    assert torch.equal(out, ref)
    assert text.startswith(f"cache {method}: 32/32 DiT evaluations (2 context windows)"), text
    assert "window [0, 1, 2]: " in text and "window [2, 3, 4]: " in text


@pytest.mark.parametrize("method, threshold", [("easycache", 0.5), ("magcache", 5.0), ("wan", 0.0)])
def test_each_window_reuses_its_own_state(method, threshold, monkeypatch):
    dm = model()
    fixed = start(method, threshold)
    out = sample(dm, fixed)
    rep = fixed.report
    assert 0 < rep.computed < rep.total, fixed.finish()  # something was reused
    with monkeypatch.context() as mp:
        pre_window(mp)
        shared = sample(dm, start(method, threshold))
        reference = PerWindowReference(lambda: start(method, threshold))
        per_window = sample(dm, reference)
    print(method, fixed.finish().replace("\n", " | "),
          f"| max |fixed - per-window reference| {(out - per_window).abs().max():.2e}"
          f"| max |pre-window - reference| {(shared - per_window).abs().max():.2e}")
    assert sorted(reference.runs) == [(0, 1, 2), (2, 3, 4)]
    assert torch.equal(out, per_window)
    assert (shared - per_window).abs().max().item() > 1e-4  # the old single state was wrong, and this sees it
    assert [s.report.status for s in fixed.states.values() if s is not fixed.states[None]] == \
        [r.report.status for r in reference.runs.values()]


def sliding(step):
    """New windows on later steps, as ComfyUI's uniform schedules (which shift by the step's ordered halving)."""
    return STATIC if step < 3 else [[0, 1, 2], [1, 2, 3], [2, 3, 4]]


def test_new_windows_start_afresh_and_the_report_counts_windows(monkeypatch):
    dm = model()
    run = start("easycache", 0.5)
    out = sample(dm, run, schedule=sliding)
    assert [list(w) for w in run.windows] == [[0, 1, 2], [2, 3, 4], [1, 2, 3]]
    new = run.states[(1, 2, 3)].report
    assert new.status[:3] == [{}, {}, {}] and new.status[3] == {"cond": "computed", "uncond": "computed"}
    assert "reused" in [s.get("cond") for s in new.status[4:]] or "reused" in [
        s.get("cond") for s in run.states[(0, 1, 2)].report.status]
    total = 2 * (2 * 3 + 3 * 5)  # two branches; two windows on 3 steps, three on 5
    assert run.report.total == total and run.states[None].report.computed == 0
    text = run.finish()
    assert text.startswith(f"cache easycache: {run.report.computed}/{total} DiT evaluations (3 context windows)")
    assert "window [1, 2, 3]: cache easycache: " in text
    with monkeypatch.context() as mp:
        pre_window(mp)
        reference = PerWindowReference(lambda: start("easycache", 0.5))
        assert torch.equal(out, sample(dm, reference, schedule=sliding))


def test_window_of_reads_comfys_window_and_ignores_a_stale_one():
    x = torch.zeros(1, 16, 3, 4, 4)
    assert cache_patch.window_of({}, x) is None
    assert cache_patch.window_of({"context_window": Window([4, 5, 6])}, x) == (4, 5, 6)
    assert cache_patch.window_of({"context_window": Window([4, 5, 6])}) == (4, 5, 6)
    # an entry left from another call whose latent is not the window's: the whole video
    assert cache_patch.window_of({"context_window": Window([0, 1])}, x) is None
    assert cache_patch.window_of({"context_window": object()}, x) is None


def test_no_windows_keeps_one_state(monkeypatch):
    dm = model()
    run = start("easycache", 0.5)
    out = sample(dm, run, schedule=lambda step: None)
    assert run.windows == [] and list(run.states) == [None]
    assert run.report is run.states[None].report and run.report.total == 16
    assert 0 < run.report.computed < 16
    assert run.finish().startswith(f"cache easycache: {run.report.computed}/16 DiT evaluations\n")
    with monkeypatch.context() as mp:
        pre_window(mp)
        assert torch.equal(out, sample(dm, start("easycache", 0.5), schedule=lambda step: None))


def test_attention_override_on_window_sized_grids():
    """ComfyUI's Wan forward under windows sees the window's latent: the grid wrapper sets the window's grid
    and the override runs skiparse over exactly that grid (as wan_core's dispatch does for those tokens)."""
    frames, h, w = 3, 6, 5  # a 3-frame window of a longer video: 90 tokens
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, frames * h * w, 32, generator=g) for _ in range(3))
    to: dict = {"context_window": Window([4, 5, 6])}
    x = torch.zeros(1, 16, frames, 2 * h, 2 * w)

    class Model:
        patch_size = (1, 2, 2)

    native.grid_wrapper(Executor(lambda *a, **kw: None, class_obj=Model()), x, None, None, to)
    assert tuple(to["grid_sizes"]) == (frames, h, w)
    override = NativeAttention("sdpa", "osp13", k=4)
    native.NativeAttention.enter_block(to, 2, 6)
    out = override(native_sdpa, flat(q), flat(k), flat(v), heads=2, transformer_options=to)
    ref = AttentionDispatch("sdpa", skiparse=SkiparseSchedule.osp13(6, 4))(q, k, v, AttentionCall("self", 2))
    dense = native_sdpa(flat(q), flat(k), flat(v), 2)
    assert (out - flat(ref)).abs().max().item() <= 1e-6
    assert (out - dense).abs().max().item() > 1e-3


NativeAttention = native.NativeAttention
