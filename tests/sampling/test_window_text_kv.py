"""Context windows keep one copy of the prompt's text K/V for all windows (the exact cache's state that depends on
the prompt only), so the memory of a windowed run does not grow with the number of windows (docs/long_video.md,
"Memory and time in length"), and the result is unchanged."""
import torch

from wan_core.demo import tiny_random_models
from wan_core.pipeline import GenerationConfig, WanPipeline
from wan_core.sampling.context_windows import ContextWindows


def test_windows_share_the_text_kv_and_match_no_cache(monkeypatch):
    dit, vae, te = tiny_random_models(seed=0)
    pipe = WanPipeline(dit, vae, te)
    cond, uncond = pipe.encode_prompts(["a red ball"], None)
    calls = []
    original = dit.text_kv
    monkeypatch.setattr(dit, "text_kv", lambda *a, **k: calls.append(1) or original(*a, **k))
    cfg = GenerationConfig(width=32, height=32, frames=33, steps=3, seed=3)
    with torch.inference_mode():
        pipe.sample_latents(cond, uncond, cfg)
        plain = len(calls)
        calls.clear()
        windowed = cfg.replace(context=ContextWindows.from_frames(17, 8))  # 3 windows
        exact = pipe.sample_latents(cond, uncond, windowed)
        assert len(pipe.cache_report.reports) == 3
        assert len(calls) == plain > 0  # once per prompt batch, as without windows (was once per window)
        off = pipe.sample_latents(cond, uncond, windowed, cache="off")
    torch.testing.assert_close(exact, off, rtol=0, atol=1e-6)
