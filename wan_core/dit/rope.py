"""3D rotary position embedding of the Wan DiT (docs/wan_spec.md section 2.5).

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


def rope_frequencies(
    grid: tuple[int, int, int], dims: tuple[int, int, int], theta: float = 10000.0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """complex64 rotations ``exp(i * angle)``, ``[L, d/2]``; angles computed in float64 as the official code."""
    ang = rope_angles(grid, dims, theta)
    return torch.polar(torch.ones_like(ang), ang).to(torch.complex64).to(device)


def apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs of ``x [B, L, N, d]`` by ``freqs [L, d/2]`` (complex); returns ``[B, N, L, d]``.

    The result is contiguous in the attention layout, computed in float32 and cast back to ``x.dtype``.
    """
    b, L, n, d = x.shape
    xc = x.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)  # [B, N, L, d]
    rot = torch.view_as_complex(xc.view(b, n, L, d // 2, 2)) * freqs
    return torch.view_as_real(rot).view(b, n, L, d).to(x.dtype)
