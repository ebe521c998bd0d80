"""Joining a continued clip to the video it continues (docs/long_video.md section 3). The output holds the
previous video's own frames, untouched, then the clip's frames after the overlap (the clip's re-drawing of the
overlap only serves to measure the colour shift)."""
from __future__ import annotations

import torch

from .colour import match_colour
from .head import Continuation


def join_pixels(previous: torch.Tensor, clip: torch.Tensor, continuation: Continuation) -> torch.Tensor:
    """``previous`` ``[1, 3, T, H, W]`` and the decoded clip ``[B, 3, F, H, W]`` (in [-1, 1]; F at least the
    prepared clip's length: more when further clips were chained to it in latent space) of a pixel-source
    continuation -> ``[B, 3, T + F - overlap, H, W]``, the new frames colour-matched to the overlap."""
    ext = continuation.extension
    if continuation.source != "pixels":
        raise ValueError("join: this clip continues a latent; join the latents (join_latents) and decode once")
    if clip.shape[2] < continuation.frames or clip.shape[3:] != previous.shape[3:]:
        raise ValueError(f"join: the clip is {list(clip.shape)} but the continuation was prepared for "
                         f"{continuation.frames} frames of {previous.shape[4]}x{previous.shape[3]}")
    reference = previous[:, :, previous.shape[2] - ext.overlap:].to(clip).expand(clip.shape[0], -1, -1, -1, -1)
    new = match_colour(clip[:, :, ext.overlap:], clip[:, :, : ext.overlap], reference, ext.colour)
    return torch.cat([previous.to(clip).expand(clip.shape[0], -1, -1, -1, -1), new], dim=2)


def join_latents(previous: torch.Tensor, clip: torch.Tensor, continuation: Continuation) -> torch.Tensor:
    """``previous`` ``[1, C, F0, h, w]`` and the clip's raw latents ``[B, C, F, h, w]`` of a latent-source
    continuation -> ``[B, C, F0 + F - K, h, w]`` (the clip's K head latents dropped: they are the anchor and the
    previous video's last latents). Decoding it gives the whole chain in one pass."""
    if continuation.source != "latent":
        raise ValueError("join: this clip continues pixels; join the decoded frames (join_pixels)")
    k = continuation.head.shape[2]
    if clip.shape[1] != previous.shape[1] or clip.shape[3:] != previous.shape[3:] or clip.shape[2] <= k:
        raise ValueError(f"join: the clip latent {list(clip.shape)} does not continue {list(previous.shape)} "
                         f"(same channels and size, more than {k} latent frames)")
    return torch.cat([previous.to(clip).expand(clip.shape[0], -1, -1, -1, -1), clip[:, :, k:]], dim=2)
