"""Context windows across ranks: each window rank samples its share of a step's windows, all gather them.

The windows of a step are independent, so the window ranks (model replicas, ``ParallelConfig.windows``) each
sample their share and exchange the per-window velocities (docs/parallel.md section 11).

Why an all-gather of the velocities and not an all-reduce of weighted sums: after the gather every rank holds
every window's velocity bit for bit (a gather copies) and fuses them in the window order of the sequential loop,
with the same operations, so the result is the sequential result exactly, and the same on every rank. An
all-reduce would add per-rank partial sums in the collective's own order (which depends on the backend and the
rank count), so the fused video would differ from the sequential one by rounding and from one world size to the
next. The price is bandwidth: each rank receives every window's velocity (latent-sized, small next to one DiT
forward).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..sampling.window_assignment import Window, WindowAssignment, slots
from .groups import ParallelGroups


class WindowSpread:
    """This rank's place among the window ranks: which windows it samples (:class:`WindowAssignment`) and the
    gather of every window's velocity. ``WindowedGuidance`` takes it as ``spread``."""

    def __init__(self, group: dist.ProcessGroup | None, rank: int, ranks: int):
        self.group, self.rank, self.ranks = group, rank, ranks
        self.assignment = WindowAssignment(ranks)

    @classmethod
    def of(cls, groups: ParallelGroups) -> "WindowSpread | None":
        """The spread of a rank's groups (None with one window rank)."""
        if groups.config.windows == 1:
            return None
        return cls(groups.window_group, groups.window_rank, groups.config.windows)

    def owners(self, windows: list[Window]) -> list[int]:
        """The rank of each window of a step (call once per step, on every rank)."""
        return self.assignment.assign(windows)

    def gather(self, windows: list[Window], owners: list[int], mine: dict[int, torch.Tensor],
               like: torch.Tensor) -> list[torch.Tensor]:
        """Every window's velocity ``[B, C, len(window), h, w]`` float32, in window order, from this rank's
        ``mine`` (window index -> velocity). ``like``: the video ``[B, C, F, h, w]`` (batch, size, device)."""
        b, c, _, h, w = like.shape
        length = max(len(win) for win in windows)
        width = max(len(slots(owners, r)) for r in range(self.ranks))
        buffer = torch.zeros(width, b, c, length, h, w, dtype=torch.float32, device=like.device)
        for slot, i in enumerate(slots(owners, self.rank)):
            buffer[slot, :, :, :len(windows[i])] = mine[i]
        parts = [torch.empty_like(buffer) for _ in range(self.ranks)]
        dist.all_gather(parts, buffer, group=self.group)
        where = {i: (r, slot) for r in range(self.ranks) for slot, i in enumerate(slots(owners, r))}
        return [parts[where[i][0]][where[i][1], :, :, :len(win)] for i, win in enumerate(windows)]
