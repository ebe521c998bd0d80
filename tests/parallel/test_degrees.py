"""Degree validation: one-line errors that name the valid choices (no processes started)."""
from __future__ import annotations

import pytest

from wan_core.parallel import ParallelConfig, check_degrees, valid_layouts


def test_ulysses_must_divide_heads():
    with pytest.raises(ValueError) as e:
        check_degrees(ParallelConfig(ulysses=5), 5, 12)
    msg = str(e.value)
    assert "\n" not in msg and "ulysses=5" in msg and "12 attention heads" in msg
    assert "valid ulysses degrees: 1, 2, 3, 4" in msg  # divisors of 12 up to the device count


def test_product_must_equal_devices():
    with pytest.raises(ValueError) as e:
        check_degrees(ParallelConfig(ulysses=2, ring=2), 2, 12)
    msg = str(e.value)
    assert "\n" not in msg and "4 processes but 2 devices" in msg
    assert "ulysses=1 ring=2" in msg and "ulysses=2 ring=1" in msg
    with pytest.raises(ValueError, match="8 processes but 4 devices.*cfg 2: ulysses=1 ring=2, ulysses=2 ring=1"):
        check_degrees(ParallelConfig(ulysses=2, ring=2, cfg=2), 4, 40)


def test_valid_layouts_and_fields():
    assert valid_layouts(8, 40) == [(1, 8), (2, 4), (4, 2), (8, 1)]
    assert valid_layouts(6, 40) == [(1, 6), (2, 3)]  # 3 and 6 do not divide 40 heads
    assert valid_layouts(3, 12, cfg=2) == []
    check_degrees(ParallelConfig(ulysses=4, ring=2), 8, 40)  # fits: no error
    for bad in ({"ulysses": 0}, {"ring": 1.5}, {"cfg": 3}, {"ulysses": True}):
        with pytest.raises(ValueError):
            ParallelConfig(**bad)
