"""bench/cp_model.py: the arithmetic of the performance model against hand-computed values."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "bench" / "cp_model.py"


@pytest.fixture(scope="module")
def cp():
    spec = importlib.util.spec_from_file_location("cp_model", PATH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["cp_model"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_volumes_and_compute_by_hand(cp):
    n, d = 32_768, 5120
    e = cp.estimate(n, 2, 2, 1)  # Ulysses 2: 4 all-to-alls, half of each L/2 x D bf16 slice leaves the rank
    assert e.comm_mb == pytest.approx(4 * (n / 2 * d * 2) * 0.5 / 1e6)
    flops = n * (12 * d * d + 4 * d * 13824 + 4 * 512 * d) + 4.0 * n * n * d
    assert e.compute_ms == pytest.approx(flops / 400e12 / 2 * 1e3)
    r = cp.estimate(n, 4, 1, 4)  # Ring 4: 3 steps of K and V of one L/4 chunk
    assert r.comm_mb == pytest.approx(3 * 2 * (n / 4) * d * 2 / 1e6)


def test_trends(cp):
    # slower links cost efficiency; ring hides its transfers behind attention at long sequences
    fast, slow = cp.estimate(32_768, 8, 8, 1), cp.estimate(32_768, 8, 8, 1, a2a_gbs=25)
    assert 0 < slow.efficiency < fast.efficiency <= 1
    assert cp.estimate(131_072, 8, 1, 8, p2p_gbs=25).efficiency > cp.estimate(32_768, 8, 1, 8, p2p_gbs=25).efficiency
    with pytest.raises(ValueError, match="does not fit"):
        cp.estimate(1024, 8, 3, 1)
    assert "| 128k | 8 | USP (4x2) |" in cp.table("14b", 400, 300, 300)
