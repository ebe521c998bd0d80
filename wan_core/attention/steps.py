"""Sampling-step ranges for step-dependent attention choices (backend overrides, skiparse activity).

A range is ``(start, stop)``, half-open; each end is an ``int`` step index, a ``float`` fraction of the
step count (``0.5`` = the middle step), or ``None`` (open). Float ends need the step count.
"""
from __future__ import annotations

import math


def check_step_range(rng, what: str = "steps") -> tuple | None:
    """Validate and normalise ``rng`` to a 2-tuple; raise ValueError naming ``what`` otherwise."""
    if rng is None:
        return None
    try:
        start, stop = rng
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a (start, stop) pair, got {rng!r}") from None
    for end in (start, stop):
        if end is None:
            continue
        if isinstance(end, bool) or not isinstance(end, (int, float)):
            raise ValueError(f"{what}: each end must be an int step, a float fraction or None, got {end!r}")
        if isinstance(end, float) and not 0.0 <= end <= 1.0:
            raise ValueError(f"{what}: a float end is a fraction of the step count in [0, 1], got {end}")
        if isinstance(end, int) and end < 0:
            raise ValueError(f"{what}: step indices start at 0, got {end}")
    return (start, stop)


def _resolve(end, total: int | None, default: float) -> float | None:
    if end is None:
        return default
    if isinstance(end, float):
        return None if total is None else end * total
    return float(end)


def step_in_range(rng, step: int | None, total: int | None) -> bool:
    """True if sampling step ``step`` (0-based, of ``total``) lies in ``rng``; ``rng=None`` matches always.

    With the step unknown (``None``) a range never matches; a float end needs ``total``.
    """
    if rng is None:
        return True
    if step is None:
        return False
    start = _resolve(rng[0], total, -math.inf)
    stop = _resolve(rng[1], total, math.inf)
    if start is None or stop is None:
        return False
    return start <= step < stop
