"""Classifier-free guidance (docs/wan_spec.md section 6.1): v = v_u + g (v_c - v_u), one pass at g = 1, separate vs
batched, and the plug-in points for a CFG cache and a per-branch model cache."""
from __future__ import annotations

import contextlib
import math

import pytest
import torch

from wan_core.sampling import ClassifierFreeGuidance, build_schedule, combine_guidance, concat_contexts, sample


class ContextModel:
    """Stand-in DiT: v = tanh(x) * (1 + t/1000) + mean of the (zero-padding-insensitive) context rows.

    Context is [B, L, D] or a list of [L_i, D]; the context term is sum over rows / 512, like a model that
    pads every context to 512 rows with zeros. Records the batch size of each call.
    """

    def __init__(self):
        self.batch_sizes: list[int] = []

    def __call__(self, x, timestep, context):
        self.batch_sizes.append(x.shape[0])
        if isinstance(context, list):
            summary = torch.stack([c.sum(0) for c in context])
        else:
            summary = context.sum(1)
        term = summary.mean(-1) / 512
        tt = timestep.to(x.dtype) / 1000
        shape = (-1,) + (1,) * (x.ndim - 1)
        return torch.tanh(x) * (1 + tt.reshape(shape)) + term.reshape(shape)


def contexts(as_list: bool):
    gen = torch.Generator().manual_seed(5)
    cond = torch.randn(2, 7, 8, generator=gen)
    uncond = torch.randn(2, 11, 8, generator=gen)  # a longer negative prompt
    if as_list:
        return [cond[0], cond[1][:5]], [uncond[0], uncond[1][:3]]
    return cond, uncond


def run(guide, steps=6):
    x = torch.randn(2, 16, 2, 4, 4, generator=torch.Generator().manual_seed(9))
    return sample(guide, x, build_schedule(steps=steps, shift=5.0), "unipc")


def test_guidance_formula_on_constant_branches():
    v_c, v_u = torch.full((1, 4), 3.0), torch.full((1, 4), 1.0)
    assert torch.equal(combine_guidance(v_c, v_u, 5.0), torch.full((1, 4), 11.0))  # 1 + 5 * (3 - 1)
    assert torch.equal(combine_guidance(v_c, v_u, 1.0), v_c)
    assert torch.equal(combine_guidance(v_c, v_u, 0.0), v_u)

    def model(x, t, ctx):
        return torch.full_like(x, float(ctx))

    guide = ClassifierFreeGuidance(model, cond=3.0, uncond=1.0, guidance=6.0)
    out = guide(torch.zeros(1, 4), 0.5, torch.tensor([500]))
    assert torch.equal(out, torch.full((1, 4), 13.0))  # 1 + 6 * (3 - 1)


def test_guidance_one_runs_only_the_cond_pass():
    model = ContextModel()
    cond, _ = contexts(False)
    run(ClassifierFreeGuidance(model, cond=cond, uncond=None, guidance=1.0), steps=6)
    assert model.batch_sizes == [2] * 6


def test_guidance_zero_runs_only_the_uncond_pass():
    calls = []

    def model(x, t, ctx):
        calls.append(ctx)
        return torch.zeros_like(x)

    guide = ClassifierFreeGuidance(model, cond="c", uncond="u", guidance=0.0)
    run(guide, steps=4)
    assert calls == ["u"] * 4


def test_separate_passes_are_two_calls_per_step():
    model = ContextModel()
    cond, uncond = contexts(False)
    run(ClassifierFreeGuidance(model, cond=cond, uncond=uncond, guidance=5.0), steps=6)
    assert model.batch_sizes == [2] * 12


@pytest.mark.parametrize("as_list", [False, True])
def test_batched_equals_separate(as_list):
    cond, uncond = contexts(as_list)
    separate_model, batched_model = ContextModel(), ContextModel()
    separate = run(ClassifierFreeGuidance(separate_model, cond, uncond, 5.0))
    batched = run(ClassifierFreeGuidance(batched_model, cond, uncond, 5.0, batched=True))
    assert batched_model.batch_sizes == [4] * 6
    assert (separate - batched).abs().max().item() <= 1e-6


def test_concat_contexts_pads_the_shorter_tensor_with_zeros():
    a, b = torch.ones(1, 3, 2), torch.full((2, 5, 2), 2.0)
    both = concat_contexts(a, b)
    assert both.shape == (3, 5, 2)
    assert torch.equal(both[0, :3], a[0]) and both[0, 3:].abs().sum() == 0 and torch.equal(both[1:], b)
    with pytest.raises(ValueError, match="same D"):
        concat_contexts(torch.ones(1, 3, 2), torch.ones(1, 3, 4))
    with pytest.raises(ValueError, match="both as lists"):
        concat_contexts([torch.ones(3, 2)], torch.ones(1, 3, 2))


@pytest.mark.parametrize("bad", [-0.5, math.nan, math.inf, "5"])
def test_invalid_guidance_is_rejected(bad):
    with pytest.raises(ValueError, match="guidance"):
        ClassifierFreeGuidance(ContextModel(), cond="c", uncond="u", guidance=bad)


def test_guidance_without_negative_context_says_what_to_pass():
    with pytest.raises(ValueError, match="negative prompt"):
        ClassifierFreeGuidance(ContextModel(), cond="c", uncond=None, guidance=5.0)


class SkipOddStepsCache:
    """Test double of a CFG cache: skips the uncond pass on odd steps, estimating it as v_cond plus the
    residual (v_uncond - v_cond) recorded at the last full step."""

    def __init__(self):
        self.step = None
        self.residual = None
        self.events = []

    def begin_step(self, step, num_steps, sigma):
        self.step = step
        self.events.append(("begin", step, num_steps))

    def skip_uncond(self):
        return self.step % 2 == 1

    def estimate_uncond(self, v_cond):
        self.events.append(("estimate", self.step))
        return v_cond + self.residual

    def record(self, v_cond, v_uncond):
        self.events.append(("record", self.step))
        self.residual = v_uncond - v_cond


def test_cfg_cache_skips_uncond_and_uses_its_estimate():
    cache = SkipOddStepsCache()
    calls = []
    estimates = {}

    def model(x, t, ctx):
        calls.append(ctx)
        return x * 0 + (2.0 if ctx == "c" else -1.0) * (t.to(x.dtype) / 1000).reshape(-1, 1)

    guide = ClassifierFreeGuidance(model, cond="c", uncond="u", guidance=4.0, cfg_cache=cache)
    schedule = build_schedule(steps=4, shift=5.0)
    x = torch.zeros(1, 3)
    for i in range(4):  # drive it as the loop does
        guide.begin_step(i, 4, schedule.sigmas[i].item())
        t = schedule.timestep_batch(i, 1)
        estimates[i] = guide(x, schedule.sigmas[i].item(), t)
    assert calls == ["c", "u", "c", "c", "u", "c"]
    assert [e for e in cache.events if e[0] != "begin"] == [("record", 0), ("estimate", 1), ("record", 2),
                                                            ("estimate", 3)]
    t1 = schedule.timesteps[1].item() / 1000
    t0 = schedule.timesteps[0].item() / 1000
    v_c1, v_u1_hat = 2.0 * t1, 2.0 * t1 + (-1.0 - 2.0) * t0  # estimate = v_cond + residual of step 0
    assert estimates[1] == pytest.approx(torch.full((1, 3), v_u1_hat + 4.0 * (v_c1 - v_u1_hat)), abs=1e-6)


class RecordingBranchCache:
    def __init__(self):
        self.log = []

    def begin_step(self, step, num_steps, sigma):
        self.log.append(("step", step))

    @contextlib.contextmanager
    def branch(self, name):
        self.log.append(("enter", name))
        yield
        self.log.append(("exit", name))


@pytest.mark.parametrize("batched,per_step", [
    (False, [("enter", "cond"), ("exit", "cond"), ("enter", "uncond"), ("exit", "uncond")]),
    (True, [("enter", "cond+uncond"), ("exit", "cond+uncond")]),
])
def test_branch_cache_is_told_the_step_and_each_branch(batched, per_step):
    cache = RecordingBranchCache()
    cond, uncond = contexts(False)
    run(ClassifierFreeGuidance(ContextModel(), cond, uncond, 5.0, batched=batched, branch_cache=cache), steps=3)
    expected = []
    for i in range(3):
        expected += [("step", i)] + per_step
    assert cache.log == expected
