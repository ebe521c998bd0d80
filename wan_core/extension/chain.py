"""Chained clips (docs/long_video.md section 3): a video made longer one clip at a time, each clip continuing the
one before from its last frames.

The chain lives in latent space: clip ``i + 1`` continues the latents sampled so far (``from_latent``: the chain's
first latent frame as anchor, then its last ones) and its new latent frames are appended; the whole chain is
decoded once at the end, so no clip makes a VAE round trip. A chain that continues a video from pixels
(``previous``) starts with a pixel-source clip; its decoded chain is joined to the video's own frames with the
colour match measured on the overlap.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from ..sampling.prompt_travel import segment_for_clip
from .head import Continuation, from_latent, from_pixels
from .join import join_latents, join_pixels
from .request import Extension

MAX_CLIPS = 64  # a bound on the work one request can ask for; 64 Wan clips are over 20 minutes of video


@dataclass
class ChainResult:
    video: torch.Tensor  # [B, 3, T, H, W] in [-1, 1]: the previous video (if any), then every new clip's frames
    latents: torch.Tensor  # the chain's raw latents (the new clips only when continuing pixels)
    continuations: list[Continuation] = field(default_factory=list)
    new_frames: int = 0  # frames added to the previous video (or the whole video from text)


def clip_seed(seed: int, clip: int) -> int:
    """Each clip its own noise: the same seed would give every clip the same start noise pattern."""
    return (int(seed) + clip) % 2**64


def run_chain(pipe, cfg, clips: int, extension: Extension, encode: Callable[[int], tuple],
              previous: torch.Tensor | None = None, *, clip_tokens: torch.Tensor | None = None,
              on_clip: Callable[[int, int], object] | None = None, tiling: str = "auto", interrupt=None,
              decode_progress=None, first_inputs: dict | None = None, **sample_kwargs) -> ChainResult:
    """Sample ``clips`` clips of ``cfg.frames`` frames, each continuing the last, and decode the chain.

    ``encode(i) -> (cond, uncond)``: the prompt embeddings of clip ``i`` (prompt travel: one segment per clip).
    ``previous``: a video ``[1, 3, T, H, W]`` in [-1, 1] to continue; None: clip 0 is drawn from the text alone.
    ``on_clip(i, clips)``: called as each clip starts (progress). ``first_inputs``: what clip 0 drawn from text
    takes (an image-to-video start image's ``image`` / ``first_frame``); ``sample_kwargs`` go to every
    ``sample_latents`` call (callback, cache, ...)."""
    if isinstance(clips, bool) or not isinstance(clips, int) or not 1 <= clips <= MAX_CLIPS:
        raise ValueError(f"clips={clips!r}: must be an integer from 1 to {MAX_CLIPS}")
    extension.check_clip(cfg.frames)
    windowed = cfg.context is not None and not cfg.context.covers(cfg.latent_shape[2])
    first = None
    if previous is not None:
        first = from_pixels(pipe.vae, pipe.dit, previous, cfg.frames, extension, windowed=windowed,
                            clip_tokens=clip_tokens, tiling=tiling, interrupt=interrupt)
    chain: torch.Tensor | None = None
    made: list[Continuation] = []
    for i in range(clips):
        if on_clip is not None:
            on_clip(i, clips)
        cont = first
        if chain is not None:
            cont = from_latent(pipe.dit, chain, cfg.frames, extension, windowed=windowed, clip_tokens=clip_tokens)
        cond, uncond = encode(i)
        inputs = cont.sample_inputs(windowed) if cont is not None else dict(first_inputs or {})
        latents = pipe.sample_latents(cond, uncond, cfg.replace(seed=clip_seed(cfg.seed, i)), interrupt=interrupt,
                                      **{**sample_kwargs, **inputs})
        if cont is not None:
            made.append(cont)
        joins = chain is not None and cont is not None and cont.source == "latent"
        chain = join_latents(chain, latents, cont) if joins else latents  # type: ignore[arg-type]
    assert chain is not None  # clips >= 1
    video = pipe.decode(chain, tiling=tiling, progress=decode_progress, interrupt=interrupt)
    if first is not None and previous is not None:
        joined = join_pixels(previous, video, first)
        return ChainResult(joined, chain, made, joined.shape[2] - previous.shape[2])
    return ChainResult(video, chain, made, video.shape[2])


def clip_prompts(prompts: Sequence[str], clips: int) -> list[str]:
    """The prompt of each clip: prompt travel's segment ``i`` for clip ``i``, the last one repeated."""
    if not prompts:
        raise ValueError("no prompt given")
    return [prompts[segment_for_clip(i, len(prompts))] for i in range(clips)]
