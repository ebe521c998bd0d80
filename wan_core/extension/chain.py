"""Chained clips (docs/long_video.md section 3): a video made longer one clip at a time, each clip continuing the
one before from its last frames.

Two ways. From frames (the default): each clip is decoded and the next one continues its last ``overlap`` frames
(``from_pixels``), joined with the colour match measured on the overlap. In latent space (``svi``, or asked for):
clip ``i + 1`` continues the latents sampled so far (``from_latent``: the chain's first latent frame as anchor,
then its last ones), its new latent frames are appended, and the whole chain is decoded once at the end.
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
    latents: torch.Tensor  # latent_space: the chain's raw latents (new clips only); else the last clip's
    continuations: list[Continuation] = field(default_factory=list)
    new_frames: int = 0  # frames added to the previous video (or the whole video from text)


def clip_seed(seed: int, clip: int) -> int:
    """Each clip its own noise: the same seed would give every clip the same start noise pattern."""
    return (int(seed) + clip) % 2**64


def run_chain(pipe, cfg, clips: int, extension: Extension, encode: Callable[[int], tuple],
              previous: torch.Tensor | None = None, *, latent_space: bool | None = None,
              clip_tokens: torch.Tensor | None = None, on_clip: Callable[[int, int], object] | None = None,
              tiling: str = "auto", interrupt=None, decode_progress=None, first_inputs: dict | None = None,
              **sample_kwargs) -> ChainResult:
    """Sample ``clips`` clips of ``cfg.frames`` frames, each continuing the last.

    ``encode(i) -> (cond, uncond)``: the prompt embeddings of clip ``i`` (prompt travel: one segment per clip).
    ``previous``: a video ``[1, 3, T, H, W]`` in [-1, 1] to continue; None: clip 0 is drawn from the text alone.
    ``latent_space``: clips continue the chain's latents (anchor + motion, one decode at the end) instead of the
    decoded frames (each clip decoded, continued from its last frames, colour-matched); None: only for ``svi``,
    which needs latents (on the demo model a text-to-video clip continues motion far more often from frames:
    docs/long_video.md section 3). ``on_clip(i, clips)``: called as each clip starts. ``first_inputs``: what clip 0
    drawn from text takes (an image-to-video start image's ``image`` / ``first_frame``); ``sample_kwargs`` go to
    every ``sample_latents`` call (callback, cache, ...)."""
    if isinstance(clips, bool) or not isinstance(clips, int) or not 1 <= clips <= MAX_CLIPS:
        raise ValueError(f"clips={clips!r}: must be an integer from 1 to {MAX_CLIPS}")
    extension.check_clip(cfg.frames)
    windowed = cfg.context is not None and not cfg.context.covers(cfg.latent_shape[2])
    in_latents = extension.conditioning == "svi" if latent_space is None else latent_space
    video, chain, made = previous, None, []
    first_clip, start = None, 0 if previous is None else previous.shape[2]

    def sample(i: int, inputs: dict) -> torch.Tensor:
        cond, uncond = encode(i)
        return pipe.sample_latents(cond, uncond, cfg.replace(seed=clip_seed(cfg.seed, i)), interrupt=interrupt,
                                   **{**sample_kwargs, **inputs})

    def decode(z: torch.Tensor) -> torch.Tensor:
        return pipe.decode(z, tiling=tiling, progress=decode_progress, interrupt=interrupt)

    for i in range(clips):
        if on_clip is not None:
            on_clip(i, clips)
        if chain is not None and in_latents:  # continue the latents drawn so far
            cont = from_latent(pipe.dit, chain, cfg.frames, extension, windowed=windowed, clip_tokens=clip_tokens)
            chain = join_latents(chain, sample(i, cont.sample_inputs(windowed)), cont)
        elif video is not None and (chain is None or not in_latents):  # continue frames
            cont = from_pixels(pipe.vae, pipe.dit, video, cfg.frames, extension, windowed=windowed,
                               clip_tokens=clip_tokens, tiling=tiling, interrupt=interrupt)
            chain = sample(i, cont.sample_inputs(windowed))
            if in_latents:  # the first clip after a video: later clips continue its latents
                first_clip = cont
            else:
                video = join_pixels(video, decode(chain), cont)
        else:  # clip 0 from the text (or the start image)
            cont, chain = None, sample(i, dict(first_inputs or {}))
            video = None if in_latents else decode(chain)
        if cont is not None:
            made.append(cont)
    assert chain is not None  # clips >= 1
    if in_latents:
        video = decode(chain)
        if first_clip is not None and previous is not None:
            video = join_pixels(previous, video, first_clip)
    assert video is not None
    return ChainResult(video, chain, made, video.shape[2] - start)


def clip_prompts(prompts: Sequence[str], clips: int) -> list[str]:
    """The prompt of each clip: prompt travel's segment ``i`` for clip ``i``, the last one repeated."""
    if not prompts:
        raise ValueError("no prompt given")
    return [prompts[segment_for_clip(i, len(prompts))] for i in range(clips)]
