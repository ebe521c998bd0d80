"""WF-VAE decode memory is flat in video length (streamed) and in area (tiled): random WF-VAEs measured in a
subprocess with the Wan VAE probe's method (memory_probe.py: peak of every CPU allocation during the decode,
the returned video excluded). The whole-sequence decode is measured too: its growth with length shows the probe
sees what the streamed decode must not do. Numbers: docs/wfvae.md section 3.

Tiled cases use grids whose largest tile is the full 8x8 latents (14, 28: ``tile_spans`` gives 8-latent first
tiles), since the peak follows the largest tile (a 16-latent grid is three 7-latent tiles, a smaller peak)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).with_name("memory_probe.py")
LIMIT = 1.1  # issue 48: 4x the frames within 1.1x the peak; the same asked of 4x the area


def probe(*cases: str, structure: str = "4x8x8", base: int = 8, timeout: int = 900) -> dict[str, dict]:
    env = dict(os.environ, PROBE_THREADS="1", PROBE_STRUCTURE=structure, PROBE_BASE=str(base))
    proc = subprocess.run([sys.executable, str(PROBE), *cases], capture_output=True, text=True, timeout=timeout,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["case"]: r for r in rows}


def ratio(r: dict, base: str, test: str, label: str) -> float:
    value = r[test]["peak_mib"] / r[base]["peak_mib"]
    print(f"{label}: {base} -> {r[base]['peak_mib']:.2f} MiB, {test} -> {r[test]['peak_mib']:.2f} MiB, "
          f"ratio {value:.3f}")
    return value


def check(r: dict, length: tuple[str, ...], area: tuple[str, ...], full: tuple[str, str]) -> None:
    for longer in length[1:]:
        assert ratio(r, length[0], longer, "streamed decode, length") <= LIMIT
    for larger in area[1:]:
        assert ratio(r, area[0], larger, "tiled decode, area") <= LIMIT
    assert ratio(r, *full, "whole-sequence decode (reference), length") > 1.5


def test_memory_flat_in_length_and_area_fast():
    """4x8x8 at base 8: 3 vs 12 latent frames (9 vs 45 video frames) of 8x8 latents; tiled (8-latent tiles,
    overlap 2) 14x14 vs 28x28 latents, one latent frame."""
    r = probe("3:8:8", "12:8:8", "1:14:14:8:2", "1:28:28:8:2", "full:3:8:8", "full:12:8:8")
    check(r, ("3:8:8", "12:8:8"), ("1:14:14:8:2", "1:28:28:8:2"), ("full:3:8:8", "full:12:8:8"))


@pytest.mark.slow
@pytest.mark.parametrize("structure", ["4x8x8", "8x8x8"])
def test_memory_flat_in_length_and_area_1x_2x_4x(structure):
    """Base 32 (1/6 of WF-VAE-L's widths, 1/5 of v1.5's): 3/6/12 latent frames of 8x8 latents; tiled 14x14,
    14x28 and 28x28 latents (2 latent frames)."""
    r = probe("3:8:8", "6:8:8", "12:8:8", "2:14:14:8:2", "2:14:28:8:2", "2:28:28:8:2", "full:3:8:8", "full:12:8:8",
              structure=structure, base=32)
    check(r, ("3:8:8", "6:8:8", "12:8:8"), ("2:14:14:8:2", "2:14:28:8:2", "2:28:28:8:2"),
          ("full:3:8:8", "full:12:8:8"))
