"""Finiteness checks: NaN/Inf are stopped where they enter, never passed on to become a black video.

Three places use them: checkpoint loading (every tensor as it is read, ``checkpoint.materialize`` and the fp8
DiT path), LATENT inputs (the sampler's start latent, the VAE decode input) and the sampling loop (the new
sample after every step). The common case, all values finite, costs one reduction that allocates nothing:
a sum is non-finite as soon as one term is NaN or Inf, and the exact count is computed only when the sum
says something is wrong (a sum can also overflow on huge but finite values; the count then says 0).
"""
from __future__ import annotations

import torch

__all__ = ["NonFiniteError", "check_finite", "nonfinite_count"]

# fp8 has no sum kernel on CPU; its NaN/Inf are bit patterns: those whose low 7 bits (sign aside) are at least
# the threshold. As int8 the positive ones are the largest values, as uint8 the negative ones, so two max
# reductions find them without a temporary tensor.
_FP8_NAN_BITS = {
    getattr(torch, "float8_e4m3fn", None): 0x7F,  # e4m3fn: S.1111.111 is NaN (no Inf)
    getattr(torch, "float8_e5m2", None): 0x7C,  # e5m2: S.11111.xx is Inf (xx = 0) or NaN
}
_FP8_NAN_BITS.pop(None, None)


class NonFiniteError(ValueError):
    """NaN or Inf values where finite numbers are required; the message names the input or the step."""


def nonfinite_count(t: torch.Tensor) -> int:
    """How many values of ``t`` are NaN or +-Inf (0 for integer and bool tensors).

    One sum over ``t`` when every value is finite (no temporary tensor); the exact count only otherwise.
    Synchronises with the device (returns a Python int).
    """
    if t.numel() == 0 or t.is_meta or not (t.is_floating_point() or t.is_complex()):
        return 0  # meta tensors (shape-only loads, docs/memory.md) have no values
    low = _FP8_NAN_BITS.get(t.dtype)
    if low is not None:
        if int(t.view(torch.int8).amax()) < low and int(t.view(torch.uint8).amax()) < 0x80 | low:
            return 0
        return int(((t.view(torch.uint8) & 0x7F) >= low).sum())
    if bool(torch.isfinite(t.sum())):
        return 0
    return int((~torch.isfinite(t)).sum())


def check_finite(t: torch.Tensor, what: str, hint: str = "") -> None:
    """Raise :class:`NonFiniteError` when ``t`` holds NaN/Inf: "``what``: 12 of 4096 values are NaN/Inf".

    ``what`` names the input (e.g. "latent (LATENT input of WanCore Sampler)"); ``hint`` says what to do.
    """
    bad = nonfinite_count(t)
    if bad:
        raise NonFiniteError(f"{what}: {bad} of {t.numel()} values are NaN/Inf (shape {list(t.shape)})"
                             + (f"; {hint}" if hint else ""))
