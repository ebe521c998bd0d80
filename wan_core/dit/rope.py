"""3D rotary position embedding of the Wan DiT (docs/wan_spec.md section 2.5).

The head dim is split into (frame, height, width) parts of 44/42/42 for d = 128; each part rotates
interleaved pairs ``(x[2j], x[2j+1])`` by ``position * theta^(-2k / d_axis)`` with integer grid positions.
RIFLEx (``riflex.py``, docs/long_video.md) changes one frequency of the frame axis, here and nowhere else.
"""
from __future__ import annotations

import torch

from .riflex import RIFLEx


def axis_frequencies(dim: int, theta: float = 10000.0, riflex: RIFLEx | None = None) -> torch.Tensor:
    """``[dim/2]`` float64 frequencies ``theta^(-2k/dim)`` of one axis; with ``riflex``, frequency ``riflex.k``
    (1-based) replaced by ``0.9 * 2*pi / riflex.length`` (one-line ValueError when k is outside 1..dim/2)."""
    freqs = theta ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    if riflex is not None:
        riflex.check(dim)
        freqs[riflex.k - 1] = riflex.frequency
    return freqs


def rope_angles(
    grid: tuple[int, int, int],
    dims: tuple[int, int, int],
    theta: float = 10000.0,
    offset: tuple[int, int, int] = (0, 0, 0),
    riflex: RIFLEx | None = None,
) -> torch.Tensor:
    """Rotation angles ``[F*H*W, d/2]`` (float64) for tokens in row-major (f, h, w) order.

    ``offset`` shifts the grid positions (used when a rank holds a slice of the sequence); ``riflex`` changes
    one frequency of the frame axis (axis 0).
    """
    parts = []
    for axis, (n, d, o) in enumerate(zip(grid, dims, offset)):
        pos = torch.arange(o, o + n, dtype=torch.float64)
        ang = torch.outer(pos, axis_frequencies(d, theta, riflex if axis == 0 else None))  # [n, d/2]
        shape = [1, 1, 1, d // 2]
        shape[axis] = n
        parts.append(ang.view(shape).expand(*grid, d // 2))
    return torch.cat(parts, dim=-1).reshape(-1, sum(dims) // 2)


def rope_frequencies(
    grid: tuple[int, int, int], dims: tuple[int, int, int], theta: float = 10000.0,
    device: torch.device | str | None = None, riflex: RIFLEx | None = None,
) -> torch.Tensor:
    """complex64 rotations ``exp(i * angle)``, ``[L, d/2]``; angles computed in float64 as the official code
    (``riflex``: see :func:`rope_angles`)."""
    ang = rope_angles(grid, dims, theta, riflex=riflex)
    return torch.polar(torch.ones_like(ang), ang).to(torch.complex64).to(device)


def apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs of ``x [B, L, N, d]`` by ``freqs [L, d/2]`` (complex); returns ``[B, N, L, d]``.

    The result is contiguous in the attention layout, computed in float32 and cast back to ``x.dtype``.
    """
    b, L, n, d = x.shape
    xc = x.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)  # [B, N, L, d]
    rot = torch.view_as_complex(xc.view(b, n, L, d // 2, 2)) * freqs
    return torch.view_as_real(rot).view(b, n, L, d).to(x.dtype)
