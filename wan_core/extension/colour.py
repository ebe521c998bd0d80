"""Colour matching across a join (clip extension, docs/long_video.md section 3).

A continued clip is decoded from latents, and its first frames re-draw the previous video's last frames (the
overlap). Each VAE round trip and each new clip nudges brightness and colour, and over a chain of clips the drift
adds up: the most reported problem of chained Wan clips. The overlap gives a measurement of exactly that nudge:
the same frames, as the user's video has them (``reference``) and as the new clip drew them (``drawn``). The
transform that maps ``drawn`` onto ``reference`` is fitted per colour channel and applied to the new frames.

- ``mean-std``: per channel, ``(x - mean_drawn) / std_drawn * std_ref + mean_ref`` (Reinhard et al. 2001's colour
  transfer without the decorrelated colour space: per RGB channel, which is what the Wan tools' default
  matchers amount to on a near-identical overlap).
- ``histogram``: per channel, each value moves to the reference value at the same quantile (exact histogram
  specification on the overlap's values, linearly interpolated between them).
"""
from __future__ import annotations

from typing import Literal, get_args

import torch

ColourMatch = Literal["off", "mean-std", "histogram"]
COLOUR_MATCHES: tuple[str, ...] = get_args(ColourMatch)
_EPS = 1e-6  # a flat channel in the overlap: keep its spread rather than divide by zero


def match_colour(frames: torch.Tensor, drawn: torch.Tensor, reference: torch.Tensor,
                 method: ColourMatch = "mean-std") -> torch.Tensor:
    """``frames`` ``[B, 3, T, H, W]`` -> the same with the colour transform that maps ``drawn`` onto
    ``reference`` (both ``[B, 3, P, H, W]``, the overlap) applied, clamped to [-1, 1]; values in [-1, 1]."""
    if method not in COLOUR_MATCHES:
        raise ValueError(f"colour match {method!r}: must be one of {', '.join(COLOUR_MATCHES)}")
    if drawn.shape != reference.shape or drawn.shape[:2] != frames.shape[:2]:
        raise ValueError(f"colour match: overlap {list(drawn.shape)} and reference {list(reference.shape)} must "
                         f"match each other and the frames' batch and channels {list(frames.shape[:2])}")
    if method == "off" or frames.shape[2] == 0:
        return frames
    out = torch.empty_like(frames)
    for b in range(frames.shape[0]):
        for c in range(frames.shape[1]):
            src, ref = drawn[b, c].flatten().float(), reference[b, c].flatten().float()
            x = frames[b, c].float()
            out[b, c] = (_mean_std(x, src, ref) if method == "mean-std" else _histogram(x, src, ref)).to(frames)
    return out.clamp(-1, 1)


def _mean_std(x: torch.Tensor, src: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    scale = ref.std(unbiased=False) / src.std(unbiased=False).clamp_min(_EPS)
    return (x - src.mean()) * scale + ref.mean()


def _histogram(x: torch.Tensor, src: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Quantile mapping: ``x``'s quantile in ``src`` (piecewise linear between its sorted values), then the
    reference value at that quantile; values outside ``src``'s range shift with the nearest end."""
    s, _ = src.sort()
    r, _ = ref.sort()
    q = torch.linspace(0, 1, s.numel(), device=x.device)
    quantile = _interp(x.flatten(), s, q)
    mapped = _interp(quantile, torch.linspace(0, 1, r.numel(), device=x.device), r)
    below, above = x.flatten() < s[0], x.flatten() > s[-1]
    mapped = torch.where(below, x.flatten() - s[0] + r[0], mapped)
    mapped = torch.where(above, x.flatten() - s[-1] + r[-1], mapped)
    return mapped.view_as(x)


def _interp(x: torch.Tensor, xp: torch.Tensor, fp: torch.Tensor) -> torch.Tensor:
    """``numpy.interp`` for increasing ``xp`` (repeated values take the last one's ``fp``)."""
    i = torch.searchsorted(xp, x, right=True).clamp(1, xp.numel() - 1)
    x0, x1, f0, f1 = xp[i - 1], xp[i], fp[i - 1], fp[i]
    span = x1 - x0
    t = torch.where(span > 0, (x - x0) / span.clamp_min(1e-12), torch.ones_like(x))
    return (f0 + t.clamp(0, 1) * (f1 - f0)).where(x >= xp[0], fp[0])
