"""Known head frames for a text-to-video model (clip extension, docs/long_video.md section 3): the first ``K``
latent frames of the clip are given (the encoded end of the previous video) and the model draws the rest.

At every step the head frames the model sees are the given latent re-noised to the step's sigma on its own fixed
noise, ``(1 - sigma) z + sigma n``: the point of the straight flow path from ``n`` to ``z``. The head's velocity
is that path's own, ``n - z``, so every solver moves the head along the path; the clip's other frames attend to a
head that is exactly as noisy as they are (what the model was trained on) and continue it. After the last step
the head is ``z`` itself.
"""
from __future__ import annotations

import torch


class KnownFramesGuidance:
    """Wraps a velocity function ``(x, sigma, timestep) -> v`` over ``[B, C, F, h, w]``.

    ``known``: the normalised head latent ``[1 or B, C, K, h, w]`` (K < F); ``noise``: its fixed noise, the head
    of the run's starting noise (the same shape, or broadcastable)."""

    def __init__(self, inner, known: torch.Tensor, noise: torch.Tensor):
        if known.dim() != 5 or noise.shape[2] != known.shape[2]:
            raise ValueError(f"known frames: latent {list(known.shape)} and noise {list(noise.shape)} must be "
                             f"[B, C, K, h, w] with the same K")
        self.inner, self.known, self.noise = inner, known, noise
        self.frames = int(known.shape[2])

    def begin_step(self, step: int, num_steps: int, sigma: float) -> None:
        if hasattr(self.inner, "begin_step"):
            self.inner.begin_step(step, num_steps, sigma)

    def on_path(self, sigma: float, like: torch.Tensor) -> torch.Tensor:
        """The head at ``sigma``: ``(1 - sigma) z + sigma n``, shaped and typed like ``like``'s head."""
        z, n = self.known.to(like), self.noise.to(like)
        return ((1.0 - sigma) * z + sigma * n).expand_as(like[:, :, : self.frames])

    def conditioned(self, x: torch.Tensor, sigma: float) -> torch.Tensor:
        x = x.clone()
        x[:, :, : self.frames] = self.on_path(sigma, x)
        return x

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        """The final latent with the head replaced by the given frames themselves."""
        x = x.clone()
        x[:, :, : self.frames] = self.known.to(x).expand_as(x[:, :, : self.frames])
        return x

    def __call__(self, x: torch.Tensor, sigma: float, timestep: torch.Tensor) -> torch.Tensor:
        v = self.inner(self.conditioned(x, float(sigma)), sigma, timestep).clone()
        v[:, :, : self.frames] = (self.noise.to(v) - self.known.to(v)).expand_as(v[:, :, : self.frames])
        return v

    @property
    def steps(self) -> list[str]:
        return list(getattr(self.inner, "steps", []))
