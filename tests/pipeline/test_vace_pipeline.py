"""VACE through the pipeline (docs/vace.md section 3): reference frames sampled in front and trimmed, the same
context in both guidance passes, context windows slicing the context with the references heading every window,
the two experts of a VACE-Fun pair, the request checks."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from wan_core.config import DIT_PRESETS
from wan_core.demo import tiny_random_models
from wan_core.dit.model import WanDiT
from wan_core.dit.moe import WanMoE
from wan_core.pipeline import GenerationConfig, WanPipeline
from wan_core.sampling import ClassifierFreeGuidance, build_schedule, initial_latent, make_noise, sample
from wan_core.sampling.context_windows import ContextWindows
from wan_core.vace import VaceRequest, vace_context
from wan_core import latent_format

from ..vace.helpers import vace_dit

CFG = GenerationConfig(prompt="a red ball", width=16, height=16, frames=9, steps=2, guidance=4.0, seed=3)


class Spy:
    """Records the VACE contexts (and the frames of x) of every DiT call."""

    def __init__(self, dit):
        self.calls: list[tuple[int, list[torch.Tensor]]] = []
        self.handle = dit.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, _module, args, kwargs):
        pairs = kwargs.get("vace_context")
        self.calls.append((args[0].shape[0], args[0].shape[2], [c.clone() for c, _ in pairs]))


def random_request(frames: int, refs: int, scale: float = 0.8, seed: int = 5) -> VaceRequest:
    """A random context (the plumbing does not care how it was encoded) for ``refs`` + ``frames`` latent frames
    of 16 x 16 pixels."""
    g = torch.Generator().manual_seed(seed)
    return VaceRequest(((torch.randn(1, 96, refs + frames, 2, 2, generator=g), scale),), refs)


@pytest.fixture(scope="module")
def tiny():
    _, vae, _ = tiny_random_models(seed=0)
    g = torch.Generator().manual_seed(2)
    cond, uncond = [torch.randn(7, 32, generator=g)], [torch.randn(5, 32, generator=g)]  # text embeddings
    return WanPipeline(vace_dit(1), vae), cond, uncond, random_request(3, 2)


def test_references_sampled_in_front_and_trimmed(tiny):
    pipe, cond, uncond, request = tiny
    assert request.ref_frames == 2 and request.latent_shape == (2 + 3, 2, 2)
    out = pipe.sample_latents(cond, uncond, CFG, vace=request)
    assert out.shape == (1, 16, 3, 2, 2)
    # independent of the pipeline's plumbing: the full latent sampled by hand, the references dropped
    schedule = build_schedule(CFG.schedule_config())
    x = initial_latent(make_noise(CFG.seed, (1, 16, 5, 2, 2)), schedule, None)
    ctx = request.inputs[0][0]

    def model(xx, t, text):
        return pipe.dit(xx, t, text, vace_context=ctx, vace_scale=0.8).float()

    ref = sample(ClassifierFreeGuidance(model, cond, uncond, CFG.guidance), x, schedule, CFG.solver)
    torch.testing.assert_close(out, latent_format.from_model(ref[:, :, 2:]), rtol=1e-5, atol=1e-5)
    assert pipe.decode(out).shape == (1, 3, 9, 16, 16)  # the video's frames only


@pytest.mark.parametrize("batched", [False, True])
def test_both_guidance_passes_get_the_same_context(tiny, batched):
    pipe, cond, uncond, request = tiny
    spy = Spy(pipe.dit)
    try:
        pipe.sample_latents(cond, uncond, CFG.replace(batched_cfg=batched, steps=1), vace=request, cache="off")
    finally:
        spy.handle.remove()
    assert len(spy.calls) == (1 if batched else 2)
    for rows, frames, contexts in spy.calls:
        assert frames == 5 and rows == (2 if batched else 1)
        assert torch.equal(contexts[0], request.inputs[0][0])  # the DiT repeats it for the [cond; uncond] batch


def test_one_window_over_the_video_is_the_plain_run(tiny):
    pipe, cond, uncond, request = tiny
    plain = pipe.sample_latents(cond, uncond, CFG, vace=request)
    one = pipe.sample_latents(cond, uncond, CFG.replace(context=ContextWindows(3, 1)), vace=request)
    assert torch.equal(plain, one)


def test_windows_slice_the_context_and_keep_the_references_first(tiny):
    pipe, cond, uncond, _ = tiny
    cfg = CFG.replace(frames=17, steps=1, context=ContextWindows(3, 0))  # 5 video latent frames, windows of 3
    # each latent frame's context holds its index, so a slice shows which frames it holds
    marked = torch.arange(6.0).view(1, 1, -1, 1, 1).expand(1, 96, 6, 2, 2).contiguous()
    request = VaceRequest(((marked, 1.0),), 1)
    spy = Spy(pipe.dit)
    try:
        out = pipe.sample_latents(cond, uncond, cfg, vace=request, cache="off")
    finally:
        spy.handle.remove()
    assert out.shape[2] == 5
    windows = dataclasses.replace(cfg.context, head=1).windows(6, 0)
    assert windows == [(0, 1, 2, 3), (0, 1, 4, 5)]  # the reference, the video's frame 0, then the window's body
    seen = [tuple(int(v) for v in c[0][0, 40, :, 0, 0]) for _, _, c in spy.calls]
    assert seen == [w for w in windows for _ in range(2)]  # both guidance passes of each window


def test_head_frames_of_context_windows():
    plain = ContextWindows(3, 1, schedule="uniform", stride=2, freenoise=True)
    headed = dataclasses.replace(plain, head=2)
    assert not headed.covers(6) and headed.covers(5)
    for step in range(3):
        assert headed.windows(9, step) == [(0, 1, *(i + 2 for i in w)) for w in plain.windows(7, step)]
    for w in headed.windows(9, 0):
        body = tuple(i - 2 for i in w[2:])
        assert torch.equal(headed.weights(w, 9), torch.cat([torch.ones(2), plain.weights(body, 7)]))
    noise = torch.randn(1, 2, 9, 2, 2)
    out = headed.reschedule_noise(noise, 7)
    assert torch.equal(out[:, :, :2], noise[:, :, :2])
    assert torch.equal(out[:, :, 2:], plain.reschedule_noise(noise[:, :, 2:], 7))


def test_vace_fun_expert_pair(tiny):
    base, cond, uncond, request = tiny
    high, low = vace_dit(3), vace_dit(4)
    pipe = WanPipeline(WanMoE(high, low, boundary=0.5), base.vae)
    spies = [Spy(high), Spy(low)]
    try:
        out = pipe.sample_latents(cond, uncond, CFG.replace(steps=4, shift=1.0), vace=request, cache="off")
    finally:
        for s in spies:
            s.handle.remove()
    assert out.shape[2] == 3 and pipe.moe_steps == ["high", "high", "low", "low"]  # timesteps 999, 749, 499, 249
    for spy, steps in zip(spies, (2, 2)):  # both guidance passes of every step of the expert
        assert len(spy.calls) == 2 * steps and all(torch.equal(c[0], request.inputs[0][0]) for _, _, c in spy.calls)


def test_request_checks(tiny):
    pipe, cond, uncond, request = tiny
    t2v = WanDiT(DIT_PRESETS["tiny"]).eval()
    with pytest.raises(ValueError, match="has no VACE blocks"):
        WanPipeline(t2v, pipe.vae).sample_latents(cond, uncond, CFG, vace=request)
    with pytest.raises(ValueError, match="is a VACE model: give VACE inputs"):
        pipe.sample_latents(cond, uncond, CFG)
    with pytest.raises(ValueError, match=r"expected \[B, C, 5, 2, 2\]"):
        pipe.sample_latents(cond, uncond, CFG.replace(frames=13), vace=request)
    with pytest.raises(ValueError, match="VACE frames"):
        pipe.vace_request(CFG, torch.zeros(1, 3, 5, 16, 16))


def test_separate_reference_strength(tiny):
    pipe, *_ = tiny
    g = torch.Generator().manual_seed(9)
    ref = torch.rand(3, 16, 16, generator=g) * 2 - 1
    frames = torch.rand(1, 3, 1, 16, 16, generator=g) * 2 - 1
    cfg = CFG.replace(frames=1)
    req = pipe.vace_request(cfg, frames, None, [[ref]], scale=0.6, ref_scale=1.2)
    (refs, s_ref), (control, s_ctl) = req.inputs
    assert (s_ref, s_ctl, req.ref_frames) == (1.2, 0.6, 1)
    one = pipe.vace_request(cfg, frames, None, [[ref]], scale=0.6)  # no ref_scale: the official single context
    assert len(one.inputs) == 1 and one.ref_frames == 1
    expected_refs = vace_context(pipe.vae, None, None, [[ref]], size=(1, 16, 16)).context
    expected_control = vace_context(pipe.vae, frames).context
    torch.testing.assert_close(refs, expected_refs)
    assert torch.equal(control[:, :, :1], torch.zeros_like(control[:, :, :1]))  # its reference slot: empty
    torch.testing.assert_close(control[:, :, 1:], expected_control)
    torch.testing.assert_close(one.inputs[0][0][:, :, 1:], expected_control)
