"""Step windows of the caches: which sampling steps may reuse, and which are anchors that always compute.

Users give windows as fractions of the step count (``start``/``end`` in 0..1, like ComfyUI's start/end
percent on a uniform timestep grid), so one setting means the same part of the trajectory at 20 or 50 steps;
``Window`` holds them resolved to step indices for one run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Window", "step_index", "wan_cfg_interval"]


def step_index(fraction: float, steps: int) -> int:
    """First step index at or after ``fraction`` of ``steps`` (0.2 of 50 -> 10, 1.0 -> 50)."""
    return min(steps, max(0, math.ceil(fraction * steps - 1e-9)))


def wan_cfg_interval(steps: int) -> int:
    """Default interval of the Wan CFG cache: the unconditional pass every ``max(2, round(steps / 10))`` steps
    inside the window (5 at 50 steps, FasterCache's default), fewer skips in a row when each step is longer."""
    return max(2, round(steps / 10))


@dataclass(frozen=True)
class Window:
    """Steps ``first <= i < stop``; inside, steps ``first, first + interval, ...`` are anchors (computed) and
    the others may reuse what their anchor computed."""

    first: int
    stop: int
    interval: int = 1

    @classmethod
    def of(cls, start: float, end: float, steps: int, interval: int = 1) -> Window:
        return cls(step_index(start, steps), step_index(end, steps), interval)

    def inside(self, step: int) -> bool:
        return self.first <= step < self.stop

    def anchor(self, step: int) -> int:
        """The anchor step a step inside the window reuses from."""
        return step - (step - self.first) % self.interval

    def reuses(self, step: int) -> bool:
        """True when ``step`` is inside the window and not an anchor."""
        return self.inside(step) and self.anchor(step) != step
