"""The native-MODEL patches on a real ComfyUI (docs/native_patches.md); skipped when ``comfy`` cannot be imported.

Run it from a ComfyUI checkout's Python environment, with that checkout importable, e.g.::

    PYTHONPATH=/path/to/ComfyUI python -m pytest tests/nodes/test_native_comfy.py

ComfyUI's own Wan DiT (``comfy.sd.load_diffusion_model_state_dict``, the loader behind UNETLoader) is built from a
tiny random state dict in official key names (head_dim 128 and text width 4096, as ComfyUI's detection
assumes). Checked:

* patched with ``sdpa``/``none`` it is bit-identical to unpatched (the node returns the input; the override with
  those settings, forced on, also changes nothing); ``int8`` stays within the int8 tolerance
  (docs/algorithms.md section 3.3); ``osp13`` equals WanCore's own DiT with ``osp13`` on the same weights
  (<= 1e-4); the input MODEL's options are unchanged after patching;
* the cache node through ComfyUI's sampler (``comfy.sample.sample``, KSampler's path): ``off`` is the input,
  easycache / wan / magcache skip evaluations and report them, outputs stay finite;
* RIFLEx on ComfyUI's WanModel: only the frame axis's component k of the rotations changes, one latent frame
  is bit-identical, the input MODEL is untouched;
* attention + cache + RIFLEx under ComfyUI's own ``WanContextWindowsManual``: runs, finite, each forward sees a
  window, skiparse runs on the window's grid, a window covering the video equals no windows; the cache keeps one
  state per window: threshold 0 under windows equals no cache (bit-exact), with reuse the run equals a reference
  giving every window a cache run of its own and differs from one state shared by the windows (the cache before
  it knew windows), also with ComfyUI's sliding ``standard_uniform`` schedule; the report counts the windows;
* the shipped ``native_t2v_fast`` API workflow through ``/prompt`` on a CPU-only ComfyUI server (slow).
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch


def _import_comfy():
    argv = sys.argv
    try:
        sys.argv = [argv[0], "--cpu"]
        import comfy.options

        comfy.options.enable_args_parsing()
        import comfy.model_patcher  # noqa: F401
        import comfy.patcher_extension  # noqa: F401
        import comfy.sample  # noqa: F401
        import comfy.sd  # noqa: F401
        return comfy
    except Exception:  # noqa: BLE001 - no (working) ComfyUI: the module is skipped
        return None
    finally:
        sys.argv = argv


comfy = _import_comfy()
pytestmark = pytest.mark.skipif(comfy is None, reason="ComfyUI (comfy) is not importable")

from nodes import native  # noqa: E402
from wan_core.attention import AttentionDispatch, SkiparseSchedule  # noqa: E402
from wan_core.dit.model import WanDiT  # noqa: E402

from ..attention.helpers import CFG as _CFG  # noqa: E402
from ..attention.helpers import cos_rel_l1, random_dit_state  # noqa: E402

# umT5's width as text width: ComfyUI 0.3.64 reads no config from the file and assumes it
CFG = _CFG.replace(text_dim=4096, name="tiny-native")

ROOT = Path(__file__).resolve().parents[2]
TEXT_LEN = 512


@pytest.fixture(scope="module")
def weights():
    return random_dit_state(CFG, seed=3)


def native_patcher(sd):
    """ComfyUI's ModelPatcher around its own WanModel with ``sd`` (as UNETLoader loads a file)."""
    return comfy.sd.load_diffusion_model_state_dict({k: v.clone() for k, v in sd.items()})


def inputs(seed=5, grid=(3, 6, 5)):
    g = torch.Generator().manual_seed(seed)
    f, h, w = grid
    x = torch.randn(1, 16, f, 2 * h, 2 * w, generator=g)
    ctx = torch.zeros(1, TEXT_LEN, CFG.text_dim)
    ctx[:, :9] = torch.randn(1, 9, CFG.text_dim, generator=g)
    return x, torch.tensor([700.0]), ctx


def native_forward(patcher, x, t, ctx):
    """The diffusion model's forward with the patcher's options and wrappers, as sampling passes them
    (``comfy/sampler_helpers.py`` merges ``ModelPatcher.wrappers`` into ``transformer_options["wrappers"]``)."""
    to = copy.copy(patcher.model_options.get("transformer_options", {}))
    to["wrappers"] = copy.copy(patcher.wrappers)
    with torch.no_grad():
        return patcher.model.diffusion_model(x, t, ctx, transformer_options=to).float()


def test_model_class_is_comfys_wan(weights):
    m = native_patcher(weights)
    assert type(m.model.diffusion_model).__module__ == "comfy.ldm.wan.model"
    assert len(m.model.diffusion_model.blocks) == CFG.num_layers


def test_sdpa_none_is_bit_identical_and_the_input_is_untouched(weights):
    m = native_patcher(weights)
    before = copy.deepcopy(m.model_options)
    x, t, ctx = inputs()
    ref = native_forward(m, x, t, ctx)
    assert native.patch_attention(m, "sdpa", "none")[0] is m
    forced = comfy.model_patcher.ModelPatcher.clone(m)
    forced.model_options["transformer_options"]["optimized_attention_override"] = native.NativeAttention()
    assert torch.equal(native_forward(forced, x, t, ctx), ref)
    patched = native.patch_attention(m, "int8", "osp13")[0]
    assert patched is not m and m.model_options == before
    assert "optimized_attention_override" not in m.model_options["transformer_options"]
    assert torch.equal(native_forward(m, x, t, ctx), ref)


def test_int8_is_within_the_int8_tolerance(weights):
    m = native_patcher(weights)
    x, t, ctx = inputs()
    ref = native_forward(m, x, t, ctx)
    out = native_forward(native.patch_attention(m, "int8", "none")[0], x, t, ctx)
    cos, rel = cos_rel_l1(out, ref)
    print(f"native int8 vs sdpa: cos {cos:.6f} rel-L1 {rel:.2e}")
    assert not torch.equal(out, ref) and cos >= 0.998 and rel <= 5e-2


@pytest.mark.parametrize("grid", [(3, 6, 5), (2, 4, 4)])
def test_osp13_equals_wancores_own_dit(weights, grid):
    x, t, ctx = inputs(grid=grid)
    own_dense = WanDiT(CFG)
    own_dense.load_state_dict(weights)
    own = WanDiT(CFG, AttentionDispatch("sdpa", skiparse=SkiparseSchedule.osp13(CFG.num_layers, 4)))
    own.load_state_dict(weights)
    m = native_patcher(weights)
    with torch.no_grad():
        ref_dense, ref = own_dense(x, t, ctx), own(x, t, ctx)
    dense = native_forward(m, x, t, ctx)
    sparse = native_forward(native.patch_attention(m, "sdpa", "osp13", 4)[0], x, t, ctx)
    print(f"grid {grid}: native vs WanCore dense {(dense - ref_dense).abs().max():.2e}, "
          f"osp13 {(sparse - ref).abs().max():.2e}, osp13 vs dense {(ref - ref_dense).abs().max():.2e}")
    assert (dense - ref_dense).abs().max().item() <= 1e-4
    assert (sparse - ref).abs().max().item() <= 1e-4
    assert (ref - ref_dense).abs().max().item() > 1e-3


def test_non_wan_models_are_refused(weights):
    m = native_patcher(weights)
    other = m.clone()
    other.model = copy.copy(m.model)
    other.model.diffusion_model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match=r"Wan 2.1/2.2 models only; this MODEL is torch.nn.modules.linear.Linear"):
        native.patch_cache(other, "easycache")


# ---------------------------------------------------------------------------------------------- caches


def sample(model, steps=10, cfg=5.0, seed=0):
    x, _, ctx = inputs(grid=(2, 4, 4))
    latent = torch.zeros(1, 16, 2, 8, 8)
    noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(seed))
    pos = [[ctx, {}]]
    neg = [[torch.zeros_like(ctx), {}]]
    return comfy.sample.sample(model, noise, steps, cfg, "uni_pc", "simple", pos, neg, latent, denoise=1.0,
                               disable_pbar=True, seed=seed)


@pytest.mark.parametrize("method, attention_first", [("magcache", True), ("wan", True), ("wan", False)])
def test_attention_and_cache_patches_chain(weights, method, attention_first):
    """Both nodes on one model, in either order (block replace patches and attention overrides chained),
    through ComfyUI's sampler; the wan preset's attention cache stays outside WanCore's attention."""
    m = native_patcher(weights)
    shown: list[str] = []
    kwargs = {"threshold": 0.5, "calibration": calibration_text(10)} if method == "magcache" else {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(native.host, "show_text", shown.append)
        a = native.patch_attention(m, "int8", "osp13", 4)[0]
        if attention_first:
            both = native.patch_cache(a, method, **kwargs)[0]
        else:
            both = native.patch_attention(native.patch_cache(m, method, **kwargs)[0], "int8", "osp13", 4)[0]
        out = sample(both, 10)
        sparse_only = sample(a, 10)
    print(method, "attention first" if attention_first else "cache first", shown[-1].replace("\n", " | "))
    assert shown[-1].startswith(f"cache {method}: ") and "reused" in shown[-1]
    if method == "wan":
        override = both.model_options["transformer_options"]["optimized_attention_override"]
        assert isinstance(override, native.CacheAttention) and isinstance(override.inner, native.NativeAttention)
        assert "self-attention reused" in shown[-1]
    assert torch.isfinite(out).all() and not torch.equal(out, sparse_only)


def calibration_text(steps):
    """A calibration of no particular model: MagCache ratios 0.99, TeaCache's polynomial the identity."""
    from wan_core.cache import Calibration

    ratios = (1.0,) + (0.99,) * (steps - 1)
    return Calibration(model=None, steps=steps, mag_cond=ratios, mag_uncond=ratios,
                       teacache={"e": (0.0, 0.0, 0.0, 1.0, 0.0)}).to_json()


@pytest.mark.parametrize("method", ["easycache", "wan", "magcache", "teacache"])
def test_cache_through_comfys_sampler(weights, method):
    m = native_patcher(weights)
    before = copy.deepcopy(m.model_options)
    shown: list[str] = []
    steps = 10
    ref = sample(m, steps)
    assert native.patch_cache(m, "off")[0] is m
    # thresholds for this random model, whose output and time embedding change much more per step than a
    # trained model's: what matters here is that the wrappers skip and report through ComfyUI's sampler
    kwargs = {"threshold": {"easycache": 5.0, "teacache": 3.0}.get(method, 0.5)}
    if method in ("magcache", "teacache"):
        kwargs["calibration"] = calibration_text(steps)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(native.host, "show_text", shown.append)
        patched = native.patch_cache(m, method, **kwargs)[0]
        out = sample(patched, steps)
    assert m.model_options == before
    assert len(shown) == 1 and shown[0].startswith(f"cache {method}: "), shown
    computed, total = shown[0].split(": ")[1].split(" ")[0].split("/")
    print(method, shown[0].replace("\n", " | "), f"max |out - uncached| {(out - ref).abs().max():.3f}")
    assert int(total) == 2 * steps and int(computed) < int(total)
    assert torch.isfinite(out).all()


# ---------------------------------------------------------------------------------------------- RIFLEx


def patched_forward(patcher, x, t, ctx):
    """``native_forward`` with the patcher's object patches on the model (as ComfyUI loads a MODEL to run it),
    taken off again afterwards."""
    patcher.patch_model()
    try:
        return native_forward(patcher, x, t, ctx)
    finally:
        patcher.unpatch_model()


def frame_ids(frames, h=3, w=3):
    """Token positions ``[1, N, 3]`` (frame, row, column) as ComfyUI's ``WanModel.rope_encode`` builds them."""
    f, r, c = torch.meshgrid(torch.arange(frames), torch.arange(h), torch.arange(w), indexing="ij")
    return torch.stack([f, r, c], -1).reshape(1, -1, 3).float()


def test_riflex_changes_only_the_temporal_component_on_comfys_wan(weights):
    """WanCore Native RIFLEx on ComfyUI's own WanModel: an object patch on a clone; the rotations differ from
    ComfyUI's only in the frame axis's component k; one latent frame is unchanged, more frames change."""
    m = native_patcher(weights)
    before = copy.deepcopy(m.model_options)
    original = m.model.diffusion_model.rope_embedder
    k, shown = 3, []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(native.host, "show_text", shown.append)
        patched = native.patch_riflex(m, k)[0]
    assert patched is not m and m.model_options == before and not m.object_patches
    assert shown == [f"WanCore Native RIFLEx: k={k} on WanModel"]
    embedder = patched.get_model_object(native.riflex_patch.EMBEDDER)
    assert isinstance(embedder, native.RiflexEmbedder) and embedder.original is original
    ids = frame_ids(9)
    ref, out = original(ids), embedder(ids)  # [1, 1, N, d/2, 2, 2]
    changed = sorted({int(i) for i in (out != ref).nonzero()[:, 3].tolist()})
    temporal = original.axes_dim[0] // 2
    print(f"RIFLEx k={k}: rotation components changed {changed} of {out.shape[3]} ({temporal} temporal)")
    assert changed == [k - 1]
    for frames, same in ((1, True), (3, False)):
        x, t, ctx = inputs(grid=(frames, 4, 4))
        base = native_forward(m, x, t, ctx)
        rif = patched_forward(patched, x, t, ctx)
        print(f"{frames} latent frame(s): max |RIFLEx - ComfyUI| {(rif - base).abs().max():.2e}")
        assert torch.equal(rif, base) == same
    assert m.model.diffusion_model.rope_embedder is original and m.model_options == before
    again = native.patch_riflex(patched, 5)[0].get_model_object(native.riflex_patch.EMBEDDER)
    assert again.original is original and again.setting == 5  # replaced, not stacked


# ---------------------------------------------------------------------------------------------- context windows


def _windows_node():
    from comfy_extras.nodes_context_windows import WanContextWindowsManualNode

    return WanContextWindowsManualNode


def with_windows(model, length, overlap, schedule="standard_static"):
    """ComfyUI's own WAN Context Windows (Manual) node (its ``execute``); ``length``/``overlap`` in video
    frames, as the node takes them (it converts to latent frames)."""
    out = _windows_node().execute(model, context_length=length, context_overlap=overlap,
                                  context_schedule=schedule, context_stride=1, closed_loop=False,
                                  fuse_method="pyramid")
    return out.result[0]


def sample_long(model, frames=5, steps=6, cfg=5.0, seed=0):
    _, _, ctx = inputs(grid=(2, 4, 4))
    latent = torch.zeros(1, 16, frames, 8, 8)
    noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(seed))
    return comfy.sample.sample(model, noise, steps, cfg, "uni_pc", "simple", [[ctx, {}]],
                               [[torch.zeros_like(ctx), {}]], latent, denoise=1.0, disable_pbar=True, seed=seed)


def cache_kwargs(method, steps, threshold=None):
    """Thresholds that make this random model reuse (its output changes far more per step than a trained one's)."""
    kwargs = {"threshold": {"easycache": 5.0, "teacache": 3.0}.get(method, 0.5) if threshold is None else threshold}
    if method in ("teacache", "magcache"):
        kwargs["calibration"] = calibration_text(steps)
    return kwargs


@pytest.mark.parametrize("method", ["easycache", "wan", "teacache"])
def test_patches_compose_with_comfys_context_windows(weights, method):
    """Attention + cache + RIFLEx patches on a MODEL with ComfyUI's WanContextWindowsManual, sampled through
    ``comfy.sample.sample`` on 5 latent frames with 3-frame windows (overlap 1): runs, finite, reports per
    window; skiparse plans on the window's grid; a window covering the whole video is the same as no windows."""
    m = native_patcher(weights)
    steps, shown = 6, []
    calls: list[int] = []
    plans: list[tuple] = []
    plan = native.NativeAttention.plan

    def recording_plan(self, q_len, k_len, to):
        out = plan(self, q_len, k_len, to)
        if out is not None:
            plans.append((tuple(int(g) for g in to["grid_sizes"]), q_len))
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(native.host, "show_text", shown.append)
        mp.setattr(native.NativeAttention, "plan", recording_plan)
        patched = native.patch_riflex(native.patch_cache(native.patch_attention(m, "int8", "osp13", 4)[0],
                                                         method, **cache_kwargs(method, steps))[0], 3)[0]
        # counts the latent frames of each DiT forward (ComfyUI's own wrapper mechanism, outermost)
        patched.add_wrapper(comfy.patcher_extension.WrappersMP.DIFFUSION_MODEL,
                            lambda ex, *a, **kw: (calls.append(a[0].shape[2]), ex(*a, **kw))[1])
        windowed = with_windows(patched, 9, 4)  # 3 latent frames, overlap 1: windows 0-2, 2-4
        plain = sample_long(patched, steps=steps)
        n_plain, plans_plain = len(calls), len(plans)
        out = sample_long(windowed, steps=steps)
        frames_windowed = calls[n_plain:]
        whole = sample_long(with_windows(patched, 17, 4), steps=steps)
    reports = [s for s in shown if s.startswith(f"cache {method}: ")]
    print(method, "| plain:", reports[0].replace("\n", " | "), "| windows:", reports[1].replace("\n", " | "),
          f"| frames per forward: plain {sorted(set(calls[:n_plain]))} ({n_plain}), windowed "
          f"{sorted(set(frames_windowed))} ({len(frames_windowed)})",
          f"| sparse self-attention grids: plain {sorted(set(plans[:plans_plain]))}, windowed "
          f"{sorted(set(plans[plans_plain:]))}",
          f"| max |windows - whole| {(out - plain).abs().max():.3f}")
    assert "context_handler" in windowed.model_options
    assert "context_handler" not in patched.model_options
    assert set(frames_windowed) == {3} and set(calls[:n_plain]) == {5}
    assert set(plans[:plans_plain]) == {((5, 4, 4), 80)}
    assert plans[plans_plain:] and {g for g, _ in plans[plans_plain:]} <= {(3, 4, 4), (5, 4, 4)}
    assert ((3, 4, 4), 48) in plans[plans_plain:]
    assert torch.isfinite(out).all() and not torch.equal(out, plain)
    assert torch.equal(whole, plain)
    assert len(reports) == 3
    assert "context windows" not in reports[0] and "context windows" not in reports[2]
    assert reports[1].split("\n")[0].endswith("DiT evaluations (2 context windows)")
    assert "\nwindow [0, 1, 2]: " in reports[1] and "\nwindow [2, 3, 4]: " in reports[1]


@pytest.mark.parametrize("method", ["easycache", "magcache", "teacache"])
def test_threshold_zero_under_comfys_windows_is_no_cache(weights, method):
    """Never reusing, the windowed native cache is exactly the windowed run without it."""
    m = native_patcher(weights)
    steps, shown = 6, []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(native.host, "show_text", shown.append)
        ref = sample_long(with_windows(m, 9, 4), steps=steps)
        cached = native.patch_cache(m, method, **cache_kwargs(method, steps, threshold=0.0))[0]
        out = sample_long(with_windows(cached, 9, 4), steps=steps)
    print(method, shown[-1].replace("\n", " | "))
    assert torch.equal(out, ref)
    assert shown[-1].startswith(f"cache {method}: 24/24 DiT evaluations (2 context windows)")


def _reference(per_window: bool):
    """``NativeCache.start`` replaced: the cache as it was before it knew windows (one state for all; per_window
    False), or one such run per window, dispatched by the window's frames (per_window True)."""
    from .test_native_windows import PerWindowReference

    def start(self, *args):
        if per_window:
            return PerWindowReference(lambda: native.NativeCacheRun(self, *args))
        return native.NativeCacheRun(self, *args)

    return start


@pytest.mark.parametrize("method, schedule", [("easycache", "standard_static"), ("magcache", "standard_static"),
                                              ("wan", "standard_static"), ("easycache", "standard_uniform")])
def test_each_window_keeps_its_own_cache_under_comfys_windows(weights, method, schedule):
    """With reuse, the windowed native cache equals a reference in which every window has a cache run of its
    own, and differs from one state shared by the windows (the pre-window cache: the last window's stored state
    applied to the next window). ``standard_uniform`` shifts the windows from step to step: new windows start
    afresh."""
    m = native_patcher(weights)
    steps, shown, runs = 8, [], []
    frames = 9 if schedule == "standard_uniform" else 5
    start = native.NativeCache.start

    def keep(self, *args):
        runs.append(start(self, *args))
        return runs[-1]

    cached = native.patch_cache(m, method, **cache_kwargs(method, steps))[0]
    windowed = with_windows(cached, 9, 4, schedule)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(native.host, "show_text", shown.append)
        mp.setattr(native.NativeCache, "start", keep)
        out = sample_long(windowed, frames=frames, steps=steps)
        mp.setattr(native.cache_patch, "window_of", lambda to, x=None: None)
        mp.setattr(native.NativeCache, "start", _reference(True))
        per_window = sample_long(windowed, frames=frames, steps=steps)
        mp.setattr(native.NativeCache, "start", _reference(False))
        shared = sample_long(windowed, frames=frames, steps=steps)
    run = runs[0]
    print(method, schedule, shown[0].split("\n")[0], f"| windows {[list(w) for w in run.windows]}",
          f"| max |fixed - per-window reference| {(out - per_window).abs().max():.2e}",
          f"| max |shared state - per-window reference| {(shared - per_window).abs().max():.2e}")
    rep = run.report
    assert 0 < rep.computed < rep.total and shown[0].startswith(f"cache {method}: ")
    assert f"({len(run.windows)} context windows)" in shown[0].split("\n")[0]
    assert torch.equal(out, per_window)
    assert (shared - per_window).abs().max().item() > 1e-3
    for w in run.windows:  # a window's first evaluation computes both branches
        status = run.states[w].report.status
        first = next(s for s in status if s)
        assert first == {"cond": "computed", "uncond": "computed"}, (w, status)
    if schedule == "standard_uniform":
        assert len(run.windows) > 3
        assert any(not run.states[w].report.status[0] for w in run.windows)  # windows that began later


# ---------------------------------------------------------------------------------------------- /prompt


def _tiny_models(root: Path) -> dict:
    """Model files for the headless run: the built-in demo DiT as a native file (its text width in the metadata
    ComfyUI reads), a tiny LoRA for it; the demo text encoder and VAE are the pack's built-ins."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from wan_core.demo import builtin_paths

    with safe_open(str(builtin_paths()["dit"]), "pt") as f:
        sd = {k: f.get_tensor(k) for k in f.keys()}
    text_dim = sd["text_embedding.0.weight"].shape[1]
    (root / "diffusion_models").mkdir(parents=True)
    (root / "loras").mkdir()
    save_file(sd, str(root / "diffusion_models" / "wancore_demo_native.safetensors"),
              metadata={"config": json.dumps({"transformer": {"text_dim": text_dim}})})
    w = sd["blocks.0.self_attn.q.weight"]
    g = torch.Generator().manual_seed(0)
    lora = {"diffusion_model.blocks.0.self_attn.q.lora_up.weight": 0.01 * torch.randn(w.shape[0], 4, generator=g),
            "diffusion_model.blocks.0.self_attn.q.lora_down.weight": 0.01 * torch.randn(4, w.shape[1], generator=g)}
    save_file(lora, str(root / "loras" / "tiny_lora.safetensors"))
    return {"unet": "wancore_demo_native.safetensors", "lora": "tiny_lora.safetensors"}


def _get(url: str, timeout: float = 10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _serve_and_run(api: dict, base: Path, tmp_path: Path) -> str:
    """Start a CPU-only server on ``base`` (a base directory with models/ and custom_nodes/), POST ``api`` to
    ``/prompt``, wait for it, assert success; returns the server log. The server is stopped afterwards."""
    comfy_root = Path(comfy.options.__file__).resolve().parents[1]  # comfy is a namespace package
    port = 8189 + os.getpid() % 500
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(
        [sys.executable, "main.py", "--cpu", "--listen", "127.0.0.1", "--port", str(port), "--disable-auto-launch",
         "--disable-api-nodes", "--base-directory", str(base), "--output-directory", str(tmp_path / "out")],
        cwd=comfy_root, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 240
        while True:
            try:
                _get(url + "/system_stats", 2)
                break
            except Exception:  # noqa: BLE001 - not up yet
                assert server.poll() is None and time.time() < deadline, (tmp_path / "server.log").read_text()[-3000:]
                time.sleep(1)
        body = json.dumps({"prompt": api, "client_id": "wancore-test"}).encode()
        req = urllib.request.Request(url + "/prompt", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            prompt_id = json.loads(r.read())["prompt_id"]
        while True:
            hist = _get(f"{url}/history/{prompt_id}")
            if prompt_id in hist and hist[prompt_id].get("status", {}).get("completed") is not None:
                break
            assert time.time() < deadline + 600, "prompt did not finish"
            time.sleep(2)
        status = hist[prompt_id]["status"]
        text = (tmp_path / "server.log").read_text()
        assert status["status_str"] == "success", (status, text[-4000:])
        assert "IMPORT FAILED" not in text
        return text
    finally:
        server.terminate()
        server.wait(30)
        log.close()


@pytest.mark.slow
def test_native_workflow_runs_headless_through_prompt(tmp_path):
    base = tmp_path / "base"
    names = _tiny_models(base / "models")
    (base / "custom_nodes").mkdir()
    os.symlink(ROOT, base / "custom_nodes" / "ComfyUI-WanCore")
    api = json.loads((ROOT / "workflows" / "api" / "native_t2v_fast.json").read_text())
    demo = "wancore-demo (built-in)"
    for node in api.values():  # the tiny models and sizes; every patch node keeps its shipped settings
        i, ct = node["inputs"], node["class_type"]
        if ct == "UNETLoader":
            i["unet_name"] = names["unet"]
        elif ct == "LoraLoaderModelOnly":
            i["lora_name"] = names["lora"]
        elif ct in ("WanCoreTextEncoderLoader", "WanCoreVAELoader"):
            i["text_encoder_name" if "Text" in ct else "vae_name"] = demo
        elif ct == "WanCoreTextEncode":
            i.update(positive="a blue square moving right", negative="")
        elif ct == "WanCoreEmbedsToConditioning":
            i["text_len"] = 32
        elif ct == "EmptyHunyuanLatentVideo":
            i.update(width=64, height=64, length=17)
        elif ct == "KSampler":
            i.update(steps=16, cfg=4.0)
        elif ct == "ModelSamplingSD3":
            i["shift"] = 3.0
    text = _serve_and_run(api, base, tmp_path)
    assert "lora key not loaded" not in text
    (Path(os.environ.get("WANCORE_PROMPT_LOG", tmp_path / "kept.log"))).write_text(text)
    assert "cache easycache: " in text, text[-4000:]
    videos = list((tmp_path / "out").rglob("*.mp4"))
    assert videos, list((tmp_path / "out").rglob("*"))
    print([line for line in text.splitlines() if "cache easycache" in line or "WanCore Native" in line])


PAD_NODE = '''"""Test harness: zero-pads a CONDITIONING's width (64-wide demo embeddings, 4096-wide text input)."""
import torch


class WanCoreTestPadConditioning:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"conditioning": ("CONDITIONING",), "width": ("INT", {"default": 4096, "min": 1})}}

    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "pad"
    CATEGORY = "testing"

    def pad(self, conditioning, width):
        out = []
        for t, extra in conditioning:
            p = torch.zeros(*t.shape[:-1], width, dtype=t.dtype, device=t.device)
            p[..., : t.shape[-1]] = t
            out.append([p, extra])
        return (out,)


NODE_CLASS_MAPPINGS = {"WanCoreTestPadConditioning": WanCoreTestPadConditioning}
'''


def _demo_native_4096(path: Path) -> None:
    """The built-in demo DiT as a native file ComfyUI 0.3.64 detects as Wan: its detection reads no text width
    and builds a 4096-wide text input, so the text embedding's weight is zero-padded to 4096 columns (with the
    conditioning zero-padded to match, the same function as the demo model)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from wan_core.demo import builtin_paths

    with safe_open(str(builtin_paths()["dit"]), "pt") as f:
        sd = {k: f.get_tensor(k) for k in f.keys()}
    w = sd["text_embedding.0.weight"]
    padded = torch.zeros(w.shape[0], 4096, dtype=w.dtype)
    padded[:, : w.shape[1]] = w
    sd["text_embedding.0.weight"] = padded
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(path))


@pytest.mark.slow
def test_native_long_windows_runs_headless_through_prompt(tmp_path):
    """The shipped ``native_long_windows`` API workflow on a ComfyUI with ``WanContextWindowsManual`` (>= 0.3.6x):
    demo model files, 64x64, 33 frames in 17-frame windows (3 windows), 8 steps; every patch node keeps its
    shipped setting. The conditioning goes through a padding node of the test (see ``_demo_native_4096``)."""
    try:
        _windows_node()
    except ImportError:
        pytest.skip("this ComfyUI has no WanContextWindowsManual")
    base = tmp_path / "base"
    _demo_native_4096(base / "models" / "diffusion_models" / "demo_native_4096.safetensors")
    (base / "custom_nodes" / "wancore_test_pad").mkdir(parents=True)
    (base / "custom_nodes" / "wancore_test_pad" / "__init__.py").write_text(PAD_NODE)
    os.symlink(ROOT, base / "custom_nodes" / "ComfyUI-WanCore")
    api = json.loads((ROOT / "workflows" / "api" / "native_long_windows.json").read_text())
    demo = "wancore-demo (built-in)"
    for node in api.values():
        i, ct = node["inputs"], node["class_type"]
        if ct == "UNETLoader":
            i["unet_name"] = "demo_native_4096.safetensors"
        elif ct in ("WanCoreTextEncoderLoader", "WanCoreVAELoader"):
            i["text_encoder_name" if "Text" in ct else "vae_name"] = demo
        elif ct == "WanCoreTextEncode":
            i.update(positive="a blue square moving right", negative="")
        elif ct == "WanCoreEmbedsToConditioning":
            i["text_len"] = 32
        elif ct == "EmptyHunyuanLatentVideo":
            i.update(width=64, height=64, length=33)
        elif ct == "KSampler":
            i.update(steps=8, cfg=6.0)
            api["90"] = {"class_type": "WanCoreTestPadConditioning", "inputs": {"conditioning": i["positive"],
                                                                                  "width": 4096}}
            api["91"] = {"class_type": "WanCoreTestPadConditioning", "inputs": {"conditioning": i["negative"],
                                                                                  "width": 4096}}
            i.update(positive=["90", 0], negative=["91", 0])
        elif ct == "ModelSamplingSD3":
            i["shift"] = 3.0
        elif ct == "WanContextWindowsManual":
            i.update(context_length=17, context_overlap=8)
    text = _serve_and_run(api, base, tmp_path)
    lines = [line for line in text.splitlines() if line.startswith(("cache easycache", "window [", "WanCore Native"))]
    print(lines, [line for line in text.splitlines() if "Prompt executed" in line])
    assert "Using context windows 5 for 9 frames." in text
    assert any(line.startswith("cache easycache: ") and line.endswith("(3 context windows)") for line in lines), lines
    assert sum(line.startswith("window [") for line in lines) == 3
    assert list((tmp_path / "out").rglob("*.mp4"))
