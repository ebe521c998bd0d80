"""3D rotary position embedding of the Wan DiT (wan_spec.md section 2.5).

The head dim is split into (frame, height, width) parts of 44/42/42 for d = 128; each part rotates
interleaved pairs ``(x[2j], x[2j+1])`` by ``position * theta^(-2k / d_axis)`` with integer grid positions.
"""
from __future__ import annotations

import torch


def axis_frequencies(dim: int, theta: float = 10000.0) -> torch.Tensor:
    """``[dim/2]`` float64 frequencies ``theta^(-2k/dim)`` of one axis."""
    return theta ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def rope_angles(
    grid: tuple[int, int, int],
    dims: tuple[int, int, int],
    theta: float = 10000.0,
    offset: tuple[int, int, int] = (0, 0, 0),
) -> torch.Tensor:
    """Rotation angles ``[F*H*W, d/2]`` (float64) for tokens in row-major (f, h, w) order.

    ``offset`` shifts the grid positions (used when a rank holds a slice of the sequence).
    """
    parts = []
    for axis, (n, d, o) in enumerate(zip(grid, dims, offset)):
        pos = torch.arange(o, o + n, dtype=torch.float64)
        ang = torch.outer(pos, axis_frequencies(d, theta))  # [n, d/2]
        shape = [1, 1, 1, d // 2]
        shape[axis] = n
        parts.append(ang.view(shape).expand(*grid, d // 2))
    return torch.cat(parts, dim=-1).reshape(-1, sum(dims) // 2)


def rope_cos_sin(
    grid: tuple[int, int, int], dims: tuple[int, int, int], theta: float = 10000.0,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 ``(cos, sin)``, each ``[L, d/2]``, angles computed in float64 as the official code does."""
    ang = rope_angles(grid, dims, theta)
    return ang.cos().float().to(device), ang.sin().float().to(device)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs of ``x`` ``[B, L, N, d]`` by ``cos/sin`` ``[L, d/2]``; computed in float32."""
    dtype = x.dtype
    xf = x.float().unflatten(-1, (-1, 2))  # [B, L, N, d/2, 2]
    xe, xo = xf[..., 0], xf[..., 1]
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    out = torch.stack((xe * c - xo * s, xe * s + xo * c), dim=-1)
    return out.flatten(-2).to(dtype)
