"""Generate the held-out prompts with the demo model and score them; VAE reconstruction PSNR.

Used by ``bench/demo_eval.py`` (one table over the accelerations) and the model card numbers.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from . import data as D
from .model import DEMO_DEFAULTS
from .score import Score, score_clip


@dataclass
class RunResult:
    score: Score
    dit_evaluations: int
    wall_s: float
    videos: list = field(default_factory=list, repr=False)


class _CountCalls:
    """Counts forward calls of a module (one per DiT evaluation; a batched CFG pass counts once)."""

    def __init__(self, module: torch.nn.Module):
        self.count = 0
        self.handle = module.register_forward_pre_hook(self._hook)

    def _hook(self, module, args):
        self.count += 1

    def remove(self) -> None:
        self.handle.remove()


def generation_config(prompt: str, seed: int, **overrides):
    """The demo's ``GenerationConfig`` (``DEMO_DEFAULTS``), with any field overridden."""
    from ..pipeline import GenerationConfig

    d = DEMO_DEFAULTS
    base: dict[str, Any] = dict(prompt=prompt, negative_prompt=d.negative_prompt, width=d.width, height=d.height,
                                frames=d.frames, steps=d.steps, guidance=d.guidance, shift=d.shift, solver=d.solver,
                                seed=seed)
    base.update(overrides)
    return GenerationConfig(**base)


def run_prompts(dit, vae, text_encoder, pairs=D.HELD_OUT, cache=None, keep_videos: bool = False,
                **overrides) -> RunResult:
    """Generate every (prompt, seed) of ``pairs`` and score it; counts DiT evaluations and wall time."""
    from ..pipeline import WanPipeline

    pipe = WanPipeline(dit, vae, text_encoder)
    counter = _CountCalls(dit)
    clips, videos = [], []
    t0 = time.perf_counter()
    try:
        with torch.inference_mode():
            for prompt, seed in pairs:
                cfg = generation_config(prompt, seed, **overrides)
                cond, uncond = pipe.encode_prompts([prompt], cfg.negative_prompt, need_negative=cfg.guidance != 1.0)
                kwargs = {"cache": cache} if cache is not None else {}
                latents = pipe.sample_latents(cond, uncond, cfg, **kwargs)
                video = pipe.decode(latents)[0]
                clips.append(score_clip(video, prompt))
                if keep_videos:
                    videos.append(video)
    finally:
        counter.remove()
    return RunResult(Score(clips), counter.count, time.perf_counter() - t0, videos)


def vae_psnr(vae, n: int = 6, tile: int = 4, overlap: int = 2) -> dict:
    """Reconstruction PSNR (dB, videos in [-1, 1]) of held-out clips at the demo size (64x64, 17 frames),
    decoded untiled and with spatial tiles of ``tile`` latents (``overlap`` latents blended)."""
    untiled: list[float] = []
    tiled: list[float] = []
    with torch.inference_mode():
        for i in range(n):
            video, _ = D.make_clip(D.TRAIN_SEED_LIMIT + 500 + i, width=64, height=64, frames=17)
            z = vae.encode(video[None])
            for out, kw in ((untiled, {"tiling": "off"}), (tiled, {"tiling": "on", "tile": tile, "overlap": overlap})):
                rec = vae.decode(z, **kw)[0]
                mse = float(torch.mean((rec.float() - video) ** 2))
                out.append(mse)
    def db(mses):
        return 10 * math.log10(4.0 / max(sum(mses) / len(mses), 1e-12))
    return {"untiled_db": round(db(untiled), 2), "tiled_db": round(db(tiled), 2), "clips": n,
            "tile_latents": tile, "overlap_latents": overlap}


__all__ = ["RunResult", "generation_config", "run_prompts", "vae_psnr"]
