"""WanCoreContextWindows -> WanCoreSampler's optional context input (docs/long_video.md), called without ComfyUI:
registration, one-line refusals before queueing, a window holding the whole video == no context, windows that
do run, and one cache state per window (threshold 0 under windows == no cache under windows)."""
from __future__ import annotations

import json
import shutil
from importlib import import_module
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from wan_core.sampling.context_windows import ContextWindows


@pytest.fixture(scope="module")
def node(pack):
    names = ("context", "sampler", "cache", "conditioning", "latent", "host")
    return SimpleNamespace(**{n: import_module(f"{pack.__name__}.nodes.{n}") for n in names})




def _run(node, tiny, frames: int, context=None, cache=None, steps: int = 3):
    dit, _vae, te = tiny
    (embeds,) = node.conditioning.text_encode(te, "a fox", "")
    (lat,) = node.latent.empty_latent(64, 48, frames, 1)
    (out,) = node.sampler.sample(dit, embeds, lat, seed=5, steps=steps, guidance=5.0, context=context, cache=cache)
    return out["samples"]


def test_node_is_registered_with_its_inputs_and_output(pack):
    cls = pack.NODE_CLASS_MAPPINGS["WanCoreContextWindows"]
    assert cls.RETURN_TYPES == ("WANCORE_CONTEXT",) and cls.CATEGORY == "WanCore/sampling"
    required = cls.INPUT_TYPES()["required"]
    assert list(required) == ["context_frames", "context_overlap", "context_schedule", "context_stride",
                              "fuse_method", "freenoise", "anchor_first_frame"]
    assert required["context_frames"][1]["default"] == 81 and required["context_frames"][1]["step"] == 4
    assert required["context_overlap"][1]["default"] == 30
    assert required["context_schedule"][0] == ["static", "uniform", "looped"]
    assert required["fuse_method"][0] == ["pyramid", "flat", "linear"]
    assert required["freenoise"][1]["default"] is False and required["anchor_first_frame"][1]["default"] is True
    sampler = pack.NODE_CLASS_MAPPINGS["WanCoreSampler"].INPUT_TYPES()
    assert sampler["optional"]["context"][0] == "WANCORE_CONTEXT"


def test_node_builds_the_core_config(node):
    (ctx,) = node.context.make_context(17, 8)
    assert ctx == ContextWindows.from_frames(17, 8, schedule="static", fuse="pyramid", freenoise=False, anchor=True)
    assert (ctx.length, ctx.overlap, ctx.anchor) == (5, 2, True)
    (looped,) = node.context.make_context(17, 8, "looped", 2, "flat", True, True)  # anchor ignored for loops
    assert (looped.schedule, looped.stride, looped.fuse, looped.freenoise, looped.anchor) == \
        ("looped", 2, "flat", True, False)
    assert node.context.validate_context(17, 8, "uniform", 3, "linear", True, False) is True
    assert node.context.CONTEXT.signature_mismatches() == []


@pytest.mark.parametrize("values,words", [
    ({"context_frames": 18}, "context frames=18"),  # not 4n+1
    ({"context_frames": 17, "context_overlap": 17}, "context overlap=17"),  # overlap >= window
    ({"context_frames": 17, "context_overlap": 20}, "context overlap=20"),
    ({"context_frames": 3}, "context_frames=3"),  # below the widget's minimum
    ({"context_frames": 17, "context_overlap": 8, "context_stride": 2}, "context stride"),  # static has none
    ({"context_frames": 17, "context_overlap": 8, "context_schedule": "spiral"}, "context schedule='spiral'"),
])
def test_bad_values_are_one_line_before_queueing_and_when_run(node, values, words):
    message = node.context.validate_context(**values)
    assert isinstance(message, str) and words in message and "\n" not in message, message
    with pytest.raises(ValueError) as err:
        node.context.make_context(**values)
    assert "\n" not in str(err.value)
    if "context_frames=3" not in words:  # (the widget's range is ComfyUI's to enforce at run time)
        assert str(err.value) == message  # the same words at run time


def test_a_window_holding_the_video_is_the_plain_sampler(node, tiny, shown):
    plain = _run(node, tiny, 17)
    (ctx,) = node.context.make_context(17, 8)
    windowed = _run(node, tiny, 17, context=ctx)
    assert torch.equal(plain, windowed)
    assert shown[-1].splitlines()[0] == ("context window 5 latent frames >= the video's 5: one window, the plain "
                                         "sampler")
    (longer,) = node.context.make_context(33, 8)
    assert torch.equal(plain, _run(node, tiny, 17, context=longer))
    assert shown[-1].startswith("context window 9 latent frames >= the video's 5")
    _run(node, tiny, 17)
    assert not shown[-1].startswith("context window")  # nothing said without a context


def test_windows_run_and_differ_from_the_plain_run(node, tiny, shown):
    plain = _run(node, tiny, 33)
    (ctx,) = node.context.make_context(17, 8)
    windowed = _run(node, tiny, 33, context=ctx)
    assert windowed.shape == plain.shape == (1, 16, 9, 6, 8)
    assert torch.isfinite(windowed).all() and not torch.allclose(windowed, plain, atol=1e-3)
    assert "(3 context windows)" in shown[-1].splitlines()[0]  # anchor + 4 frames, overlap 2, over 9 frames
    assert not any(line.startswith("context window") for line in shown[-1].splitlines())


def test_each_window_has_its_own_cache_state(node, tiny, shown):
    """Threshold 0 reuses nothing, so a cache state leaking from one window into another would show here
    (easycache: the threshold-driven cache that needs no published table for the tiny model)."""
    method = "easycache"
    (ctx,) = node.context.make_context(17, 8)
    uncached = _run(node, tiny, 33, context=ctx, steps=5)
    (cache,) = node.cache.make_cache(method, threshold=0.0)
    cached = _run(node, tiny, 33, context=ctx, cache=cache, steps=5)
    assert torch.allclose(cached, uncached, atol=1e-6), (cached - uncached).abs().max()
    lines = shown[-1].splitlines()
    assert lines[0] == f"cache {method}: 30/30 DiT evaluations (3 context windows)"  # 3 windows x 5 steps x 2
    assert len([line for line in lines if line.startswith("window [")]) == 3


# ---------------------------------------------------------------- the canvas estimate knows windows

def _canvas_with_context(web_stage) -> Path:
    """tests/nodes/test_web.py's canvas harness with a context node on the sampler's context input."""
    from .test_web import API_STUB, APP_STUB, CANVAS_HARNESS

    harness = CANVAS_HARNESS.replace('"WanCoreModelLoader", "VAEDecode"]',
                                     '"WanCoreModelLoader", "VAEDecode", "WanCoreContextWindows"]')
    harness = harness.replace('["model", "embeds", "latent"], ["latent"]);',
                              '["model", "embeds", "latent", "context"], ["latent"]);\n'
                              'const context = make(5, "WanCoreContextWindows", cfg.context, [], ["context"]);\n'
                              'connect(3, context, 0, sampler, "context");')
    assert harness.count("WanCoreContextWindows") == 2
    tmp_path = web_stage(APP_STUB, API_STUB)
    (tmp_path / "canvas_harness.js").write_text(harness)
    return tmp_path / "canvas_harness.js"


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed (CI has it)")
@pytest.mark.parametrize("frames,schedule,want", [
    (65, "static", ["context windows: 7 × 5 latent frames · {flops} for 20 steps",
                    "per window: {tokens} tokens · ≈ {peak} peak"]),
    (65, "uniform", ["context windows of 5 latent frames (uniform: a new set each step)",
                     "per window: {tokens} tokens · ≈ {peak} peak"]),
    (17, "static", ["context window 5 latent frames ≥ the video's 5: one window, the plain sampler"]),
])
def test_canvas_estimate_shows_the_windows(web_stage, frames, schedule, want):
    from wan_core import estimate as E

    from .test_web import run_node

    cfg = {"loader": {"model_name": "wan2.1_t2v_1.3B_fp16.safetensors", "weight_dtype": "auto"},
           "latent": {"width": 64, "height": 64, "frames": frames, "batch_size": 1},
           "sampler": {"steps": 20, "guidance": 6.0},
           "context": {"context_frames": 17, "context_overlap": 8, "context_schedule": schedule,
                       "anchor_first_frame": True}}
    out = json.loads(run_node(_canvas_with_context(web_stage), json.dumps(cfg)))
    window = E.estimate(width=64, height=64, frames=17, model="1.3B", dtype="bf16", steps=20, guidance=6.0)
    count = len(ContextWindows.from_frames(17, 8).windows((frames - 1) // 4 + 1))
    shown = [t["t"] for t in out["sampler"]]
    for line in want:
        line = line.format(peak=E.format_bytes(window["peak_bytes"]), tokens=f"{window['tokens']:,}",
                           flops=E.format_flops(window["flops_total"] * count))
        assert line in shown, shown
