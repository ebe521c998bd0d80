"""Prompt travel (``wan_core.sampling.prompt_travel``): parsing the `` | `` segments, which segment each context
window (and each chained clip) takes, worked out by hand, and through the pipeline: with a frame-local stand-in
model whose velocity is its prompt embedding, every frame's velocity is the fuse-weighted mean of its windows'
segment embeddings (float64 reference), each segment encoded once, and a prompt without segments unchanged."""
from __future__ import annotations

import pytest
import torch

from wan_core import latent_format
from wan_core.demo import tiny_random_models
from wan_core.pipeline import GenerationConfig, WanPipeline
from wan_core.sampling import make_noise
from wan_core.sampling.context_windows import ContextWindows
from wan_core.sampling.prompt_travel import (segment_for_clip, segment_of_window, split_segments, travel_note,
                                             unique_segments)


@pytest.mark.parametrize("prompt, segments", [
    ("a red ball | a blue ball", ("a red ball", "a blue ball")),
    ("  a red ball   |  a blue ball | green ", ("a red ball", "a blue ball", "green")),
    ("a red ball\n|\na blue ball", ("a red ball", "a blue ball")),
    ("a | b|c | d", ("a", "b|c", "d")),  # a bar without spaces round it is text
    ("a|b", ("a|b",)),
    ("a || b", ("a || b",)),
    (" a plain prompt ", (" a plain prompt ",)),  # no separator: returned as written
])
def test_split_segments(prompt, segments):
    assert split_segments(prompt) == segments


@pytest.mark.parametrize("prompt, message", [
    ("a red ball | ", "segment 2 of 2 is empty"),
    ("| a red ball", "segment 1 of 2 is empty"),
    ("a |  | c", "segment 2 of 3 is empty"),
])
def test_empty_segments_are_refused_by_number(prompt, message):
    with pytest.raises(ValueError, match=message):
        split_segments(prompt, "--prompt")


def test_unique_segments_encode_each_text_once():
    assert unique_segments(["a", "b", "a", "c"]) == (["a", "b", "c"], [0, 1, 0, 2])


def test_windows_of_65_frames_by_hand():
    """65 frames = 17 latent frames; 17-frame windows (5 latent: anchor + 4), overlap 8 (2 latent): bodies start
    at 1, 3, ..., 13. Without the anchor the bodies cover positions 0..15; 2 segments cut at 8, 3 at 16/3 and
    32/3; the body centres are 2, 4, ..., 14 (a centre on a cut goes to the later segment)."""
    windows = ContextWindows.from_frames(17, 8).windows(17)
    assert windows == [(0, *range(s, s + 4)) for s in range(1, 14, 2)]
    assert [segment_of_window(w, 17, 2, True) for w in windows] == [0, 0, 0, 1, 1, 1, 1]
    assert [segment_of_window(w, 17, 3, True) for w in windows] == [0, 0, 1, 1, 1, 2, 2]
    assert [segment_of_window(w, 17, 1, True) for w in windows] == [0] * 7
    assert segment_of_window((0, 6, 7, 8), 9, 2, True) == 1  # body positions 5..7 of 8: centre 6.5


def test_looped_and_dilated_windows_by_hand():
    # no anchor, 8 frames, 2 segments (cut at 4): a window wrapping round the end is centred where it wraps
    assert segment_of_window((6, 7, 0, 1), 8, 2, False) == 0  # 6, 7, 8, 9 -> centre 8 = frame 0
    assert segment_of_window((5, 6, 7, 0), 8, 2, False) == 1  # centre 7
    assert segment_of_window((1, 2, 3, 4), 8, 2, False) == 0  # centre 3
    assert segment_of_window((2, 3, 4, 5), 8, 2, False) == 1  # centre 4: on the cut
    # dilated (uniform schedule, stride 2): every 2nd frame, centred on the middle of its span
    assert segment_of_window((0, 2, 4, 6), 16, 2, False) == 0  # span 0..7, centre 3.5
    assert segment_of_window((9, 11, 13, 15), 16, 2, False) == 1


def test_bad_windows_and_counts():
    with pytest.raises(ValueError, match="does not lie"):
        segment_of_window((0, 17), 17, 2, True)
    with pytest.raises(ValueError, match="at least one segment"):
        segment_of_window((0, 1), 17, 0, True)


def test_segment_for_clip_repeats_the_last():
    assert [segment_for_clip(i, 3) for i in range(6)] == [0, 1, 2, 2, 2, 2]
    assert segment_for_clip(4, 1) == 0
    with pytest.raises(ValueError):
        segment_for_clip(-1, 3)


def test_travel_note_lists_windows_per_segment():
    windows = ContextWindows.from_frames(17, 8).windows(17)
    note = travel_note(windows, ["a red ball", "a blue ball"], 17, True)
    assert note == "prompt travel: 2 segments over 7 windows: 'a red ball' -> windows 1-3; 'a blue ball' -> windows 4-7"
    many = travel_note(windows[:2], ["a", "b", "c"], 17, True)
    assert "'c' -> no window" in many


def test_generation_config_carries_travel_only_with_windows():
    windows = ContextWindows.from_frames(17, 8)
    assert GenerationConfig(prompt="a | b").travel is None  # no windows: the prompt as written
    GenerationConfig(prompt="a | ").validate()
    assert GenerationConfig(prompt="a | b", context=windows).travel == ("a", "b")
    assert GenerationConfig(prompt="a|b", context=windows).travel is None
    with pytest.raises(ValueError, match="segment 2 of 2 is empty"):
        GenerationConfig(prompt="a | ", context=windows).validate()
    with pytest.raises(ValueError, match="prompt 2 of 2 has ' [|] ' segments"):
        GenerationConfig(prompt=("a", "b | c"), context=windows).validate()
    GenerationConfig(prompt=("a", "b | c")).validate()  # without windows: two literal prompts


class EmbeddingVelocity(torch.nn.Module):
    """Frame-local stand-in DiT: the velocity of every latent value is the mean of the prompt embedding."""

    config = None

    def __init__(self):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(()))
        self.calls = 0

    @property
    def device(self):
        return self.anchor.device

    @property
    def dtype(self):
        return self.anchor.dtype

    def forward(self, x, t, context):
        self.calls += 1
        return torch.stack([torch.full_like(x[b], float(context[b].double().mean())) for b in range(x.shape[0])])


def _velocity_of_run(pipe, cfg, cond, travel=None) -> torch.Tensor:
    """One Euler step from sigma 1 to 0: x = noise - v, so v = noise - x (normalised latents)."""
    out = pipe.sample_latents(cond, None, cfg, travel=travel)
    noise = make_noise(cfg.seed, tuple(out.shape))
    return (noise - latent_format.to_model(out)).double()


def test_each_window_is_guided_by_its_segment():
    pipe = WanPipeline(dit=EmbeddingVelocity())
    windows = ContextWindows.from_frames(17, 8)
    cfg = GenerationConfig(prompt="x", width=16, height=16, frames=65, steps=1, guidance=1.0, solver="euler",
                           convention="comfyui", context=windows, seed=3)
    values = [0.25, -1.5, 1.0]
    travel = [torch.full((4, 8), v) for v in values]
    with torch.inference_mode():
        v = _velocity_of_run(pipe, cfg, travel[:1], travel)
    # float64 reference: each frame's weighted mean over its windows, the windows' segments as worked out by hand
    owner = [0, 0, 1, 1, 1, 2, 2]
    total, weight = torch.zeros(17, dtype=torch.float64), torch.zeros(17, dtype=torch.float64)
    for window, segment in zip(windows.windows(17), owner):
        for frame, w in zip(window, windows.weights(window, 17).double()):
            total[frame] += w * values[segment]
            weight[frame] += w
    expected = total / weight
    assert torch.allclose(v[0].mean(dim=(0, 2, 3)), expected, atol=1e-5)
    assert torch.allclose(v[0, :, 1:5], torch.tensor(values[0], dtype=torch.float64), atol=1e-5)  # segment 0 only
    assert torch.allclose(v[0, :, 7:9], torch.tensor(values[1], dtype=torch.float64), atol=1e-5)  # segment 1 only
    assert torch.allclose(v[0, :, 13:], torch.tensor(values[2], dtype=torch.float64), atol=1e-5)  # segment 2 only
    assert values[1] < float(v[0, :, 5].mean()) < values[0]  # blended across the overlap
    with pytest.raises(ValueError, match="one video"):
        pipe.sample_latents(travel * 2, None, cfg, travel=travel)


def test_one_window_uses_the_first_segment():
    pipe = WanPipeline(dit=EmbeddingVelocity())
    cfg = GenerationConfig(prompt="x", width=16, height=16, frames=17, steps=1, guidance=1.0, solver="euler",
                           convention="comfyui", context=ContextWindows.from_frames(17, 8))
    travel = [torch.full((4, 8), v) for v in (0.5, 2.0)]
    with torch.inference_mode():
        v = _velocity_of_run(pipe, cfg, travel[:1], travel)
    assert torch.allclose(v, torch.tensor(0.5, dtype=torch.float64), atol=1e-5)


@pytest.fixture(scope="module")
def tiny():
    dit, vae, te = tiny_random_models(seed=0)
    return WanPipeline(dit, vae, te)


def test_pipeline_encodes_each_segment_once_and_travels(tiny, monkeypatch):
    windows = ContextWindows.from_frames(9, 4)
    cfg = GenerationConfig(prompt="a red ball | a blue cube | a red ball", width=32, height=32, frames=25, steps=2,
                           seed=1, context=windows)
    seen: list[list[str]] = []
    encode = type(tiny.text_encoder).encode

    def spy(self, texts, *a, **k):
        seen.append(list(texts))
        return encode(self, texts, *a, **k)

    monkeypatch.setattr(type(tiny.text_encoder), "encode", spy)
    with torch.inference_mode():
        travelled = tiny(cfg).latents
        assert seen[0][:2] == ["a red ball", "a blue cube"] and len(seen[0]) == 3  # + the negative prompt
        plain = tiny(cfg.replace(prompt="a red ball")).latents
        cond, uncond = tiny.encode_prompts(["a red ball"], None)
        assert torch.equal(plain, tiny.sample_latents(cond, uncond, cfg.replace(prompt="a red ball")))
        same = tiny(cfg.replace(prompt="a red ball | a red ball")).latents  # one text twice = no travel
    assert torch.equal(same, plain)
    assert not torch.allclose(travelled, plain, atol=1e-4)
