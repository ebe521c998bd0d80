"""The Wan cache: FasterCache's frequency split against a literal float64 reference, the compounding band
weights, the attention cache's reuse / linear extrapolation, and the counts its schedule implies (50 steps:
at least 38% less DiT work, i.e. >= 1.62x fewer block-equivalents)."""
from __future__ import annotations

import math

import pytest
import torch

from wan_core.cache import CacheConfig, attention_share, expected_evaluations
from wan_core.cache.attention_cache import AttentionCache, Segment
from wan_core.cache.cfg_cache import CFGCache, low_frequency
from wan_core.cache.schedule import Window

from .helpers import counting, run, tiny_dit


@pytest.fixture(scope="module")
def dit():
    return tiny_dit()


def reference_low_band(d: torch.Tensor) -> torch.Tensor:
    """diffusers' _split_low_high_freq, per frame, in float64: fftshift, centred disk of radius min(H, W)//5
    (distance^2 <= r^2 around (W//2, H//2)), ifftshift, inverse FFT, real part."""
    d = d.double()
    h, w = d.shape[-2:]
    spec = torch.fft.fftshift(torch.fft.fft2(d), dim=(-2, -1))
    radius = min(h, w) // 5
    ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    mask = (xs - w // 2) ** 2 + (ys - h // 2) ** 2 <= radius ** 2
    return torch.fft.ifft2(torch.fft.ifftshift(spec * mask, dim=(-2, -1))).real


@pytest.mark.parametrize("shape", [(1, 16, 3, 60, 104), (2, 4, 2, 15, 11), (1, 2, 1, 8, 8)])
def test_low_band_matches_the_fftshift_reference(shape):
    d = torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    low = low_frequency(d)
    torch.testing.assert_close(low, reference_low_band(d), rtol=0, atol=1e-12)
    # the low band is a strict part: not zero, not everything
    assert 0 < low.norm() < d.norm()


def test_estimate_compounds_the_band_weights():
    """u_hat = c + a_L^n LF(u - c) + a_H^m HF(u - c), the weights applied in place at every estimate whose
    timestep is inside their window (LF: 99 < t < 901, HF: -1 < t < 301)."""
    g = torch.Generator().manual_seed(1)
    c0, u0 = torch.randn(1, 16, 2, 10, 10, generator=g), torch.randn(1, 16, 2, 10, 10, generator=g)
    cache = CFGCache(Window(1, 10, 4), alpha_low=1.3, alpha_high=1.7)
    cache.begin_step(0, 10, 0.95)
    assert not cache.skip_uncond()                    # before the window
    cache.record(c0, u0)
    lf = reference_low_band(u0 - c0)
    hf = (u0 - c0).double() - lf
    expected_n = {0.5: (1, 0), 0.2: (2, 1), 0.05: (2, 2)}  # sigma -> (LF, HF) weight applications so far
    for step, sigma in ((2, 0.5), (3, 0.2), (4, 0.05)):
        cache.begin_step(step, 10, sigma)
        assert cache.skip_uncond()  # steps 2-4 of the window 1, 5, 9 (anchors) are estimated
        c = torch.randn(1, 16, 2, 10, 10, generator=g)
        n_low, n_high = expected_n[sigma]
        want = c.double() + 1.3 ** n_low * lf + 1.7 ** n_high * hf
        torch.testing.assert_close(cache.estimate_uncond(c).double(), want, rtol=1e-5, atol=1e-5)
    cache.begin_step(5, 10, 0.04)
    assert not cache.skip_uncond()  # an anchor: computed


def test_attention_reuse_and_linear_extrapolation():
    segs = [Segment("cond", 0, 1)]
    outputs = {}
    for mode in ("reuse", "extrapolate"):
        cache = AttentionCache(Window(0, 9, 3), mode)
        counts = []
        results = {}
        for step in range(7):
            scope = cache.scope(step, segs, lambda b, c, r, i=step, log=counts: log.append((i, c, r)))
            fresh = torch.full((1, 4, 8), float(step * step))  # what computing would give: step^2
            results[step] = scope(0, torch.zeros(1, 4, 8), lambda h, v=fresh: v)[0, 0, 0].item()
        outputs[mode] = results
        assert [s for s, c, r in counts if r] == [1, 2, 4, 5]  # anchors 0, 3, 6 are computed
    assert outputs["reuse"] == {0: 0, 1: 0, 2: 0, 3: 9, 4: 9, 5: 9, 6: 36}
    # from anchors 0 and 3: F(3) + (i - 3) / 3 * (F(3) - F(0)); before a second anchor: reuse
    assert outputs["extrapolate"] == pytest.approx({0: 0, 1: 0, 2: 0, 3: 9, 4: 12, 5: 15, 6: 36})


def test_wan_on_50_steps_does_at_least_38_percent_less_dit_work(dit):
    steps = 50
    with counting(dit) as counts:
        _, report = run(dit, "wan", steps=steps, size=32, frames=5)
    layers = dit.config.num_layers
    # schedule: window from step 10 (0.2 * 50); uncond every 5 steps there (10, 15, ..., 45), cond always;
    # self-attention of cond computed on even steps from 10 on, reused on the odd ones (20 steps)
    uncond_computed = 10 + len(range(10, 50, 5))
    assert report.computed == counts["blocks"].rows == steps + uncond_computed == 68
    assert report.count("estimated", "uncond") == steps - uncond_computed
    assert report.attention_reused == 20 * layers
    assert counts["self_attn"].rows == report.attention_computed == (68 - 20) * layers
    assert report.line() == "cache wan: 68/100 DiT evaluations"
    # DiT work at Wan 2.1 1.3B's widths and 832x480x81 (32,760 tokens): a reused self-attention saves its share
    share = attention_share(1536, 8960, 32760)
    assert 0.7 < share < 0.8
    work = report.work(share)
    assert work == pytest.approx((68 - 20 * share) / 100)
    assert work <= 1 - 0.38 and 1 / work >= 1.62
    # the canvas shows the same numbers before the run
    expected = expected_evaluations("wan", steps, 5.0, model="1.3B", tokens=32760)
    assert (expected["expected"], expected["attention_reused"] * layers) == (68, report.attention_reused)
    assert expected["work"] == pytest.approx(work)


@pytest.mark.parametrize("steps,interval,first", [(20, 2, 4), (30, 3, 6), (8, 2, 2)])
def test_wan_defaults_scale_with_the_step_count(dit, steps, interval, first):
    _, report = run(dit, "wan", steps=steps, size=32, frames=5)
    uncond = first + math.ceil((steps - first) / interval)
    assert report.count("computed", "uncond") == uncond
    assert report.count("computed", "cond") == steps
    # the estimated ones are exactly the non-anchor steps of the window
    estimated = [i for i, s in enumerate(report.status) if s.get("uncond") == "estimated"]
    assert estimated == [i for i in range(first, steps) if (i - first) % interval]


def test_wan_window_and_attention_options(dit):
    _, report = run(dit, CacheConfig.preset("wan", start=0.5, end=0.75, cfg_interval=2, attention="off"), steps=8,
                    size=32, frames=5)
    assert [i for i, s in enumerate(report.status) if s["uncond"] == "estimated"] == [5]
    assert report.attention_reused == 0
    out_e, rep_e = run(dit, CacheConfig.preset("wan"), steps=12, size=32, frames=5)  # extrapolate by default
    out_r, rep_r = run(dit, CacheConfig.preset("wan", attention="reuse"), steps=12, size=32, frames=5)
    assert rep_e.attention_reused == rep_r.attention_reused > 0
    assert not torch.equal(out_e, out_r) and torch.isfinite(out_e).all()
