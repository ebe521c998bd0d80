"""Shape-bucketed "megabatch" sampler (Open-Sora Plan v1.2+), a ``torch.utils.data.Sampler``.

Implements docs/algorithms.md section 1.6: group by shape key ``FxHxW``, cut megabatches of world x batch, split
across ranks by striding, shuffle megabatches, replace minority shapes inside a batch, resume from a step.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Hashable, Iterator, List, Optional, Sequence, Tuple

import torch
from torch.utils.data import Sampler

__all__ = ["BucketSampler", "BucketPlan", "shape_key"]


def shape_key(shape) -> str:
    """Canonical bucket key ``"FxHxW"`` from a (frames, height, width) tuple/list/tensor shape or a key.

    A latent [C, F, H, W] should be keyed by ``latent.shape[1:]``. Strings are returned unchanged.
    """
    if isinstance(shape, str):
        return shape
    if isinstance(shape, torch.Size) or isinstance(shape, (tuple, list)):
        dims = [int(d) for d in shape]
        if not dims:
            raise ValueError("empty shape")
        return "x".join(str(d) for d in dims)
    if isinstance(shape, Hashable):
        return str(shape)
    raise TypeError(f"cannot make a bucket key from {type(shape).__name__}")


@dataclass
class BucketPlan:
    """One epoch's plan, identical on every rank.

    ``megabatches[m][r]`` is rank r's batch (B dataset indices) for micro-step m of the epoch.
    ``replaced``: (megabatch, rank, position, original index, replacement index) for each minority entry
    swapped for a majority one (step 5). ``padded``: (megabatch, rank, number of entries added) for short
    chunks padded with repeats (step 3; a whole copied chunk counts B). ``dropped``: indices removed by the
    ``min_bucket_size`` filter.
    """

    megabatches: List[List[List[int]]]
    replaced: List[Tuple[int, int, int, int, int]] = field(default_factory=list)
    padded: List[Tuple[int, int, int]] = field(default_factory=list)
    dropped: List[int] = field(default_factory=list)


class BucketSampler(Sampler[int]):
    """Yields this rank's dataset indices so that every consecutive ``batch_size`` of them is one shape.

    Use with ``DataLoader(dataset, batch_size=batch_size, sampler=sampler)`` (``drop_last`` irrelevant: the
    length is a multiple of ``batch_size``), or iterate :meth:`batches` / pass ``batch_sampler=``
    :meth:`as_batch_sampler`. Algorithm (docs/algorithms.md section 1.6), seeded ``torch.Generator(seed + epoch)`` so
    all ranks compute the same plan:

    1. group indices by shape key; groups by descending size (ties: first appearance); shuffle inside each;
       concatenate (groups smaller than ``min_bucket_size`` are dropped first, 0 = keep all);
    2. cut into megabatches of ``num_replicas * batch_size``;
    3. split a megabatch across ranks by striding (rank r gets ``mb[r::world]``); a short chunk is padded
       with random repeats of its own entries, an empty one copies a random earlier chunk;
    4. shuffle the order of the megabatches;
    5. in each per-rank batch that mixes shapes, keep the most frequent shape (ties: the larger bucket) and
       replace the other entries by random picks (with replacement) among the majority entries. With
       ``same_shape_across_ranks=True`` the majority is taken over the whole megabatch instead, so all
       ranks see one shape per micro-step (stronger than the reference, which decides per rank);
    6. resume: :meth:`resume` (or ``start_step``) skips ``global_step * grad_accum`` megabatches, rolling
       into later epochs when that exceeds one epoch.

    So an index appears exactly once per epoch unless it was dropped (filter), replaced (step 5, only in
    megabatches that straddle two buckets) or repeated (padding of the last, short megabatch, and as a
    replacement). :meth:`plan` reports all three.

    shapes: one entry per dataset index, a (F, H, W) tuple, a torch.Size or a ``"FxHxW"`` string.
    """

    def __init__(
        self,
        shapes: Sequence,
        batch_size: int,
        *,
        num_replicas: Optional[int] = None,
        rank: Optional[int] = None,
        seed: int = 42,
        grad_accum: int = 1,
        min_bucket_size: int = 0,
        same_shape_across_ranks: bool = False,
        start_step: int = 0,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if grad_accum < 1:
            raise ValueError(f"grad_accum must be >= 1, got {grad_accum}")
        if num_replicas is None or rank is None:
            dist = torch.distributed
            initialised = dist.is_available() and dist.is_initialized()
            if num_replicas is None:
                num_replicas = dist.get_world_size() if initialised else 1
            if rank is None:
                rank = dist.get_rank() if initialised else 0
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is outside [0, {num_replicas})")
        self.keys = [shape_key(s) for s in shapes]
        if not self.keys:
            raise ValueError("BucketSampler needs at least one sample")
        self.batch_size = int(batch_size)
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.seed = int(seed)
        self.grad_accum = int(grad_accum)
        self.min_bucket_size = int(min_bucket_size)
        self.same_shape_across_ranks = bool(same_shape_across_ranks)
        self.epoch = 0
        self._skip_epoch = 0
        self._skip = 0
        kept = sum(c for c in Counter(self.keys).values() if c >= self.min_bucket_size)
        if kept == 0:
            raise ValueError(
                f"min_bucket_size={self.min_bucket_size} drops every bucket "
                f"(largest has {max(Counter(self.keys).values())} samples)"
            )
        mb = self.megabatch_size
        self.megabatches_per_epoch = (kept + mb - 1) // mb
        if start_step:
            self.resume(start_step)

    # ----------------------------------------------------------------------------------------------
    @property
    def megabatch_size(self) -> int:
        """Samples per micro-step over all ranks: ``num_replicas * batch_size``."""
        return self.num_replicas * self.batch_size

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (reshuffles with seed + epoch). A pending resume skip applies to its own epoch only."""
        self.epoch = int(epoch)

    def resume(self, global_step: int) -> None:
        """Continue as if ``global_step`` optimizer steps (each ``grad_accum`` micro-steps) were consumed.

        Sets the epoch to the one holding micro-step ``global_step * grad_accum`` and skips that many
        micro-steps' megabatches inside it (docs/algorithms.md section 1.6 step 6).
        """
        if global_step < 0:
            raise ValueError(f"global_step must be >= 0, got {global_step}")
        micro = int(global_step) * self.grad_accum
        self.epoch, self._skip = divmod(micro, self.megabatches_per_epoch)
        self._skip_epoch = self.epoch

    def _current_skip(self) -> int:
        return self._skip if self.epoch == self._skip_epoch else 0

    # ----------------------------------------------------------------------------------------------
    def plan(self, epoch: Optional[int] = None) -> BucketPlan:
        """The full plan of ``epoch`` (default: current) for all ranks, before any resume skip."""
        epoch = self.epoch if epoch is None else int(epoch)
        g = torch.Generator().manual_seed(self.seed + epoch)
        world, bsz = self.num_replicas, self.batch_size

        # 1. sort / group by shape
        groups: dict = {}
        for i, k in enumerate(self.keys):
            groups.setdefault(k, []).append(i)
        order = sorted(groups, key=lambda k: (-len(groups[k]), groups[k][0]))
        rank_of_key = {k: n for n, k in enumerate(order)}
        flat: List[int] = []
        dropped: List[int] = []
        for k in order:
            members = groups[k]
            if len(members) < self.min_bucket_size:
                dropped.extend(members)
                continue
            perm = torch.randperm(len(members), generator=g).tolist()
            flat.extend(members[p] for p in perm)

        # 2. megabatches of world * batch; 3. split across ranks by striding, pad short chunks
        mbs: List[List[List[int]]] = []
        padded: List[Tuple[int, int, int]] = []
        step = world * bsz
        for m, start in enumerate(range(0, len(flat), step)):
            mb = flat[start:start + step]
            chunks: List[List[int]] = []
            for r in range(world):
                chunk = mb[r::world]
                if len(chunk) == 0:
                    j = int(torch.randint(len(chunks), (1,), generator=g))
                    chunk = list(chunks[j])
                    padded.append((m, r, bsz))
                elif len(chunk) < bsz:
                    picks = torch.randint(len(chunk), (bsz - len(chunk),), generator=g).tolist()
                    padded.append((m, r, len(picks)))
                    chunk = chunk + [chunk[p] for p in picks]
                chunks.append(chunk)
            mbs.append(chunks)

        # 4. shuffle megabatches (padding records follow their megabatch)
        perm = torch.randperm(len(mbs), generator=g).tolist()
        new_pos = {old: new for new, old in enumerate(perm)}
        mbs = [mbs[p] for p in perm]
        padded = sorted((new_pos[m], r, n) for m, r, n in padded)

        # 5. re-organise: replace minority shapes by random majority entries
        replaced: List[Tuple[int, int, int, int, int]] = []
        for m, chunks in enumerate(mbs):
            if self.same_shape_across_ranks:
                everything = [i for c in chunks for i in c]
                counts = Counter(self.keys[i] for i in everything)
                if len(counts) == 1:
                    continue
                major = min(counts, key=lambda k: (-counts[k], rank_of_key[k]))
                pool = [i for i in everything if self.keys[i] == major]
            for r, chunk in enumerate(chunks):
                counts = Counter(self.keys[i] for i in chunk)
                if not self.same_shape_across_ranks:
                    if len(counts) == 1:
                        continue
                    major = min(counts, key=lambda k: (-counts[k], rank_of_key[k]))
                    pool = [i for i in chunk if self.keys[i] == major]
                for pos, i in enumerate(chunk):
                    if self.keys[i] != major:
                        new = pool[int(torch.randint(len(pool), (1,), generator=g))]
                        chunk[pos] = new
                        replaced.append((m, r, pos, i, new))
        return BucketPlan(megabatches=mbs, replaced=replaced, padded=padded, dropped=dropped)

    # ----------------------------------------------------------------------------------------------
    def batches(self) -> Iterator[List[int]]:
        """This rank's batches (lists of ``batch_size`` indices) for the current epoch, after the resume skip."""
        mbs = self.plan().megabatches
        for chunks in mbs[self._current_skip():]:
            yield list(chunks[self.rank])

    def __iter__(self) -> Iterator[int]:
        for batch in self.batches():
            yield from batch

    def __len__(self) -> int:
        return (self.megabatches_per_epoch - self._current_skip()) * self.batch_size

    def as_batch_sampler(self) -> "_BatchView":
        """A ``batch_sampler`` for ``DataLoader(dataset, batch_sampler=...)`` over the same plan."""
        return _BatchView(self)


class _BatchView:
    def __init__(self, sampler: BucketSampler):
        self.sampler = sampler

    def __iter__(self):
        return self.sampler.batches()

    def __len__(self) -> int:
        return len(self.sampler) // self.sampler.batch_size
