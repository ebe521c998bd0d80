"""SUV: U-shaped stage layout with long skip connections over a stack of transformer blocks (Open-Sora Plan v1.5).

Implements docs/algorithms.md sections 1.2 and 6.2: stage table with per-stage sparse ratio, LIFO skips
from encoder to decoder stages, fusion ``h <- Linear_{2D->D}(concat[h, skip])`` initialised as [I | 0].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import torch
from torch import nn

__all__ = ["SUVStage", "suv_stage_table", "block_sparse_mode", "SkipFusion", "SUVBlocks", "suv_forward",
           "SUV_RELEASE_LAYERS", "SUV_RELEASE_SPARSE_N"]

SUV_RELEASE_LAYERS = (2, 4, 6, 8, 6, 4, 2)   # Open-Sora Plan v1.5 8.5B release (32 blocks)
SUV_RELEASE_SPARSE_N = (1, 2, 4, 8, 4, 2, 1)


@dataclass(frozen=True)
class SUVStage:
    """One stage: blocks ``[start, stop)``, sparse ratio ``sparse_k`` (1 = dense), ``role`` in
    {"encoder", "mid", "decoder"}; a decoder stage fuses the output of encoder stage ``skip_from``."""

    index: int
    role: str
    start: int
    stop: int
    sparse_k: int
    skip_from: Optional[int] = None

    @property
    def num_blocks(self) -> int:
        return self.stop - self.start


def suv_stage_table(
    num_layers: Sequence[int], sparse_n: Optional[Sequence[int]] = None, *, require_even: bool = True
) -> List[SUVStage]:
    """Build the stage table, e.g. ``suv_stage_table([2,4,6,8,6,4,2], [1,2,4,8,4,2,1])``.

    Stages 0..S/2-1 are encoders, S/2 the mid stage, the last S/2 decoders; decoder stage S-1-i takes the
    skip of encoder stage i (LIFO). Enforced, with the reference: an odd number of stages, an even number
    of blocks per stage (single/group alternation; ``require_even=False`` lifts it for dense use), and
    matching sparse ratios on both ends of every skip. ``sparse_n`` defaults to all 1 (dense).
    """
    num_layers = [int(n) for n in num_layers]
    sparse_n = [1] * len(num_layers) if sparse_n is None else [int(k) for k in sparse_n]
    s = len(num_layers)
    if s % 2 != 1:
        raise ValueError(f"SUV needs an odd number of stages, got {s} ({num_layers})")
    if len(sparse_n) != s:
        raise ValueError(f"sparse_n has {len(sparse_n)} entries for {s} stages")
    if any(n < 1 for n in num_layers) or any(k < 1 for k in sparse_n):
        raise ValueError(f"every stage needs >= 1 block and sparse ratio >= 1: {num_layers}, {sparse_n}")
    if require_even and any(n % 2 for n in num_layers):
        raise ValueError(f"every stage needs an even number of blocks (single/group alternation): {num_layers}")
    half = s // 2
    for i in range(half):
        if sparse_n[i] != sparse_n[s - 1 - i]:
            raise ValueError(f"skip pair stage {i} <-> {s - 1 - i} has sparse ratios {sparse_n[i]} != "
                             f"{sparse_n[s - 1 - i]}; SUV skips join stages of equal sparsity")
    table, start = [], 0
    for i, (n, k) in enumerate(zip(num_layers, sparse_n)):
        role = "encoder" if i < half else ("mid" if i == half else "decoder")
        skip_from = s - 1 - i if role == "decoder" else None
        table.append(SUVStage(i, role, start, start + n, k, skip_from))
        start += n
    return table


def block_sparse_mode(index_in_stage: int, sparse_k: int) -> str:
    """Skiparse mode of a block: "dense" if k == 1, else "single" for even, "group" for odd in-stage index."""
    if sparse_k == 1:
        return "dense"
    return "single" if index_in_stage % 2 == 0 else "group"


class SkipFusion(nn.Module):
    """``h <- Linear_{2D->D}(concat[h, skip])`` on [B, L, D] hidden states.

    zero_init=True: weight ``[I_D | 0]``, bias 0, no norm, so the output equals ``h`` exactly at init.
    zero_init=False: a LayerNorm(2D) precedes a default-initialised Linear (the reference's other option).
    """

    def __init__(self, dim: int, zero_init: bool = True, eps: float = 1e-6):
        super().__init__()
        self.dim = int(dim)
        self.norm = nn.Identity() if zero_init else nn.LayerNorm(2 * dim, eps=eps)
        self.proj = nn.Linear(2 * dim, dim)
        if zero_init:
            with torch.no_grad():
                self.proj.weight.zero_()
                self.proj.weight[:, :dim].copy_(torch.eye(dim))
                self.proj.bias.zero_()

    def forward(self, h: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        if h.shape != skip.shape:
            raise ValueError(f"skip shape {tuple(skip.shape)} differs from hidden shape {tuple(h.shape)}")
        return self.proj(self.norm(torch.cat([h, skip], dim=-1)))


def suv_forward(
    h: torch.Tensor,
    stages: Sequence[SUVStage],
    fusions: Sequence[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] | nn.ModuleList,
    run_block: Callable[[int, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """Run blocks in SUV order: ``h = run_block(i, h)`` for every block i, pushing each encoder stage's
    output and, before each decoder stage, popping the newest one (LIFO) into ``fusions[j](h, skip)``
    (j = decoder stage count so far). The skip stack is local to this call. h: [B, L, D]."""
    n_dec = sum(st.role == "decoder" for st in stages)
    if len(fusions) != n_dec:
        raise ValueError(f"{n_dec} decoder stages need {n_dec} fusions, got {len(fusions)}")
    stack: List[torch.Tensor] = []
    j = 0
    for st in stages:
        if st.role == "decoder":
            h = fusions[j](h, stack.pop())
            j += 1
        for i in range(st.start, st.stop):
            h = run_block(i, h)
        if st.role == "encoder":
            stack.append(h)
    return h


class SUVBlocks(nn.Module):
    """Run a sequence of blocks ``h = block(h, *args, **kwargs)`` in SUV stages with LIFO skip fusion.

    blocks: the dense model's blocks in order (an ``nn.ModuleList`` is registered as a submodule; plain
    callables are allowed too). hidden states: [B, L, D]. After each encoder stage its output is pushed;
    before each decoder stage the newest one is popped and fused by a :class:`SkipFusion` (``fusions[j]``
    for decoder stage j in order). The stack lives inside one ``forward`` call. ``block_info[i]`` gives
    block i's (stage index, sparse_k, mode) for wiring skiparse attention (applied by the attention layer,
    not here). At init (zero_init) the output equals running the blocks densely, bit for bit.
    """

    blocks: nn.ModuleList  # set only when the blocks were given as an nn.ModuleList

    def __init__(
        self,
        blocks: Sequence[Callable],
        dim: int,
        num_layers: Sequence[int],
        sparse_n: Optional[Sequence[int]] = None,
        *,
        zero_init: bool = True,
        require_even: bool = True,
    ):
        super().__init__()
        self.stages = suv_stage_table(num_layers, sparse_n, require_even=require_even)
        total = self.stages[-1].stop
        if len(blocks) != total:
            raise ValueError(f"stage table covers {total} blocks ({list(num_layers)}) but {len(blocks)} were given")
        if isinstance(blocks, nn.ModuleList):
            self.blocks = blocks
        else:
            self._plain_blocks = list(blocks)
            mods = [b for b in blocks if isinstance(b, nn.Module)]
            self.block_modules = nn.ModuleList(mods)  # register parameters of module blocks
        self.fusions = nn.ModuleList(
            SkipFusion(dim, zero_init=zero_init) for st in self.stages if st.role == "decoder")
        self.block_info = []
        for st in self.stages:
            for j in range(st.num_blocks):
                self.block_info.append((st.index, st.sparse_k, block_sparse_mode(j, st.sparse_k)))

    def _block(self, i: int):
        return self.blocks[i] if hasattr(self, "blocks") else self._plain_blocks[i]

    def forward(self, h: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        """h: [B, L, D]; ``args``/``kwargs`` are passed to every block after h."""
        return suv_forward(h, self.stages, self.fusions, lambda i, x: self._block(i)(x, *args, **kwargs))
