"""Which rank samples which context window of a step, when the windows are spread over several model replicas
(docs/parallel.md section 11).

A window keeps the rank it got when it first appeared (its key is its tuple of frame indices), so its cache
sessions live on one rank for the whole run and take the same decisions as in a sequential run; a window seen
for the first time goes to the rank with the fewest windows so far in this step (ties: the lowest rank). For
the static schedule (the same windows at every step) this is round-robin: window ``i`` on rank ``i % ranks``,
balanced by count to within one window. Sliding schedules bring new windows every step; those balance the step
they appear in, and windows seen before stay where their state is. Every rank computes the same table from the
same windows, so no communication is needed to agree on it.
"""
from __future__ import annotations

Window = tuple[int, ...]


class WindowAssignment:
    """The owner rank of every window seen so far (deterministic, the same on every rank)."""

    def __init__(self, ranks: int):
        if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
            raise ValueError(f"window ranks={ranks!r}: must be an integer >= 1")
        self.ranks = ranks
        self.owner: dict[Window, int] = {}

    def assign(self, windows: list[Window]) -> list[int]:
        """The rank of each of this step's ``windows`` (in their order); records windows seen for the first
        time. Call once per step with the step's windows, in the same order on every rank."""
        load = [0] * self.ranks
        for window in windows:
            if window in self.owner:
                load[self.owner[window]] += 1
        out = []
        for window in windows:
            if window not in self.owner:
                rank = min(range(self.ranks), key=lambda r: (load[r], r))
                self.owner[window] = rank
                load[rank] += 1
            out.append(self.owner[window])
        return out


def slots(owners: list[int], rank: int) -> list[int]:
    """Indices of the windows ``rank`` samples, in window order (its buffer slots in the gather)."""
    return [i for i, r in enumerate(owners) if r == rank]
