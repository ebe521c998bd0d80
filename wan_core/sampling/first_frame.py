"""TI2V-5B image-to-video (docs/wan22.md section 2): the start image's latent is latent frame 0, held clean at
timestep 0 on its tokens while the rest of the video is denoised."""
from __future__ import annotations

import torch


def first_frame_timesteps(timestep: torch.Tensor, grid: tuple[int, int, int]) -> torch.Tensor:
    """Per-token timesteps ``[B, L]`` for a first-frame-conditioned latent: 0 on the tokens of latent frame 0,
    the step's ``timestep [B]`` elsewhere, tokens in (f, h, w) order (Wan2.2 wan/textimage2video.py lines
    573-578, ``mask2[0][0][:, ::2, ::2] * timestep``; any batch size, where the official code takes one)."""
    f, h, w = grid
    mask = torch.ones(f, h * w, dtype=torch.float32, device=timestep.device)
    mask[0] = 0
    return (mask.flatten()[None] * timestep.to(torch.float32)[:, None]).to(timestep.dtype)


class FirstFrameGuidance:
    """Wraps a velocity function for TI2V-5B image-to-video: the model always sees latent frame 0 replaced by the
    image's normalised latent ``z0 [1 or B, C, 1, h, w]`` at timestep 0 on its tokens (docs/wan22.md section 2);
    the solver's own frame 0 is discarded and replaced at the end (``finish``), as the official code and
    diffusers' ``expand_timesteps`` path do after every step."""

    def __init__(self, inner, z0: torch.Tensor, patch_size: tuple[int, int, int]):
        self.inner, self.z0, self.patch = inner, z0, patch_size

    def begin_step(self, step: int, num_steps: int, sigma: float) -> None:
        if hasattr(self.inner, "begin_step"):
            self.inner.begin_step(step, num_steps, sigma)

    def conditioned(self, x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        x[:, :, :1] = self.z0.to(x)
        return x

    def __call__(self, x: torch.Tensor, sigma: float, timestep: torch.Tensor) -> torch.Tensor:
        grid = tuple(s // p for s, p in zip(x.shape[2:], self.patch))
        t = first_frame_timesteps(timestep, grid)  # type: ignore[arg-type]
        return self.inner(self.conditioned(x), sigma, t)

    @property
    def steps(self) -> list[str]:
        return list(getattr(self.inner, "steps", []))


def check_first_frame(z: torch.Tensor, shape: tuple[int, ...], name: str) -> None:
    """The first-frame latent must be ``[1 or B, C, 1, h, w]`` of the video's latent size (one line otherwise)."""
    b, c, _, h, w = shape
    if z.dim() != 5 or z.shape[1] != c or z.shape[2] != 1 or tuple(z.shape[3:]) != (h, w) or z.shape[0] not in (1, b):
        raise ValueError(f"{name}: the start image's latent has shape {list(z.shape)}, expected [1, {c}, 1, {h}, {w}] "
                         f"(encode the image at the video's width and height)")
