"""A linear code of the demo VAE's exact shape, used to teach the VAE its first latent space.

The Wan 2.1 VAE maps frame 0 alone and every later group of 4 frames, 8x8 pixels at a time, to ``z_dim``
numbers. The best *linear* code of that shape is a principal-component projection of those pixel blocks: frame
0's 8x8x3 blocks and the later 4x8x8x3 blocks each get their own ``z_dim`` components. On held-out demo clips it
reconstructs at 28.6 dB, where the demo VAE trained for reconstruction alone sat near 22 dB after the same CPU
time: from a random start the convolutional encoder learns very slowly. Regressing the encoder onto the
(per-component normalised) coefficients, and the decoder from them, brings it near that code's quality in about
a thousand steps (26.6 dB at step 1,100); the reconstruction loss trained beside it then takes it past the code
(29.8 dB after the decoder stage with object pixels weighted 5, run 9; 30.85 with the plain MSE, the shipped
VAE: docs/demo_model.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class BlockPCA:
    """Per-block principal components: ``mean0`` [D0], ``basis0`` [z, D0], ``scale0`` [z] for frame 0 (D0 = 3 s^2)
    and ``mean``, ``basis``, ``scale`` (D = 3 t s^2) for each later group of ``temporal`` frames."""

    mean0: torch.Tensor
    basis0: torch.Tensor
    scale0: torch.Tensor
    mean: torch.Tensor
    basis: torch.Tensor
    scale: torch.Tensor
    temporal: int = 4
    spatial: int = 8

    @property
    def z_dim(self) -> int:
        return self.basis.shape[0]

    def code(self, video: torch.Tensor) -> torch.Tensor:
        """``video`` [B, 3, T, H, W] (T = 1 + 4n, H and W multiples of 8) -> normalised coefficients
        [B, z, 1 + n, H/8, W/8], each component with unit std over the clips it was fitted on."""
        first, rest = blocks(video, self.temporal, self.spatial)
        c0 = (first - self.mean0) @ self.basis0.T / self.scale0  # [B, h, w, z]
        c = (rest - self.mean) @ self.basis.T / self.scale  # [B, n, h, w, z]
        return torch.cat([c0[:, None], c], 1).permute(0, 4, 1, 2, 3).contiguous()

    def decode(self, coefficients: torch.Tensor) -> torch.Tensor:
        """The linear reconstruction [B, 3, T, H, W] from ``code``'s output (its least-squares inverse)."""
        c = coefficients.permute(0, 2, 3, 4, 1)  # [B, 1 + n, h, w, z]
        first = (c[:, 0] * self.scale0) @ self.basis0 + self.mean0
        rest = (c[:, 1:] * self.scale) @ self.basis + self.mean
        return unblock(first, rest, self.temporal, self.spatial)


def _check(video: torch.Tensor, temporal: int, spatial: int) -> None:
    if video.ndim != 5 or video.shape[1] != 3:
        raise ValueError(f"block PCA: expected a video [B, 3, T, H, W], got shape {tuple(video.shape)}")
    _, _, t, h, w = video.shape
    if (t - 1) % temporal or h % spatial or w % spatial:
        raise ValueError(f"block PCA: frames must be 1 + {temporal}n and height/width multiples of {spatial}, "
                         f"got {t} frames of {h}x{w}")


def blocks(video: torch.Tensor, temporal: int = 4, spatial: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """``video`` [B, 3, T, H, W] -> (frame 0's blocks [B, h, w, 3 s^2], the later groups' [B, n, h, w, 3 t s^2])."""
    _check(video, temporal, spatial)
    b, c, t, hh, ww = video.shape
    h, w, n, s = hh // spatial, ww // spatial, (t - 1) // temporal, spatial
    first = video[:, :, 0].reshape(b, c, h, s, w, s).permute(0, 2, 4, 1, 3, 5).reshape(b, h, w, c * s * s)
    rest = video[:, :, 1:].reshape(b, c, n, temporal, h, s, w, s).permute(0, 2, 4, 6, 1, 3, 5, 7)
    return first, rest.reshape(b, n, h, w, c * temporal * s * s)


def unblock(first: torch.Tensor, rest: torch.Tensor, temporal: int = 4, spatial: int = 8) -> torch.Tensor:
    """The inverse of :func:`blocks`."""
    b, h, w, _ = first.shape
    n, s = rest.shape[1], spatial
    f0 = first.reshape(b, h, w, 3, s, s).permute(0, 3, 1, 4, 2, 5).reshape(b, 3, 1, h * s, w * s)
    fr = rest.reshape(b, n, h, w, 3, temporal, s, s).permute(0, 4, 1, 5, 2, 6, 3, 7)
    return torch.cat([f0, fr.reshape(b, 3, n * temporal, h * s, w * s)], 2)


def _components(rows: torch.Tensor, z: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean, the ``z`` leading principal directions, their coefficients' std) of ``rows`` [N, D], in float64.
    Each direction's sign is fixed (its largest-magnitude entry positive) so every machine fits the same code."""
    x = rows.double()
    mean = x.mean(0)
    cov = (x - mean).T @ (x - mean) / (x.shape[0] - 1)
    lam, vec = torch.linalg.eigh(cov)  # ascending
    basis = vec[:, -z:].flip(1).T.contiguous()  # [z, D], strongest first
    pivot = basis.abs().argmax(1)
    basis = basis * torch.sign(basis.gather(1, pivot[:, None]))
    scale = lam[-z:].flip(0).clamp_min(1e-12).sqrt()
    return mean, basis, scale


def fit_block_pca(videos, z_dim: int, temporal: int = 4, spatial: int = 8) -> BlockPCA:
    """Fit the code on an iterable of videos [3, T, H, W] (each T = 1 + ``temporal`` n); float32 result."""
    firsts, rests = [], []
    for v in videos:
        f, r = blocks(v[None], temporal, spatial)
        firsts.append(f.reshape(-1, f.shape[-1]))
        rests.append(r.reshape(-1, r.shape[-1]))
    if not rests or sum(r.shape[0] for r in rests) < z_dim:
        raise ValueError(f"block PCA: need videos with at least {z_dim} blocks after frame 0 to fit {z_dim} components")
    m0, b0, s0 = (t.float() for t in _components(torch.cat(firsts), z_dim))
    m, b, s = (t.float() for t in _components(torch.cat(rests), z_dim))
    return BlockPCA(m0, b0, s0, m, b, s, temporal=temporal, spatial=spatial)


def fit_demo_block_pca(z_dim: int, clips: int = 300) -> BlockPCA:
    """The code fitted on the first ``clips`` training clips (``data.training_seeds``) rendered at 64x64, 17 frames."""
    from . import data as D

    seeds = D.training_seeds(clips)
    return fit_block_pca((D.make_clip(s, width=64, height=64, frames=17)[0] for s in seeds), z_dim)
