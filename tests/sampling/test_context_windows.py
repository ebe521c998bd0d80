"""Context windows (wan_core.sampling.context_windows): schedules cover every frame, fuse weights normalise to 1,
the fused velocity of a frame-local model equals the model on the whole video, one window as long as the video is
the plain sampler, FreeNoise keeps each window's noise frames, and every window has a cache state of its own."""
import itertools

import pytest
import torch

from wan_core.cache import CacheConfig
from wan_core.demo import tiny_random_models
from wan_core.pipeline import GenerationConfig, WanPipeline
from wan_core.sampling import SamplingInterrupted
from wan_core.sampling.context_windows import (ContextWindows, WindowedGuidance, latent_length, latent_overlap,
                                               ordered_halving)

CASES = [dict(length=L, overlap=o, schedule=s, stride=st, anchor=a)
         for L, o, s, st, a in itertools.product((3, 5, 8), (0, 1, 2), ("static", "uniform", "looped"), (1, 2, 3),
                                                 (True, False))
         if not (s == "looped" and a) and not (s == "static" and st > 1) and o < (L - 1 if a else L)]


def test_real_frames_convert_as_comfyui():
    # WanContextWindowsManual: length (L - 1) // 4 + 1, overlap max((O - 1) // 4 + 1, 0)
    assert [latent_length(f) for f in (1, 5, 17, 81)] == [1, 2, 5, 21]
    assert [latent_overlap(o) for o in (0, 1, 4, 5, 8, 30)] == [0, 1, 1, 2, 2, 8]
    assert ContextWindows.from_frames(81, 30).length == 21 and ContextWindows.from_frames(81, 30).overlap == 8


def test_ordered_halving_is_the_bit_reversed_fraction():
    assert [ordered_halving(i) for i in range(5)] == [0.0, 0.5, 0.25, 0.75, 0.125]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_schedules_cover_every_frame_and_weights_normalise(case):
    cw = ContextWindows(**case)
    for frames in (case["length"] + 1, 13, 31):
        for step in range(4):
            windows = cw.windows(frames, step)
            total = torch.zeros(frames, dtype=torch.float64)
            for w in windows:
                assert len(w) == cw.length and len(set(w)) == len(w), w
                assert all(0 <= i < frames for i in w)
                if cw.anchor:
                    assert w[0] == 0  # latent frame 0 heads every window
                weights = cw.weights(w, frames).double()
                assert weights.shape == (len(w),) and (weights > 0).all()
                total[list(w)] += weights
            assert (total > 0).all(), f"uncovered frames at step {step}: {windows}"
            normalised = torch.zeros(frames, dtype=torch.float64)
            for w in windows:
                normalised[list(w)] += cw.weights(w, frames).double() / total[list(w)]
            torch.testing.assert_close(normalised, torch.ones(frames, dtype=torch.float64), rtol=0, atol=1e-12)


def test_static_windows_by_hand():
    # 17 latent frames, windows of 5 with the anchor (4 body frames), overlap 2: hops of 2, last moved back
    cw = ContextWindows(5, 2)
    assert cw.windows(17) == [(0, 1, 2, 3, 4), (0, 3, 4, 5, 6), (0, 5, 6, 7, 8), (0, 7, 8, 9, 10), (0, 9, 10, 11, 12),
                              (0, 11, 12, 13, 14), (0, 13, 14, 15, 16)]
    assert ContextWindows(4, 1, anchor=False).windows(10) == [(0, 1, 2, 3), (3, 4, 5, 6), (6, 7, 8, 9)]
    assert ContextWindows(4, 0, anchor=False).windows(10) == [(0, 1, 2, 3), (4, 5, 6, 7), (6, 7, 8, 9)]


def test_fuse_weights_by_hand():
    assert ContextWindows(4, 1, anchor=False).weights((0, 1, 2, 3), 10).tolist() == [1, 2, 2, 1]
    assert ContextWindows(5, 1, anchor=False).weights((0, 1, 2, 3, 4), 10).tolist() == [1, 2, 3, 2, 1]
    assert ContextWindows(4, 1, anchor=False, fuse="flat").weights((3, 4, 5, 6), 10).tolist() == [1, 1, 1, 1]
    lin = ContextWindows(5, 2, anchor=False, fuse="linear")
    assert lin.weights((0, 1, 2, 3, 4), 10).tolist() == pytest.approx([1, 1, 1, 1, 1e-6])  # first: no ramp up
    assert lin.weights((3, 4, 5, 6, 7), 10).tolist() == pytest.approx([1e-6, 1, 1, 1, 1e-6])
    assert lin.weights((5, 6, 7, 8, 9), 10).tolist() == pytest.approx([1e-6, 1, 1, 1, 1])  # last: no ramp down
    # the anchor frame weighs as a window's edge
    assert ContextWindows(5, 1).weights((0, 4, 5, 6, 7), 10).tolist() == [1, 1, 2, 2, 1]


@pytest.mark.parametrize("kwargs, message", [
    (dict(frames=10, overlap=2), r"4n\+1 real frames"),
    (dict(frames=17, overlap=17), "less than the window"),
    (dict(frames=17, overlap=4, schedule="spiral"), "static, uniform, looped"),
    (dict(frames=17, overlap=4, fuse="max"), "pyramid, flat, linear"),
    (dict(frames=17, overlap=4, schedule="looped", anchor=True), "anchor off"),
    (dict(frames=17, overlap=4, stride=2), "uniform and looped"),
    (dict(frames=17, overlap=4, schedule="uniform", stride=9), "from 1 to 8"),
])
def test_bad_settings_are_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as e:
        ContextWindows.from_frames(**kwargs)
    assert "\n" not in str(e.value)


def test_fused_velocity_of_a_frame_local_model_is_the_whole_video_one():
    """A model acting on each frame alone: every window predicts each frame as the whole-video run does, so the
    weighted, normalised fusion must give back exactly that (for every schedule and fuse)."""
    scale = torch.linspace(0.5, 2.0, 16).view(1, 16, 1, 1, 1)

    def local(x, sigma, t):
        return torch.tanh(x * scale) * (1 + sigma)

    x = torch.randn(2, 16, 19, 4, 6)
    for schedule, fuse in itertools.product(("static", "uniform", "looped"), ("pyramid", "flat", "linear")):
        cw = ContextWindows(6, 2, schedule=schedule, fuse=fuse, stride=2 if schedule != "static" else 1)
        guide = WindowedGuidance(cw, 19, lambda window: (local, _nothing))
        for step in range(3):
            guide.begin_step(step, 3, 0.5)
            torch.testing.assert_close(guide(x, 0.5, torch.full((2,), 500.0)), local(x, 0.5, None),
                                       rtol=1e-6, atol=1e-6)


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _nothing():
    return _Nothing()


def test_interrupt_between_windows():
    calls = []

    def interrupt(step, total):
        calls.append(step)
        if len(calls) == 2:
            raise SamplingInterrupted(step, total)

    guide = WindowedGuidance(ContextWindows(3, 1), 9, lambda w: (lambda x, s, t: x, _nothing), interrupt=interrupt)
    guide.begin_step(0, 4, 1.0)
    with pytest.raises(SamplingInterrupted):
        guide(torch.zeros(1, 16, 9, 2, 2), 1.0, torch.zeros(1))
    assert calls == [0, 0]


@pytest.fixture(scope="module")
def tiny():
    dit, vae, te = tiny_random_models(seed=0)
    pipe = WanPipeline(dit, vae, te)
    cond, uncond = pipe.encode_prompts(["a red ball"], None)
    return pipe, cond, uncond


def test_one_window_as_long_as_the_video_is_the_plain_sampler(tiny):
    pipe, cond, uncond = tiny
    cfg = GenerationConfig(width=32, height=32, frames=17, steps=4, seed=3)
    with torch.inference_mode():
        plain = pipe.sample_latents(cond, uncond, cfg)
        for frames in (17, 33):  # the window holds the video exactly, and more than it
            windowed = pipe.sample_latents(cond, uncond, cfg.replace(context=ContextWindows.from_frames(frames, 4)))
            assert torch.equal(windowed, plain)


def test_windows_change_a_long_video_and_report_each_window(tiny):
    pipe, cond, uncond = tiny
    cfg = GenerationConfig(width=32, height=32, frames=33, steps=3, seed=3)
    with torch.inference_mode():
        plain = pipe.sample_latents(cond, uncond, cfg, cache="off")
        windowed = pipe.sample_latents(cond, uncond, cfg.replace(context=ContextWindows.from_frames(17, 8)),
                                       cache="off")
    assert windowed.shape == plain.shape and torch.isfinite(windowed).all()
    assert (windowed - plain).abs().max() > 1e-3
    report = pipe.cache_report
    assert len(report.reports) == 3  # 9 latent frames: windows (0-4), (0, 3-6), (0, 5-8)
    assert report.computed == report.total == 3 * 3 * 2
    assert report.line() == "cache off: 18/18 DiT evaluations (3 context windows)"


def test_each_window_keeps_its_own_cache_state(tiny):
    pipe, cond, uncond = tiny
    cfg = GenerationConfig(width=32, height=32, frames=33, steps=6, seed=5,
                           context=ContextWindows.from_frames(17, 8))
    with torch.inference_mode():
        off = pipe.sample_latents(cond, uncond, cfg, cache="off")
        never = pipe.sample_latents(cond, uncond, cfg, cache=CacheConfig.preset("easycache", threshold=0.0,
                                                                                   start=0.0))
        torch.testing.assert_close(never, off, rtol=0, atol=1e-6)  # threshold 0: nothing reused in any window
        pipe.sample_latents(cond, uncond, cfg, cache=CacheConfig.preset("easycache", threshold=1e9, start=0.0, end=1.0))
    reports = pipe.cache_report.reports
    assert len(reports) == 3 and len({id(r) for r in reports.values()}) == 3
    for window, report in reports.items():
        # a cache needs its own computed steps before it may reuse: with state leaking from the window before,
        # a later window would reuse at its first steps under this threshold
        assert all(report.status[s].get(b) == "computed" for s in range(2) for b in report.branches), window
        assert report.computed < report.total  # and it does reuse later on, within the window


def test_freenoise_gives_every_window_the_first_windows_noise_frames():
    cw = ContextWindows(5, 2, freenoise=True)  # anchored: body windows of 4 frames, hops of 2
    noise = torch.randn(1, 16, 15, 2, 2)
    out = cw.reschedule_noise(noise, seed=7)
    assert torch.equal(out[:, :, :5], noise[:, :, :5])  # the first window and the anchor keep theirs
    first = sorted(out[0, 0, i, 0, 0].item() for i in range(1, 5))
    for w in cw.windows(15):
        body = w[1:] if w[0] == 0 else w
        assert sorted(out[0, 0, i, 0, 0].item() for i in body) == first, w
    assert torch.equal(cw.reschedule_noise(noise, seed=7), out)  # seeded
    assert torch.equal(ContextWindows(5, 2).reschedule_noise(noise, seed=7), noise)  # off: untouched
