"""Deterministic initial noise: the same seed gives the same latent noise on every device.

Implements issue 4 item 3 (docs/wan_spec.md section 6.2 notes the official CUDA generator does not reproduce on CPU):
draw float32 N(0, I) from a CPU ``torch.Generator`` seeded with ``seed``, then move it. ComfyUI draws its
KSampler noise the same way (CPU generator, ``torch.randn`` of the full latent shape).
"""
from __future__ import annotations

import numbers
from typing import Sequence

import torch

__all__ = ["make_noise"]

_MAX_SEED = 2**64 - 1


def make_noise(seed: int, shape: Sequence[int], device: torch.device | str | None = None,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Float32 N(0, I) noise of ``shape`` (e.g. ``[B, 16, F, H, W]``) from ``seed``, moved to ``device``/``dtype``.

    ``seed``: integer in [0, 2**64 - 1].
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed <= _MAX_SEED:
        raise ValueError(f"seed={seed!r}: the seed must be an integer in [0, 2**64 - 1]")
    dims = tuple(int(d) for d in shape)
    if not dims or any(d < 1 for d in dims):
        raise ValueError(f"noise shape {tuple(shape)}: every dimension must be >= 1, e.g. [1, 16, 21, 60, 104]")
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    noise = torch.randn(dims, generator=generator, dtype=torch.float32, device="cpu")
    return noise.to(device=device, dtype=dtype)
