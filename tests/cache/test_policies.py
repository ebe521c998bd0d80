"""TeaCache, MagCache and EasyCache: decisions equal straightforward re-implementations of the published loops
(alternating cond/uncond call counters, as in the methods' Wan 2.1 scripts); threshold 0 skips nothing, a huge
threshold skips all but the forced steps; batched and unbatched CFG decide the same; calibration measures what
MagCache's calibration measures."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from wan_core.cache import CacheConfig, Calibration, expected_evaluations, start_session
from wan_core.cache.easycache import EasyCache
from wan_core.cache.magcache import nearest_resample
from wan_core.cache.published import MAGCACHE_RATIOS, TEACACHE_COEFFICIENTS
from wan_core.cache.teacache import TeaCache
from wan_core.config import DIT_PRESETS
from wan_core.dit.loader import load_dit

from .helpers import ACCEL, CFG_ACCEL, counting, random_state, run, tiny_dit

COEF_13 = TEACACHE_COEFFICIENTS["e"]["wan2.1-t2v-1.3b"]


@pytest.fixture(scope="module")
def dit():
    return tiny_dit()


@pytest.fixture(scope="module")
def calibration(dit):
    _, report = run(dit, "calibrate", steps=12, size=32, frames=5)
    return report.calibration


def configs(calibration, threshold):
    return {
        "teacache": CacheConfig.preset("teacache", threshold=threshold, coefficients=COEF_13),
        "teacache-e0": CacheConfig.preset("teacache", threshold=threshold, teacache_mode="e0", calibration=calibration),
        "magcache": CacheConfig.preset("magcache", threshold=threshold, calibration=calibration),
        "easycache": CacheConfig.preset("easycache", threshold=threshold),
    }


class StubWan13B:
    """What start_session reads from a WanDiT (config, cache slot, run_blocks), with the 1.3B model's shapes."""

    config = DIT_PRESETS["wan2.1-t2v-1.3b"]
    cache = None

    def run_blocks(self, *args):
        raise AssertionError("not called")


# ---------------------------------------------------------------- the published loops, re-implemented


def teacache_published(indicators, coefficients, thresh, ret_calls, cutoff_calls):
    """TeaCache4Wan2.1's teacache_forward decision: calls alternate cond (even) / uncond (odd)."""
    acc, prev, out = [0.0, 0.0], [None, None], []
    for cnt, ind in enumerate(indicators):
        p = cnt % 2
        if cnt < ret_calls or cnt >= cutoff_calls:
            calc, acc[p] = True, 0.0
        else:
            acc[p] += np.poly1d(coefficients)(((ind - prev[p]).abs().mean() / prev[p].abs().mean()).item())
            calc = not acc[p] < thresh
            if calc:
                acc[p] = 0.0
        prev[p] = ind
        out.append(calc)
    return out


def magcache_published(mag_ratios, steps, thresh, k, retention):
    """MagCache4Wan2.1's magcache_forward decision, with its nearest_interp when the step count differs."""
    ratios = np.array(mag_ratios)
    if len(ratios) != steps * 2:
        def interp(src, n):
            idx = np.round(np.arange(n) * ((len(src) - 1) / (n - 1))).astype(int)
            return src[idx]
        ratios = np.concatenate([interp(ratios[0::2], steps).reshape(-1, 1),
                                 interp(ratios[1::2], steps).reshape(-1, 1)], axis=1).reshape(-1)
    ratio, err, skips, out = [1.0, 1.0], [0.0, 0.0], [0, 0], []
    for cnt in range(2 * steps):
        p, skip = cnt % 2, False
        if cnt >= int(2 * steps * retention):
            ratio[p] *= ratios[cnt]
            skips[p] += 1
            err[p] += np.abs(1 - ratio[p])
            if err[p] < thresh and skips[p] <= k:
                skip = True
            else:
                err[p], skips[p], ratio[p] = 0.0, 0, 1.0
        out.append(not skip)
    return out


def easycache_published(xs, model, steps, thresh, ret_calls, cutoff_calls):
    """EasyCache4Wan2.1's easycache_forward: the even (cond) call decides for the pair."""
    s = {"acc": 0.0, "k": None, "in_even": None, "out_even": None, "prev_prev": None, "out_odd": None}
    calc, out = True, []
    for cnt in range(2 * steps):
        even, raw = cnt % 2 == 0, xs[cnt // 2]
        if even:
            if cnt < ret_calls or cnt >= cutoff_calls:
                calc, s["acc"] = True, 0.0
            elif s["in_even"] is not None and s["out_even"] is not None:
                change = (raw - s["in_even"]).abs().mean()
                if s["k"] is not None:
                    s["acc"] += (s["k"] * (change / s["out_even"].abs().mean())).item()
                    calc = not s["acc"] < thresh
                    if calc:
                        s["acc"] = 0.0
                else:
                    calc = True
            else:
                calc = True
            s["in_even"] = raw
        if not calc and (s["out_even"] if even else s["out_odd"]) is not None:
            out.append(False)
            continue
        o = model(raw, cnt // 2, cnt % 2)
        if even:
            if s["out_even"] is not None and s["prev_prev"] is not None:
                s["k"] = ((o - s["out_even"]).abs().mean() / (s["in_even"] - s["prev_prev"]).abs().mean()).item()
            s["prev_prev"] = s["in_even"]
            s["out_even"] = o
        else:
            s["out_odd"] = o
        out.append(True)
    return out


def interleave(cond, uncond):
    return [v for pair in zip(cond, uncond) for v in pair]


# ---------------------------------------------------------------- decisions


@pytest.mark.parametrize("mode", ["e", "e0"])
def test_teacache_decides_as_the_published_loop(mode):
    steps = 30
    # indicators drifting by a few percent per step, as Wan's timestep embedding does (relative L1 0.01-0.1)
    g = torch.Generator().manual_seed(2)
    base, walk, seq = torch.randn(1, 64, generator=g), torch.zeros(1, 64), []
    for _ in range(steps):
        walk = walk + 0.06 * torch.rand(1, 1, generator=g) * torch.randn(1, 64, generator=g)
        seq.append(base + walk)
    embeds = [(t, t) for t in seq]  # the same tensor stands for e and e0: the mode picks the argument
    coefs = TEACACHE_COEFFICIENTS[mode]["wan2.1-t2v-1.3b"]
    ret, last = {"e": (1, True), "e0": (5, False)}[mode]
    mixed = 0
    for thresh in (0.05, 0.1, 0.2, 0.5):
        policy = TeaCache(coefs, thresh, mode, ret, steps - int(last))
        ours = {"cond": [], "uncond": []}
        for i, (e, e0) in enumerate(embeds):
            for branch in ours:
                compute = policy.should_compute(branch, i, e, e0)
                ours[branch].append(compute)
                if compute:
                    policy.computed(branch, i, torch.zeros(1))
        indicators = [(e0 if mode == "e0" else e) for e, e0 in embeds for _ in range(2)]
        want = teacache_published(indicators, coefs, thresh, 2 * ret, 2 * steps - (2 if last else 0))
        assert interleave(ours["cond"], ours["uncond"]) == want, thresh
        mixed += 0 < sum(want) < len(want)
    assert mixed >= 2  # the comparison is not vacuous


@pytest.mark.parametrize("steps", [50, 30])
@pytest.mark.parametrize("model", ["wan2.1-t2v-1.3b", "wan2.1-t2v-14b"])
def test_magcache_decides_as_the_published_loop(steps, model):
    stub = StubWan13B()
    stub.config = DIT_PRESETS[model]
    session = start_session("magcache", stub, steps, 5.0)
    policy = session.block_policy
    defaults = {"wan2.1-t2v-1.3b": (0.12, 4), "wan2.1-t2v-14b": (0.24, 6)}[model]
    assert (policy.threshold, policy.max_skips, policy.retention_calls) == (*defaults, int(2 * steps * 0.2))
    e = torch.zeros(1, 4)
    ours = {"cond": [], "uncond": []}
    for i in range(steps):
        for branch in ours:
            compute = policy.should_compute(branch, i, e, e)
            ours[branch].append(compute)
            if compute:
                policy.computed(branch, i, e)
    want = magcache_published(MAGCACHE_RATIOS[model], steps, *defaults, 0.2)
    assert interleave(ours["cond"], ours["uncond"]) == want
    assert 0 < sum(want) < len(want)


def test_nearest_resample_is_magcaches_nearest_interp():
    src = list(np.linspace(1.0, 0.8, 49))
    for n in (1, 2, 10, 30, 49, 80):
        idx = np.round(np.arange(n) * ((len(src) - 1) / (n - 1))).astype(int) if n > 1 else [-1]
        assert nearest_resample(src, n) == [src[i] for i in idx]


def test_easycache_decides_as_the_published_loop():
    steps = 24
    g = torch.Generator().manual_seed(0)
    xs, x = [], torch.randn(1, 16, 2, 4, 4, generator=g)
    for _ in range(steps):
        xs.append(x)
        x = x * 0.93 + 0.02 * torch.randn(x.shape, generator=g)

    def model(raw, step, branch):  # a deterministic "velocity" depending on input, step and branch
        return 1.5 * raw + 0.1 * (1 + branch) * torch.sin(raw * (step + 1))

    for thresh in (0.02, 0.1, 0.4):
        policy = EasyCache(thresh, first=5, stop=steps - 1)
        ours = []
        for i in range(steps):
            for b, branch in enumerate(("cond", "uncond")):
                skip = policy.skip(i, branch, xs[i], [branch])
                ours.append(not skip)
                if not skip:
                    policy.computed(branch, xs[i], model(xs[i], i, b))
        assert ours == easycache_published(xs, model, steps, thresh, 10, 2 * steps - 2), thresh


# ---------------------------------------------------------------- thresholds 0 and huge, through the sampler


@pytest.mark.parametrize("method", ["teacache", "teacache-e0", "magcache", "easycache"])
def test_threshold_zero_skips_nothing(dit, calibration, method):
    with counting(dit) as counts:
        _, report = run(dit, configs(calibration, 0.0)[method], steps=10, size=32, frames=5)
    assert report.computed == report.total == counts["blocks"].rows == 20


@pytest.mark.parametrize("method,forced", [
    ("teacache", 2),     # the first step and the last
    ("teacache-e0", 5),  # the first five (use_ret_steps), no forced last step
    ("magcache", 7),     # steps 0-3 (retention 0.2 of 20), then one computed step per K + 1 = 5: 3 more
    ("easycache", 5),    # steps 0-3 (20 %) and the last
])
def test_huge_threshold_skips_all_but_the_forced_steps(dit, calibration, method, forced):
    steps = 20
    with counting(dit) as counts:
        _, report = run(dit, configs(calibration, 1e9)[method], steps=steps, size=32, frames=5)
    assert report.computed == counts["blocks"].rows == 2 * forced
    assert report.count("computed", "cond") == report.count("computed", "uncond") == forced
    if method != "teacache-e0":
        assert expected_evaluations(method, steps, 5.0)["minimum"] == 2 * forced


# ---------------------------------------------------------------- batched / unbatched, guidance, accelerations


@pytest.mark.parametrize("method", ["wan", "teacache", "magcache", "easycache"])
def test_batched_and_unbatched_cfg_take_the_same_decisions(dit, calibration, method):
    cache = {"wan": CacheConfig.preset("wan"), **configs(calibration, 0.3)}[method]
    out_u, rep_u = run(dit, cache, steps=12, size=32, frames=5)
    out_b, rep_b = run(dit, cache, steps=12, size=32, frames=5, batched=True)
    assert rep_u.status == rep_b.status
    assert rep_u.attention == rep_b.attention
    torch.testing.assert_close(out_b, out_u, rtol=1e-4, atol=1e-4)


def test_one_branch_of_a_batched_forward_can_reuse_alone(dit):
    """MagCache with different cond / uncond tables: the batched forward computes only the branch that must."""
    cal = Calibration(None, 8, (1.0,) * 8, (1.0,) + (0.5,) * 7)  # cond never drifts, uncond always does
    cache = CacheConfig.preset("magcache", calibration=cal, threshold=0.2, start=0.0)
    with counting(dit) as counts:
        out_b, rep_b = run(dit, cache, steps=8, size=32, frames=5, batched=True)
    out_u, rep_u = run(dit, cache, steps=8, size=32, frames=5)
    assert rep_b.count("reused", "cond") == 6 and rep_b.count("computed", "uncond") == 8  # cond: steps 0, 5
    assert rep_b.status == rep_u.status
    assert counts["blocks"].rows == rep_b.computed
    torch.testing.assert_close(out_b, out_u, rtol=1e-4, atol=1e-4)


def test_guidance_one_and_zero_cache_the_one_pass(dit, calibration):
    _, rep = run(dit, "wan", steps=10, guidance=1.0, size=32, frames=5)
    assert rep.branches == ("cond",) and rep.total == rep.computed == 10
    assert rep.attention_reused == 4 * dit.config.num_layers  # steps 3, 5, 7, 9 (window from 2)
    _, rep = run(dit, configs(calibration, 1e9)["teacache"], steps=10, guidance=0.0, size=32, frames=5)
    assert rep.branches == ("uncond",) and rep.line() == "cache teacache: 2/10 DiT evaluations"


@pytest.mark.parametrize("method", ["wan", "teacache", "easycache"])
def test_caches_run_with_int8_attention_skiparse_and_fp8_weights(method):
    model = load_dit(random_state(CFG_ACCEL), config=CFG_ACCEL, **ACCEL)
    cache = {"wan": CacheConfig.preset("wan"), "teacache": CacheConfig.preset("teacache", threshold=1e9,
             coefficients=COEF_13), "easycache": CacheConfig.preset("easycache", threshold=1e9)}[method]
    with counting(model) as counts:
        out, report = run(model, cache, steps=6, size=32, frames=5, batched=method == "wan")
    assert torch.isfinite(out).all()
    assert report.skipped > 0 or report.attention_reused > 0
    assert counts["blocks"].rows == report.computed


# ---------------------------------------------------------------- calibration


def test_calibration_measures_magcaches_ratio_and_round_trips(dit, calibration):
    residuals = []
    start = {}

    def before(module, args):
        start["h"] = args[0]

    def after(module, args, output):
        residuals.append(output - start["h"])

    h1 = dit.blocks[0].register_forward_pre_hook(before)
    h2 = dit.blocks[-1].register_forward_hook(after)
    try:
        _, report = run(dit, "calibrate", steps=12, size=32, frames=5)
    finally:
        h1.remove()
        h2.remove()
    cal = report.calibration
    cond, uncond = residuals[0::2], residuals[1::2]
    want = [1.0] + [(r.norm(dim=-1) / p.norm(dim=-1)).mean().item() for p, r in zip(cond, cond[1:])]
    assert list(cal.mag_cond) == pytest.approx(want, rel=1e-6)
    want_u = [1.0] + [(r.norm(dim=-1) / p.norm(dim=-1)).mean().item() for p, r in zip(uncond, uncond[1:])]
    assert list(cal.mag_uncond) == pytest.approx(want_u, rel=1e-6)
    assert set(cal.teacache) == {"e", "e0"} and all(len(c) == 5 for c in cal.teacache.values())
    again = Calibration.from_json(cal.to_json())
    assert again == cal
    assert cal.model.dim == dit.config.dim and calibration.steps == 12
    # a table for 12 steps drives MagCache at 20 steps (nearest resampling, as published)
    _, rep = run(dit, CacheConfig.preset("magcache", calibration=cal), steps=20, size=32, frames=5)
    assert rep.total == 40
