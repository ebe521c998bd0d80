"""Image-to-video conditioning that continues a clip (clip extension, docs/long_video.md section 3): the frames
the new clip starts from go into the I2V model's conditioning latent, marked as given by its mask, as the start
image does for a single frame.

Two forms:
- ``pixel_head_condition``: the last ``P`` pixel frames of the previous video, at the head of a video of zeros,
  VAE-encoded; the mask marks those ``P`` pixel frames (the official mask with ``P`` given frames instead of 1).
- ``latent_head_condition``: latents that are already encoded (continuing from the previous clip's LATENT, no VAE
  round trip): the head latents then zeros; the mask marks the first ``given`` latent frames. SVI 2.0 Pro's Wan
  2.2 LoRAs expect ``given = 1``: an anchor latent (the first clip's start image) and the previous clip's last
  motion latents in the conditioning, but only the anchor marked as given (ComfyUI-KJNodes'
  ``WanImageToVideoSVIPro``: zero padding, mask 0 on latent frame 0 only in ComfyUI's inverted convention).
"""
from __future__ import annotations

import torch

from .. import latent_format
from ..progress import InterruptFn, ProgressFn
from .conditioning import TEMPORAL, ImageCondition, condition_mask

__all__ = ["latent_head_condition", "pixel_head_condition"]


def pixel_head_condition(vae, head: torch.Tensor, frames: int, clip_tokens: torch.Tensor | None = None, *,
                         tiling: str = "auto", progress: ProgressFn | None = None,
                         interrupt: InterruptFn | None = None) -> ImageCondition:
    """``head`` ``[1, 3, P, H, W]`` in [-1, 1] (P < frames pixel frames, already the clip's size) -> the
    conditioning of a ``frames``-frame clip starting with those frames."""
    p, height, width = int(head.shape[2]), int(head.shape[3]), int(head.shape[4])
    latent_format.check_video_size(width, height, frames)
    if not 1 <= p < frames:
        raise ValueError(f"continuation: {p} head frames for a clip of {frames}: must be from 1 to {frames - 1}")
    video = head.new_zeros(1, 3, frames, height, width)
    video[:, :, :p] = head[:1]
    z = vae.encode(video.to(vae.device, vae.dtype), tiling=tiling, progress=progress, interrupt=interrupt)
    z = latent_format.to_model(z.float().cpu())
    mask = condition_mask(frames, z.shape[3], z.shape[4], head=p)
    return ImageCondition(torch.cat([mask, z], dim=1), clip_tokens, width, height, frames)


def latent_head_condition(head: torch.Tensor, latent_frames: int, given: int | None = None,
                          clip_tokens: torch.Tensor | None = None) -> ImageCondition:
    """``head``: normalised latents ``[1, C, K, h, w]`` (K < latent_frames) -> the conditioning of a clip of
    ``latent_frames`` latent frames whose first ``given`` (default K) latent frames are marked given."""
    k, h, w = int(head.shape[2]), int(head.shape[3]), int(head.shape[4])
    given = k if given is None else given
    if not 1 <= k < latent_frames or not 1 <= given <= k:
        raise ValueError(f"continuation: {k} head latents ({given} given) for a clip of {latent_frames} latent "
                         f"frames: need 1 <= given <= head < {latent_frames}")
    z = head.new_zeros(1, head.shape[1], latent_frames, h, w, dtype=torch.float32)
    z[:, :, :k] = head[:1].float()
    mask = torch.zeros(1, TEMPORAL, latent_frames, h, w)
    mask[:, :, :given] = 1  # every pixel frame of a given latent frame (frame 0's one image frame fills all 4)
    frames = (latent_frames - 1) * latent_format.TEMPORAL_FACTOR + 1
    sf = latent_format.SPATIAL_FACTOR
    return ImageCondition(torch.cat([mask, z.cpu()], dim=1), clip_tokens, w * sf, h * sf, frames)
