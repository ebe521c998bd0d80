"""TI2V-5B image-to-video (docs/wan22.md section 2): the start image's latent is latent frame 0, held clean at
timestep 0 on its tokens while the rest of the video is denoised. The same with K latent frames is how a clip
extension gives a text-to-video or TI2V model its clean head (docs/long_video.md section 3)."""
from __future__ import annotations

import torch


def first_frame_timesteps(timestep: torch.Tensor, grid: tuple[int, int, int], frames: int = 1) -> torch.Tensor:
    """Per-token timesteps ``[B, L]`` for a first-frame-conditioned latent: 0 on the tokens of latent frame 0,
    the step's ``timestep [B]`` elsewhere, tokens in (f, h, w) order (Wan2.2 wan/textimage2video.py lines
    573-578, ``mask2[0][0][:, ::2, ::2] * timestep``; any batch size, where the official code takes one).
    ``frames`` > 1: the first ``frames`` latent frames are given (clip extension continues from several)."""
    f, h, w = grid
    mask = torch.ones(f, h * w, dtype=torch.float32, device=timestep.device)
    mask[:frames] = 0
    return (mask.flatten()[None] * timestep.to(torch.float32)[:, None]).to(timestep.dtype)


class FirstFrameGuidance:
    """Wraps a velocity function for TI2V-5B image-to-video: the model always sees latent frame 0 replaced by the
    image's normalised latent ``z0 [1 or B, C, 1, h, w]`` at timestep 0 on its tokens (docs/wan22.md section 2);
    a ``z0`` of K frames holds the first K latent frames so (clip extension, docs/long_video.md section 3);
    the solver's own frame 0 is discarded and replaced at the end (``finish``), as the official code and
    diffusers' ``expand_timesteps`` path do after every step."""

    def __init__(self, inner, z0: torch.Tensor, patch_size: tuple[int, int, int]):
        self.inner, self.z0, self.patch = inner, z0, patch_size

    def begin_step(self, step: int, num_steps: int, sigma: float) -> None:
        if hasattr(self.inner, "begin_step"):
            self.inner.begin_step(step, num_steps, sigma)

    def conditioned(self, x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        x[:, :, : self.z0.shape[2]] = self.z0.to(x)
        return x

    def __call__(self, x: torch.Tensor, sigma: float, timestep: torch.Tensor) -> torch.Tensor:
        grid = tuple(s // p for s, p in zip(x.shape[2:], self.patch))
        t = first_frame_timesteps(timestep, grid, int(self.z0.shape[2]))  # type: ignore[arg-type]
        return self.inner(self.conditioned(x), sigma, t)

    @property
    def steps(self) -> list[str]:
        return list(getattr(self.inner, "steps", []))


def check_first_frame(z: torch.Tensor, shape: tuple[int, ...], name: str, max_frames: int = 1) -> None:
    """The first-frame latent must be ``[1 or B, C, K, h, w]`` of the video's latent size with K = 1, or up to
    ``max_frames`` (and fewer than the video's) for the head of a clip extension: one line otherwise."""
    b, c, f, h, w = shape
    frames_ok = z.dim() == 5 and 1 <= z.shape[2] <= min(max_frames, f - 1 if max_frames > 1 else 1)
    if not frames_ok or z.shape[1] != c or tuple(z.shape[3:]) != (h, w) or z.shape[0] not in (1, b):
        k = "1" if max_frames == 1 else f"1..{min(max_frames, f - 1)}"
        raise ValueError(f"{name}: the start image's latent has shape {list(z.shape)}, expected [1, {c}, {k}, {h}, "
                         f"{w}] (encode the image at the video's width and height)")
