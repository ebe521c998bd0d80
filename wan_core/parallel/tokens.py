"""This rank's share of a block stack's tokens and batch rows, and the gather back (docs/parallel.md section 12).

For a model whose block loop is not ours (ComfyUI's native Wan model), the same cut as
``wan_core.parallel.dit``: the batch is split between the CFG ranks when it is even (cond and uncond batched
together), the token sequence is zero-padded to a multiple of ``ulysses * ring`` and cut into contiguous chunks
in sequence-parallel rank order; every per-token tensor (hidden states, RoPE rotations, per-token modulation) is
cut the same way. After the last block the chunks are all-gathered, the padding dropped, then the CFG halves
gathered. Nothing is approximated: the padded keys are excluded by ``usp_attention`` (``length``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .groups import ParallelGroups, padded_length


def gather(x: torch.Tensor, group: dist.ProcessGroup, dim: int) -> torch.Tensor:
    """All ranks' ``x`` concatenated along ``dim`` in group rank order."""
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=dim)


@dataclass(frozen=True)
class TokenShard:
    """The cut of one block-stack run: ``batch`` rows and ``length`` real tokens of the full input, padded to
    ``padded``; ``split_cfg``: the rows are halved between the CFG ranks."""

    groups: ParallelGroups
    batch: int
    length: int
    padded: int
    split_cfg: bool

    @classmethod
    def of(cls, groups: ParallelGroups, batch: int, length: int, multiple: int = 1) -> "TokenShard":
        """The cut for hidden states ``[batch, length, D]``; ``multiple``: an extra padding multiple (skiparse)."""
        m = groups.config.sp * multiple
        return cls(groups, batch, length, padded_length(length, m), groups.cfg_group is not None and batch % 2 == 0)

    @property
    def chunk(self) -> int:
        return self.padded // self.groups.config.sp

    def rows(self, t: torch.Tensor) -> torch.Tensor:
        """This CFG rank's half of a per-row tensor ``[batch, ...]`` (a tensor of one row is shared, kept)."""
        if not self.split_cfg or t.shape[0] != self.batch:
            return t
        half = self.batch // 2
        return t[self.groups.cfg_rank * half:(self.groups.cfg_rank + 1) * half]

    def tokens(self, t: torch.Tensor, dim: int = 1) -> torch.Tensor:
        """This rank's chunk of the token axis ``dim`` (of ``length`` entries; zero-padded to ``padded``)."""
        if self.groups.config.sp == 1:
            return t
        pad = self.padded - self.length
        if pad:
            widths = [0, 0] * (t.dim() - 1 - dim) + [0, pad]
            t = F.pad(t, widths)
        start = self.groups.sp_rank * self.chunk
        return t.narrow(dim, start, self.chunk)

    def gather(self, out: torch.Tensor) -> torch.Tensor:
        """``[rows, chunk, D]`` of every rank -> the full ``[batch, length, D]`` on every rank."""
        g = self.groups
        if g.config.sp > 1:
            assert g.sp_group is not None
            out = gather(out, g.sp_group, 1)[:, :self.length]
        if self.split_cfg:
            assert g.cfg_group is not None
            out = gather(out, g.cfg_group, 0)
        return out
