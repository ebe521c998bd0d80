"""The head of a continued clip (docs/long_video.md section 3): what the new clip starts from, encoded once and
put in the form the model takes it.

From pixels (a video file, frames, ComfyUI's IMAGE): the previous video's last ``overlap`` frames, VAE-encoded as a
video of their own, are the clip's first latent frames: the causal VAE encodes the first of them alone, exactly as
it encodes the first frame of any clip. From latents (the previous clip's LATENT, no VAE round trip): the previous
video's latent frame 0 (its start image, a single-frame latent as every clip's frame 0 must be) then its last
``latent_overlap - 1`` latent frames; the joined latent decodes as one video. SVI 2.0 Pro chains the same way
(anchor latent + the previous clip's last motion latents).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import latent_format
from ..i2v.conditioning import ImageCondition
from ..i2v.continuation import latent_head_condition, pixel_head_condition
from ..progress import InterruptFn, ProgressFn
from .request import Extension

Source = str  # "pixels" | "latent"


@dataclass(frozen=True)
class Continuation:
    """The prepared head of a clip: ``head`` raw latents ``[1, C, K, h, w]`` of its first K latent frames,
    ``method`` (``Extension.method``), ``image`` the I2V conditioning (image / svi methods), ``frames`` the clip's
    length in pixel frames, ``source`` ``pixels`` or ``latent``."""

    head: torch.Tensor
    method: str
    image: ImageCondition | None
    frames: int
    source: Source
    extension: Extension

    def sample_inputs(self, windowed: bool = False) -> dict:
        """The keyword arguments of ``WanPipeline.sample_latents`` that carry the head. ``windowed``: the clip is
        sampled in context windows, where TI2V-5B's several-frame first-frame latent cannot go (a window starting
        later would hold the head at the wrong positions): the same latents go in as known frames instead."""
        if self.method in ("image", "svi"):
            return {"image": self.image}
        if self.method == "first_frame" and not windowed:
            return {"first_frame": self.head}
        return {"known": self.head}


def pixel_head(previous: torch.Tensor, extension: Extension) -> torch.Tensor:
    """``previous`` ``[1, 3, T, H, W]`` in [-1, 1] -> its last ``overlap`` frames."""
    return previous[:, :, previous.shape[2] - extension.overlap:]


def from_pixels(vae, dit, previous: torch.Tensor, frames: int, extension: Extension, *, windowed: bool = False,
                clip_tokens: torch.Tensor | None = None, tiling: str = "auto", progress: ProgressFn | None = None,
                interrupt: InterruptFn | None = None) -> Continuation:
    """Continue the video ``previous`` ``[1, 3, T, H, W]`` in [-1, 1] with a clip of ``frames`` frames of its size."""
    if previous.dim() != 5 or previous.shape[:2] != (1, 3):
        raise ValueError(f"extend: the video to continue must be [1, 3, T, H, W], got {list(previous.shape)}")
    size = (int(previous.shape[4]), int(previous.shape[3]))
    extension.check_clip(frames)
    extension.check_previous(int(previous.shape[2]), size, size)
    latent_format.check_video_size(size[0], size[1], frames)
    method = extension.method(dit, windowed)
    if method == "svi":
        raise ValueError("extend conditioning svi continues from the previous clip's latent (its anchor and motion "
                         "latents); from a video file or images use auto")
    head = pixel_head(previous, extension)
    z = vae.encode(head.to(vae.device, vae.dtype), tiling=tiling, progress=progress, interrupt=interrupt)
    z = z.float().cpu()
    image = None
    if method == "image":
        image = pixel_head_condition(vae, head, frames, clip_tokens, tiling=tiling, interrupt=interrupt)
    return Continuation(z, method, image, frames, "pixels", extension)


def from_latent(dit, previous: torch.Tensor, frames: int, extension: Extension, *, windowed: bool = False,
                clip_tokens: torch.Tensor | None = None) -> Continuation:
    """Continue the raw latent ``previous`` ``[1, C, F, h, w]`` (a clip or a joined chain) with a clip of
    ``frames`` frames: head = its latent frame 0 + its last ``latent_overlap - 1`` latent frames (at least 1)."""
    if previous.dim() != 5 or previous.shape[0] != 1:
        raise ValueError(f"extend: the latent to continue must be [1, C, F, h, w], got {list(previous.shape)}")
    extension.check_clip(frames)
    motion = max(extension.latent_overlap - 1, 1)
    if previous.shape[2] < motion + 1:
        raise ValueError(f"extend: the latent to continue has {previous.shape[2]} latent frames; an overlap of "
                         f"{extension.overlap} frames needs {motion + 1} (its first and last {motion})")
    head = torch.cat([previous[:, :, :1], previous[:, :, previous.shape[2] - motion:]], dim=2).float().cpu()
    method = extension.method(dit, windowed)
    latent_frames = (frames - 1) // latent_format.TEMPORAL_FACTOR + 1
    if latent_frames <= head.shape[2]:
        raise ValueError(f"extend: a clip of {frames} frames ({latent_frames} latent) has nothing new after its "
                         f"{head.shape[2]} head latents; ask for at least "
                         f"{head.shape[2] * latent_format.TEMPORAL_FACTOR + 1} frames")
    image = None
    if method in ("image", "svi"):
        given = 1 if method == "svi" else head.shape[2]
        image = latent_head_condition(latent_format.to_model(head), latent_frames, given, clip_tokens)
    return Continuation(head, method, image, frames, "latent", extension)
