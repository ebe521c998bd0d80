"""WanCore Native Context Parallel on ComfyUI's own WanModel (docs/parallel.md section 12); skipped without ComfyUI.

Run with a ComfyUI checkout importable, e.g. ``PYTHONPATH=/path/to/ComfyUI python -m pytest -m slow
tests/nodes/test_native_parallel_comfy.py``. CPU worker processes with gloo (allowed here by
``WANCORE_CPU_PROCESSES=2``, the server option). The multi-process tests are ``slow``: rank 0 is this process,
one spawned worker builds ComfyUI's WanModel and takes the patched weights through shared memory.

* KSampler's path (``comfy.sample.sample``, UniPC, cfg 5) with the node equals the plain native run (<= 1e-5
  relative on the latent): Ulysses 2, Ring 2, CFG-parallel; with a LoRA through ComfyUI's own
  ``comfy.sd.load_lora_for_models``; with WanCore Native Cache (easycache reusing steps) and Native Attention
  (int8, osp13) in the chain;
* Wan 2.1 I2V (concat latent, CLIP tokens) and ComfyUI's VaceWanModel (two VACE inputs; Ulysses 2, CFG-parallel,
  Ring 2 with the last block hinted) equal the plain run;
* ComfyUI's context windows (each window's forward split across the ranks) with the cache per window;
* a changed LoRA strength re-sends only the weights the LoRA patches (counted, and the bytes);
* a killed worker is a WorkerError naming its device within seconds, and the next run starts a fresh pool;
  an interrupt between steps stops the run and the pool keeps working;
* bad input: too many devices, degrees that do not divide the heads or the devices, a non-Wan MODEL.
"""
from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from ..attention.helpers import random_dit_state
from .test_native_comfy import CFG, comfy, inputs, native_patcher, sample_long, with_windows

pytestmark = pytest.mark.skipif(comfy is None, reason="ComfyUI (comfy) is not importable")

from nodes import native  # noqa: E402
from wan_core.parallel.pool import WorkerError, shutdown_pools  # noqa: E402


@pytest.fixture(scope="module")
def weights():
    return random_dit_state(CFG, seed=3)


def sample(model, steps=3, cfg=5.0, seed=0, callback=None):
    _, _, ctx = inputs(grid=(2, 4, 4))
    latent = torch.zeros(1, 16, 2, 8, 8)
    noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(seed))
    pos = [[ctx, {}]]
    neg = [[torch.zeros_like(ctx), {}]]
    return comfy.sample.sample(model, noise, steps, cfg, "uni_pc", "simple", pos, neg, latent, denoise=1.0,
                               disable_pbar=True, seed=seed, callback=callback)


def rel(a, b) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


def lora_sd(strength_seed=11):
    """A rank-4 LoRA (diffusers-style names ComfyUI's loader maps) on every block's q and ffn.0."""
    g = torch.Generator().manual_seed(strength_seed)
    sd = {}
    for i in range(CFG.num_layers):
        for name, (o, n) in (("self_attn.q", (CFG.dim, CFG.dim)), ("ffn.0", (CFG.ffn_dim, CFG.dim))):
            sd[f"diffusion_model.blocks.{i}.{name}.lora_A.weight"] = torch.randn(4, n, generator=g) * 0.2
            sd[f"diffusion_model.blocks.{i}.{name}.lora_B.weight"] = torch.randn(o, 4, generator=g) * 0.2
    return sd


def with_lora(m, strength):
    return comfy.sd.load_lora_for_models(m, None, lora_sd(), strength, 0)[0]


@pytest.fixture
def cpu_workers(monkeypatch):
    monkeypatch.setenv("WANCORE_CPU_PROCESSES", "2")  # the server option, set for the test
    yield
    shutdown_pools()


@pytest.mark.slow
@pytest.mark.parametrize("ulysses, ring, cfg_parallel", [(2, 1, False), (1, 2, False), (1, 1, True)])
def test_ksampler_equals_plain_run_with_lora(weights, cpu_workers, ulysses, ring, cfg_parallel):
    m = with_lora(native_patcher(weights), 0.8)
    ref = sample(m)
    par = native.patch_parallel(m, 2, ulysses, ring, cfg_parallel)[0]
    out = sample(par)
    err = rel(out, ref)
    print(f"ulysses {ulysses} ring {ring} cfg {cfg_parallel}: rel {err:.2e}")
    assert err <= 1e-5
    assert not torch.equal(ref, sample(native_patcher(weights)))  # the LoRA matters


@pytest.mark.slow
def test_cache_and_attention_in_the_chain_and_lora_strength_resend(weights, cpu_workers):
    base = native_patcher(weights)
    shown: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(native.host, "show_text", shown.append)
        for strength in (0.8, 0.3):
            m = native.patch_cache(with_lora(base, strength), "easycache", threshold=2.0)[0]
            m = native.patch_attention(m, "sdpa", "osp13", 2)[0]  # skiparse: exact under Ulysses
            ref = sample(m, steps=8)
            ref_report = shown[-1]
            par = native.patch_parallel(m, 2, 2, 1, False)[0]
            out = sample(par, steps=8)
            run = par.wrappers[native.host.wrappers_mp("DIFFUSION_MODEL")]["wancore_context_parallel"][0].__self__
            sent = run.last_sent
            print(f"strength {strength}: rel {rel(out, ref):.2e}, sent {sent}, {shown[-1]}")
            assert rel(out, ref) <= 1e-5 and shown[-1] == ref_report and "reused" in ref_report
    n_lora = 2 * CFG.num_layers  # weights the LoRA patches
    assert sent["keys"] == n_lora  # the strength change re-sent those only
    total = sum(t.numel() * t.element_size() for t in base.model.diffusion_model.state_dict().values())
    print(f"LoRA strength change re-sent {sent['bytes'] / 1e6:.2f} MB of {total / 1e6:.2f} MB")
    assert sent["bytes"] < total / 2


@pytest.mark.slow
def test_context_windows_split_each_window(weights, cpu_workers):
    """ComfyUI's WanContextWindowsManual (5 latent frames, 3-frame windows, overlap 1) with the cache per window:
    each window's forward is split across the ranks (Ring 2 here); equal to the plain windowed run."""
    shown: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(native.host, "show_text", shown.append)
        m = with_windows(native.patch_cache(native_patcher(weights), "easycache", threshold=2.0)[0], 9, 4)
        ref = sample_long(m)
        ref_report = shown[-1]
        out = sample_long(native.patch_parallel(m, 2, 1, 2, False)[0])
    print(f"windows, ring 2: rel {rel(out, ref):.2e}; {shown[-1].splitlines()[0]}")
    assert rel(out, ref) <= 1e-5 and shown[-1] == ref_report and "2 context windows" in ref_report


@pytest.mark.slow
def test_dead_worker_is_named_and_interrupt_stops(weights, cpu_workers):
    m = native_patcher(weights)
    par = native.patch_parallel(m, 2, 2, 1, False)[0]
    ref = sample(m)
    assert rel(sample(par), ref) <= 1e-5
    from wan_core.parallel.pool import _POOLS

    pool = _POOLS[-1]

    def interrupt(step, *_):
        if step == 1:
            raise comfy.model_management.InterruptProcessingException()
    with pytest.raises(comfy.model_management.InterruptProcessingException):
        sample(par, callback=interrupt)
    assert not pool.closed and rel(sample(par), ref) <= 1e-5  # the ranks stopped with rank 0; pool reused
    t = [0.0]

    def kill(step, *_):  # the worker dies in the middle of a run
        if step == 1:
            os.kill(pool.procs[0].pid, signal.SIGKILL)
            t[0] = time.monotonic()
    with pytest.raises(WorkerError, match=r"rank 1 \(pid \d+, cpu"):
        sample(par, callback=kill)
    print(f"worker death reported after {time.monotonic() - t[0]:.2f} s")
    assert time.monotonic() - t[0] < 30 and pool.closed
    assert rel(sample(par), ref) <= 1e-5  # a fresh pool
    assert _POOLS[-1] is not pool


def test_bad_input_is_one_line(weights, monkeypatch):
    monkeypatch.delenv("WANCORE_CPU_PROCESSES", raising=False)
    m = native_patcher(weights)
    with pytest.raises(ValueError, match=r"ulysses=4 does not divide the model's 2 attention heads; valid ulysses "
                                         r"degrees: 1, 2"):
        native.patch_parallel(m, 4, 4, 1, False)
    with pytest.raises(ValueError, match=r"= 1 processes but 2 devices; for 2 devices with cfg 1: ulysses=1 ring=2, "
                                         r"ulysses=2 ring=1"):
        native.patch_parallel(m, 2, 1, 1, False)
    with pytest.raises(ValueError, match=r"devices=2 but this server has no GPU"):
        native.patch_parallel(m, 2, 2, 1, False)
    assert native.patch_parallel(m, 1, 1, 1, False)[0] is m
    other = m.clone()
    import copy

    other.model = copy.copy(m.model)  # shares the modules: m is not used after this
    other.model.diffusion_model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match=r"this MODEL is torch.nn.modules.linear.Linear"):
        native.patch_parallel(other, 2, 2, 1, False)


I2V = CFG.replace(in_dim=36, image_dim=1280, name="tiny-native-i2v")


class ClipVisionOutput:
    """What ComfyUI's CLIPVisionEncode outputs, as far as the Wan model reads it."""

    def __init__(self, hidden: torch.Tensor):
        self.penultimate_hidden_states = hidden


@pytest.mark.slow
def test_i2v_with_clip_tokens_equals_plain_run(cpu_workers):
    """Wan 2.1 I2V (in_dim 36: noise + mask + image latent; 257 CLIP tokens through img_emb into the image
    cross-attention, ``context_img_len``), conditioned as WanImageToVideo does, Ulysses 2."""
    m = native_patcher(random_dit_state(I2V, seed=5))
    assert m.model.diffusion_model.img_emb is not None
    g = torch.Generator().manual_seed(8)
    image = torch.randn(1, 16, 2, 8, 8, generator=g)
    mask = torch.ones(1, 1, 2, 8, 8)
    mask[:, :, 0] = 0.0
    extra = {"concat_latent_image": image, "concat_mask": mask,
             "clip_vision_output": ClipVisionOutput(torch.randn(1, 257, 1280, generator=g))}
    _, _, ctx = inputs(grid=(2, 4, 4))
    latent = torch.zeros(1, 16, 2, 8, 8)
    noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(0))

    def run(model, cond_extra):
        pos, neg = [[ctx, dict(cond_extra)]], [[torch.zeros_like(ctx), dict(cond_extra)]]
        return comfy.sample.sample(model, noise, 3, 5.0, "uni_pc", "simple", pos, neg, latent, denoise=1.0,
                                   disable_pbar=True, seed=0)
    ref = run(m, extra)
    out = run(native.patch_parallel(m, 2, 2, 1, False)[0], extra)
    err = rel(out, ref)
    print(f"i2v ulysses 2: rel {err:.2e}")
    assert err <= 1e-5
    no_clip = {k: v for k, v in extra.items() if k != "clip_vision_output"}
    assert rel(run(m, no_clip), ref) > 1e-3  # the CLIP tokens matter


@pytest.mark.slow
@pytest.mark.parametrize("ulysses, ring, cfg_parallel, layers", [(2, 1, False, (0, 2, 4)), (1, 1, True, (0, 2, 4)),
                                                                (1, 2, False, tuple(range(6)))])
def test_vace_with_two_inputs_equals_plain_run(cpu_workers, monkeypatch, ulysses, ring, cfg_parallel, layers):
    """ComfyUI's VaceWanModel (VACE blocks after main blocks ``layers``; all 6: the last block's hint is added to
    the gathered output) with two VACE inputs, conditioned as WanVaceToVideo appends them (vace_frames /
    vace_mask / vace_strength lists, on both conds)."""
    m = native_patcher(random_dit_state(CFG.replace(vace_layers=layers, vace_in_dim=96, name="tiny-vace"), seed=4))
    assert type(m.model.diffusion_model).__name__ == "VaceWanModel"
    g = torch.Generator().manual_seed(9)
    frames = [torch.randn(1, 32, 2, 8, 8, generator=g) for _ in range(2)]
    masks = [(torch.rand(1, 64, 2, 8, 8, generator=g) > 0.5).float() for _ in range(2)]
    _, _, ctx = inputs(grid=(2, 4, 4))
    latent = torch.zeros(1, 16, 2, 8, 8)
    noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(0))

    def run(model, strength):
        extra = {"vace_frames": frames, "vace_mask": masks, "vace_strength": strength}
        pos, neg = [[ctx, dict(extra)]], [[torch.zeros_like(ctx), dict(extra)]]
        return comfy.sample.sample(model, noise, 3, 5.0, "uni_pc", "simple", pos, neg, latent, denoise=1.0,
                                   disable_pbar=True, seed=0)
    ref = run(m, [0.8, 0.5])
    split = []
    real = native.parallel_node.run_vace_block
    monkeypatch.setattr(native.parallel_node, "run_vace_block", lambda *a: split.append(1) or real(*a))
    out = run(native.patch_parallel(m, 2, ulysses, ring, cfg_parallel)[0], [0.8, 0.5])
    err = rel(out, ref)
    print(f"vace ulysses {ulysses} ring {ring} cfg {cfg_parallel} layers {layers}: rel {err:.2e}")
    assert err <= 1e-5
    assert len(split) == 3 * 2 * len(layers)  # every VACE block of every step ran split, for both inputs
    assert rel(run(m, [0.8, 0.0]), ref) > 1e-3  # the second input's hints matter


@pytest.mark.slow
def test_vace_with_block_reuse_cache_equals_plain_run(cpu_workers):
    """VaceWanModel + WanCore Native Cache (MagCache: the block stack's residual reused, ComfyUI still calls the
    VACE blocks with strength 0, unsplit on rank 0) + the node, Ulysses 2: equal to the plain cached run, same
    cache report."""
    from .test_native_comfy import cache_kwargs

    m = native_patcher(random_dit_state(CFG.replace(vace_layers=(0, 2, 4), vace_in_dim=96, name="v"), seed=4))
    g = torch.Generator().manual_seed(9)
    extra = {"vace_frames": [torch.randn(1, 32, 2, 8, 8, generator=g)], "vace_mask": [torch.ones(1, 64, 2, 8, 8)],
             "vace_strength": [0.7]}
    _, _, ctx = inputs(grid=(2, 4, 4))
    latent = torch.zeros(1, 16, 2, 8, 8)
    noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(0))
    shown: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(native.host, "show_text", shown.append)
        m = native.patch_cache(m, "magcache", **cache_kwargs("magcache", 8))[0]

        def run(model):
            pos, neg = [[ctx, dict(extra)]], [[torch.zeros_like(ctx), dict(extra)]]
            return comfy.sample.sample(model, noise, 8, 5.0, "uni_pc", "simple", pos, neg, latent, denoise=1.0,
                                       disable_pbar=True, seed=0)
        ref = run(m)
        ref_report = shown[-1]
        out = run(native.patch_parallel(m, 2, 2, 1, False)[0])
    print(f"vace + magcache, ulysses 2: rel {rel(out, ref):.2e}; {shown[-1].splitlines()[0]}")
    assert rel(out, ref) <= 1e-5 and shown[-1] == ref_report and "reused" in ref_report
