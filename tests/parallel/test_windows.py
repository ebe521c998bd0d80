"""Context windows across ranks (docs/parallel.md section 11): the assignment of windows to
ranks, the windowed guidance with a stand-in spread in one process, the degrees, and (slow suite) spawned gloo
groups where the spread windows equal the same windows sampled one after another."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from wan_core.parallel import ParallelConfig, check_degrees, valid_layouts
from wan_core.parallel.groups import layout
from wan_core.parallel.launch import run_local
from wan_core.sampling.context_windows import ContextWindows, WindowedGuidance
from wan_core.sampling.window_assignment import WindowAssignment, slots

CHECKS = str(Path(__file__).with_name("checks.py"))


def test_static_windows_go_round_robin_and_stay():
    a = WindowAssignment(3)
    wins = ContextWindows(5, 2).windows(17)  # 7 windows
    assert a.assign(wins) == [0, 1, 2, 0, 1, 2, 0]
    assert a.assign(wins) == [0, 1, 2, 0, 1, 2, 0]  # every step the same: cache sessions stay on their rank
    assert slots(a.assign(wins), 1) == [1, 4]
    assert WindowAssignment(1).assign(wins) == [0] * 7
    assert WindowAssignment(8).assign(wins) == list(range(7))  # more ranks than windows: rank 7 idle


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_sliding_windows_keep_their_rank_and_new_ones_balance(ranks):
    cw = ContextWindows(5, 2, schedule="uniform", stride=2)
    a = WindowAssignment(ranks)
    first: dict = {}
    ratios = []
    for step in range(20):
        wins = cw.windows(21, step)
        owners = a.assign(wins)
        assert owners == a.assign(wins)  # deterministic, idempotent within a step
        for w, r in zip(wins, owners):
            assert first.setdefault(w, r) == r  # a window never moves: its cache state lives on one rank
        load = [owners.count(r) for r in range(ranks)]
        if step == 0:  # every window new: balanced to within one window
            assert max(load) - min(load) <= 1
        ratios.append(max(load) / -(-len(wins) // ranks))
    assert sum(ratios) / len(ratios) <= 1.25  # sliding windows: a little above the ideal share (docs/parallel.md)
    assert WindowAssignment(2).assign([(0, 1), (2, 3), (4, 5)]) == [0, 1, 0]


def test_assignment_rejects_bad_rank_counts():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="window ranks"):
            WindowAssignment(bad)


class FakeSpread:
    """One rank of a spread, in one process: the other ranks' velocities come from the same velocity function
    (what their processes would compute), so the fused result must equal the sequential one exactly."""

    def __init__(self, rank: int, ranks: int, oracle):
        self.rank, self.assignment, self.oracle = rank, WindowAssignment(ranks), oracle

    def owners(self, windows):
        return self.assignment.assign(windows)

    def gather(self, windows, owners, mine, like):
        assert set(mine) == {i for i, r in enumerate(owners) if r == self.rank}
        return [mine[i] if i in mine else self.oracle(like, w) for i, w in enumerate(windows)]


def _velocity(x, window):
    """A frame-position-dependent stand-in for a window's guide: the result depends on where a frame sits."""
    pos = torch.arange(x.shape[2], dtype=x.dtype).view(1, 1, -1, 1, 1)
    return torch.tanh(x * 1.7 + pos * 0.3 + sum(window) * 0.01)


@pytest.mark.parametrize("schedule", ["static", "uniform"])
def test_windowed_guidance_with_a_spread_samples_its_own_windows_and_fuses_as_sequential(schedule):
    cw = ContextWindows(4, 1, schedule=schedule, stride=1 if schedule == "static" else 2)
    x = torch.randn(1, 16, 13, 2, 2, generator=torch.Generator().manual_seed(0))
    made: dict[int, list] = {}
    stepped: dict[int, list] = {}

    def factory(rank):
        def make_guide(window):
            made.setdefault(rank, []).append(window)

            class Guide:
                def begin_step(self, step, total, sigma):
                    stepped.setdefault(rank, []).append((step, window))

                def __call__(self, xw, sigma, t):
                    return _velocity(xw, window)
            return Guide(), lambda: torch.no_grad()
        return make_guide

    for step in range(3):
        seq = WindowedGuidance(cw, 13, factory(-1))
        seq.begin_step(step, 3, 0.5)
        want = seq(x, 0.5, torch.zeros(1))
        for rank in range(2):
            spread = FakeSpread(rank, 2, lambda like, w: _velocity(like.index_select(2, torch.tensor(w)), w).float())
            par = WindowedGuidance(cw, 13, factory(rank), spread=spread)
            par.begin_step(step, 3, 0.5)
            assert torch.equal(par(x, 0.5, torch.zeros(1)), want)
            own = {w for w, r in zip(par.current, par.owners) if r == rank}
            assert own and {w for s, w in stepped[rank] if s == step} == own  # begin_step: own windows only
        stepped.clear()
    assert not set(made[0]) & set(made[1])  # no window has a guide (cache sessions) on both ranks
    assert set(made[0]) | set(made[1]) == set(made[-1])


def test_window_degree_in_the_layout():
    pc = ParallelConfig(ulysses=2, cfg=2, windows=3)
    assert pc.world_size == 12 and pc.model_size == 4
    assert pc.describe() == "ulysses 2 x ring 1 x cfg 2 x windows 3"
    assert ParallelConfig().describe() == "ulysses 1 x ring 1 x cfg 1"  # unchanged without windows
    # window rank = model replica: ranks 0-3 window 0, 4-7 window 1, 8-11 window 2
    assert [layout(pc, r)[0] % 3 for r in range(12)] == [0] * 4 + [1] * 4 + [2] * 4
    assert valid_layouts(8, 12, windows=2) == [(1, 4), (2, 2), (4, 1)]
    check_degrees(ParallelConfig(ring=2, windows=2), 4, 12)
    with pytest.raises(ValueError, match="4 processes but 2 devices; for 2 devices with cfg 1 and windows 2: "
                                         "ulysses=1 ring=1$"):
        check_degrees(ParallelConfig(windows=2, ulysses=2), 2, 12)
    with pytest.raises(ValueError, match="4 processes but 3 devices.*none with these cfg and windows degrees$"):
        check_degrees(ParallelConfig(windows=2, ring=2), 3, 12)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="windows degree"):
            ParallelConfig(windows=bad)


@pytest.mark.slow
def test_windows_across_two_ranks_equal_sequential_windows():
    results = run_local(f"{CHECKS}:windows_and_fuses", 2, ("windows2",))
    _check_windows(results, "windows2", (2, 1), (5, 4))
    for r in results:
        assert r["fuse_allgather"] == 0.0  # the gathered fuse is the sequential fuse, bit for bit
        assert r["fuse_allreduce"] <= 1e-6  # partial sums all-reduced: rounding-level, not bit-exact


@pytest.mark.slow
def test_windows_across_two_ranks_with_ulysses_inside_four_ranks():
    results = run_local(f"{CHECKS}:windows_and_fuses", 4, ("windows2_ulysses2",))
    _check_windows(results, "windows2_ulysses2", (2, 2, 1, 1), (5, 5, 4, 4))
    for r in results:
        assert r["sampling_windows2_ulysses2_vs_one_process"] <= 1e-4  # Ulysses' fp32 reordering, as elsewhere


def _check_windows(results: list[dict[str, float]], name: str, static_counts: tuple, uniform_counts: tuple) -> None:
    for rank, r in enumerate(results):
        for case in ("static", "uniform", "static_cache"):
            tag = f"windows_{name}_{case}"
            assert r[tag] <= 1e-6, (rank, tag, r[tag])
            assert r[f"count_{tag}_decisions_differ"] == 0.0  # each window's cache took the sequential decisions
        assert r[f"count_windows_{name}_static_cache_reused"] > 0  # the cache did reuse (decisions were taken)
        assert r[f"count_windows_{name}_static_rank{rank}"] == static_counts[rank]
        assert r[f"count_windows_{name}_uniform_rank{rank}"] == uniform_counts[rank]
        assert r.get(f"control_{name}_windows_vs_plain", 1.0) > 1e-3
    first = results[0]
    for case, counts in (("static", static_counts), ("uniform", uniform_counts)):
        # the first rank of each of the two window ranks' model replicas: together they hold every window once
        assert counts[0] + counts[len(results) // 2] == first[f"count_windows_{name}_{case}_sequential"]
