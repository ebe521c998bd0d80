"""Memory is flat in video length (streaming) and in resolution (tiling): real Wan 2.1 widths (base dim 96),
random weights, measured in a subprocess with the torch profiler (memory_probe.py: peak of all CPU
allocations made during the decode, the returned video excluded).

The whole-sequence decode is measured too: its growth with length shows the probe can see what the
streamed decode must not do.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).with_name("memory_probe.py")
LIMIT = 1.3


def _probe(*cases: str, timeout: int = 900, vae: str = "2.1") -> dict[str, dict]:
    env = dict(os.environ, PROBE_THREADS="1", PROBE_VAE=vae)
    proc = subprocess.run([sys.executable, str(PROBE), *cases], capture_output=True, text=True, timeout=timeout,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["case"]: r for r in rows}


def _report(r: dict, label: str, base: dict, test: dict) -> float:
    ratio = test["peak_mib"] / base["peak_mib"]
    print(f"{label}: {base['case']} -> {base['peak_mib']:.1f} MiB, {test['case']} -> {test['peak_mib']:.1f} MiB, "
          f"ratio {ratio:.3f}")
    return ratio


def _check(results: dict, short: str, long: str, small: str, large: str, full_short: str, full_long: str):
    r = results
    streamed = _report(r, "streamed decode, length", r[short], r[long])
    tiled = _report(r, "tiled decode, 4x pixel area", r[small], r[large])
    whole = _report(r, "whole-sequence decode (reference), length", r[full_short], r[full_long])
    assert streamed <= LIMIT
    assert tiled <= LIMIT
    assert whole > LIMIT  # the measurement does see memory that grows with length


def test_memory_flat_in_length_and_area_fast():
    """Small version for the default suite: 64x64 px frames (at 32x32 px the largest layers' reordered conv
    weights, the same at every length, hide the growth of the reference); 2 vs 6 latent frames (5 vs 21 video
    frames); tiled 128x128 px (3x3 tiles of 8x8 latents, overlap 2) vs untiled 64x64 px."""
    cases = ("2:8:8", "6:8:8", "2:16:16:8:2", "full:2:8:8", "full:6:8:8")
    results = _probe(*cases)
    _check(results, "2:8:8", "6:8:8", "2:8:8", "2:16:16:8:2", "full:2:8:8", "full:6:8:8")


@pytest.mark.slow
def test_memory_flat_in_length_and_area_acceptance():
    """The acceptance sizes: 8x8 latents (64x64 px); 3 vs 21 latent frames (9 vs 81 video frames); tiled
    16x16 latents (3x3 tiles of 8x8, overlap 2) vs untiled 8x8, 3 latent frames."""
    cases = ("3:8:8", "21:8:8", "3:16:16:8:2", "full:3:8:8", "full:21:8:8")
    results = _probe(*cases)
    _check(results, "3:8:8", "21:8:8", "3:8:8", "3:16:16:8:2", "full:3:8:8", "full:21:8:8")


def test_wan22_memory_flat_in_length_and_area_fast():
    """The Wan 2.2 VAE (docs/wan22.md section 3) at 1/4 of its widths: 4x4 latents (64x64 px); 2 vs 6 latent
    frames (5 vs 21 video frames, 3x); tiled 8x8 latents (2x2 tiles of 4x4, overlap 2; 4x the area) vs untiled."""
    cases = ("2:4:4", "6:4:4", "2:8:8:4:2", "full:2:4:4", "full:6:4:4")
    results = _probe(*cases, vae="2.2")
    _check(results, "2:4:4", "6:4:4", "2:4:4", "2:8:8:4:2", "full:2:4:4", "full:6:4:4")


@pytest.mark.slow
def test_wan22_memory_flat_in_length_and_area_full_widths():
    """The released Wan 2.2 widths (encoder 160, decoder 256 base): 3 vs 9 latent frames, tiled 8x8 vs 4x4."""
    cases = ("3:4:4", "9:4:4", "3:8:8:4:2", "full:3:4:4", "full:9:4:4")
    results = _probe(*cases, vae="2.2-full", timeout=1800)
    _check(results, "3:4:4", "9:4:4", "3:4:4", "3:8:8:4:2", "full:3:4:4", "full:9:4:4")
