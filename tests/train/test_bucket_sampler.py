"""Bucket / megabatch sampler (docs/algorithms.md section 1.6): single-shape batches, counts, ranks, resume,
DataLoader."""
from collections import Counter

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from wan_core.train.bucket_sampler import BucketSampler, shape_key

SHAPES = [(1, 4, 4)] * 37 + [(5, 4, 6)] * 20 + [(3, 2, 2)] * 9 + [(9, 2, 2)] * 3   # 69 samples, 4 buckets
WORLD, BATCH = 2, 4


class ShapeDataset(Dataset):
    """Item i: a latent [2, F, H, W] filled with i, so a batch both stacks and names its indices."""

    def __init__(self, shapes):
        self.shapes = shapes

    def __len__(self):
        return len(self.shapes)

    def __getitem__(self, i):
        return torch.full((2, *self.shapes[i]), float(i))


def _rank_batches(shapes, **kw):
    return [list(BucketSampler(shapes, BATCH, num_replicas=WORLD, rank=r, **kw).batches()) for r in range(WORLD)]


def test_shape_key():
    assert shape_key((5, 60, 104)) == "5x60x104"
    assert shape_key(torch.Size([1, 2, 3])) == "1x2x3"
    assert shape_key("17x480x832") == "17x480x832"


def test_every_batch_is_single_shape_and_sized():
    for same in (False, True):
        per_rank = _rank_batches(SHAPES, seed=3, same_shape_across_ranks=same)
        assert len(per_rank[0]) == len(per_rank[1]) == -(-len(SHAPES) // (WORLD * BATCH))   # ceil(69 / 8) = 9
        for batches in per_rank:
            for b in batches:
                assert len(b) == BATCH
                assert len({SHAPES[i] for i in b}) == 1, [SHAPES[i] for i in b]
        if same:   # the stronger option: one shape per micro-step across ranks
            for b0, b1 in zip(*per_rank):
                assert SHAPES[b0[0]] == SHAPES[b1[0]]


def test_aligned_buckets_give_a_permutation():
    # every bucket a multiple of world * batch: no megabatch straddles buckets, nothing is replaced or padded
    shapes = [(1, 2, 2)] * 16 + [(2, 2, 2)] * 8 + [(3, 2, 2)] * 24
    per_rank = _rank_batches(shapes, seed=0)
    emitted = [i for batches in per_rank for b in batches for i in b]
    assert sorted(emitted) == list(range(len(shapes)))


def test_counts_per_epoch_with_minority_replacement():
    sampler = BucketSampler(SHAPES, BATCH, num_replicas=WORLD, rank=0, seed=5)
    plan = sampler.plan()
    emitted = Counter(i for mb in plan.megabatches for chunk in mb for i in chunk)
    assert sum(emitted.values()) == 9 * WORLD * BATCH
    touched = {m for m, *_ in plan.replaced} | {m for m, *_ in plan.padded}
    # only megabatches straddling a bucket boundary (3 boundaries) or the short last one are touched
    assert 1 <= len(touched) <= 4
    untouched = {i for m, mb in enumerate(plan.megabatches) if m not in touched for c in mb for i in c}
    assert len(untouched) >= len(SHAPES) - len(touched) * WORLD * BATCH
    for i in untouched:
        assert emitted[i] == 1, i                      # exactly once per epoch
    never = set(range(len(SHAPES))) - set(emitted)
    replaced_out = {orig for *_, orig, new in plan.replaced}
    assert never <= replaced_out                       # a missing index was replaced as a minority
    for m, r, pos, orig, new in plan.replaced:
        assert SHAPES[orig] != SHAPES[new]
        assert plan.megabatches[m][r][pos] == new
    # padding only in the single short megabatch (69 = 8 * 8 + 5)
    assert {m for m, *_ in plan.padded} and len({m for m, *_ in plan.padded}) == 1


def test_majority_kept_minority_replaced():
    shapes = [(1, 1, 1)] * 5 + [(2, 1, 1)] * 3       # megabatches (world 1, batch 4): AAAA | ABBB
    s = BucketSampler(shapes, 4, num_replicas=1, rank=0, seed=0)
    batches = list(s.batches())
    assert sorted(len({shapes[i] for i in b}) for b in batches) == [1, 1]
    mixed = [b for b in batches if shapes[b[0]] == (2, 1, 1)][0]
    assert set(mixed) <= {5, 6, 7} and set(mixed) == {5, 6, 7}   # the three Bs kept, the A replaced by a B
    assert len(s.plan().replaced) == 1


def test_identical_plan_on_all_ranks_and_seeded():
    samplers = [BucketSampler(SHAPES, BATCH, num_replicas=WORLD, rank=r, seed=11) for r in range(WORLD)]
    plans = [s.plan().megabatches for s in samplers]
    assert plans[0] == plans[1]
    for r, s in enumerate(samplers):
        assert list(s.batches()) == [mb[r] for mb in plans[0]]
    again = BucketSampler(SHAPES, BATCH, num_replicas=WORLD, rank=0, seed=11).plan().megabatches
    other = BucketSampler(SHAPES, BATCH, num_replicas=WORLD, rank=0, seed=12).plan().megabatches
    assert again == plans[0] and other != plans[0]
    samplers[0].set_epoch(1)
    assert samplers[0].plan().megabatches != plans[0]     # a new epoch reshuffles


def test_resume_continues_the_uninterrupted_stream():
    accum = 2

    def stream(sampler, epochs):
        out = []
        for e in range(epochs):
            sampler.set_epoch(e)
            out += list(sampler.batches())
        return out

    for rank in range(WORLD):
        full = stream(BucketSampler(SHAPES, BATCH, num_replicas=WORLD, rank=rank, grad_accum=accum), 4)
        per_epoch = len(full) // 4
        for step in (0, 1, 3, 4, 7, 11):        # 9 micro-steps per epoch: steps 4, 7 and 11 cross epochs
            s = BucketSampler(SHAPES, BATCH, num_replicas=WORLD, rank=rank, grad_accum=accum, start_step=step)
            micro = step * accum
            resumed = list(s.batches())
            epoch = s.epoch
            s.set_epoch(epoch + 1)
            resumed += list(s.batches())
            assert epoch == micro // per_epoch
            assert resumed == full[micro:(epoch + 2) * per_epoch], step
            assert len(BucketSampler(SHAPES, BATCH, num_replicas=WORLD, rank=rank, grad_accum=accum,
                                     start_step=step)) == (per_epoch - micro % per_epoch) * BATCH


def test_works_inside_a_dataloader():
    ds = ShapeDataset(SHAPES)
    for rank in range(WORLD):
        sampler = BucketSampler(SHAPES, BATCH, num_replicas=WORLD, rank=rank, seed=2)
        loader = DataLoader(ds, batch_size=BATCH, sampler=sampler)       # default collate stacks: one shape
        got = [batch[:, 0].flatten(1)[:, 0].long().tolist() for batch in loader]
        assert got == list(sampler.batches())
        assert len(loader) == len(got)
        via_batch_sampler = DataLoader(ds, batch_sampler=sampler.as_batch_sampler())
        assert [b[:, 0].flatten(1)[:, 0].long().tolist() for b in via_batch_sampler] == got


def test_min_bucket_size_filters_and_errors():
    s = BucketSampler(SHAPES, BATCH, num_replicas=WORLD, rank=0, min_bucket_size=10)
    plan = s.plan()
    assert sorted(plan.dropped) == list(range(57, 69))      # the 9- and 3-sample buckets
    assert all(SHAPES[i][0] in (1, 5) for mb in plan.megabatches for c in mb for i in c)
    with pytest.raises(ValueError, match="drops every bucket"):
        BucketSampler(SHAPES, BATCH, min_bucket_size=1000)
    with pytest.raises(ValueError, match="rank 2"):
        BucketSampler(SHAPES, BATCH, num_replicas=2, rank=2)
