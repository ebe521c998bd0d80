"""``tiling="auto"``: the decode's memory estimate bounds what the profiler measures, and auto picks untiled
when that fits, else the largest tile that fits (CUDA: free memory; CPU: a budget)."""
from __future__ import annotations

import warnings

import pytest
import torch
from memory_probe import profiled_peak_bytes
from vae_testlib import rand_latents

from wan_core.vae import VAETilingWarning, build_model
from wan_core.vae import auto_tile
from wan_core.vae.auto_tile import available_bytes, choose_decode_tile, decode_peak_bytes
from wan_core.vae.tiling import tile_grid


def _measured_mib(fn) -> float:
    out, peak = profiled_peak_bytes(fn)
    return (peak - out.numel() * out.element_size()) / 2**20


def _check_bound(estimate: int, measured_mib: float, what: str) -> None:
    est = estimate / 2**20
    print(f"{what}: measured {measured_mib:.2f} MiB, estimated {est:.2f} MiB ({est / measured_mib:.2f}x)")
    assert measured_mib <= est <= 1.35 * measured_mib, what


@pytest.mark.parametrize("frames, height, width", [(2, 5, 7)])
def test_estimate_bounds_the_measured_peak(vae, frames, height, width):
    z = rand_latents(frames, height, width, seed=51)
    measured = _measured_mib(lambda: vae.decode(z, tiling="off"))
    _check_bound(decode_peak_bytes(vae.model, height, width), measured, f"untiled {height}x{width}")
    measured = _measured_mib(lambda: vae.decode(z, tiling="on", tile=4, overlap=1))
    rows, cols = tile_grid(height, width, 4, 1)  # the largest tile of that layout
    th, tw = max(e - s for s, e in rows), max(e - s for s, e in cols)
    _check_bound(decode_peak_bytes(vae.model, th, tw), measured, f"tiles of {th}x{tw} on {height}x{width}")


@pytest.mark.slow
def test_estimate_bounds_the_measured_peak_at_wan21_widths():
    from memory_probe import random_vae

    big = random_vae()
    z = torch.randn(1, 16, 2, 6, 10, generator=torch.Generator().manual_seed(52))
    measured = _measured_mib(lambda: big.decode(z, tiling="off"))
    _check_bound(decode_peak_bytes(big.model, 6, 10), measured, "Wan 2.1 widths, untiled 6x10")


def _out_bytes(z: torch.Tensor) -> int:
    b, _, t, h, w = z.shape
    return 4 * b * 3 * (1 + 4 * (t - 1)) * h * w * 64


def _spy(vae, monkeypatch):
    calls = []
    real_tiled, real_untiled = vae._decode_tiled, vae._decode_untiled

    def tiled(z, shape, tile, overlap, progress, interrupt):
        calls.append(("tiled", tile, overlap))
        return real_tiled(z, shape, tile, overlap, progress, interrupt)

    def untiled(*args):
        calls.append(("untiled",))
        return real_untiled(*args)

    monkeypatch.setattr(vae, "_decode_tiled", tiled)
    monkeypatch.setattr(vae, "_decode_untiled", untiled)
    return calls


def test_auto_decodes_untiled_when_the_estimate_fits(vae, monkeypatch):
    z = rand_latents(2, 7, 5, seed=53)
    monkeypatch.setattr(vae, "memory_budget", decode_peak_bytes(vae.model, 7, 5) + _out_bytes(z))
    calls = _spy(vae, monkeypatch)
    out = vae.decode(z)
    assert calls == [("untiled",)]
    assert torch.equal(out, vae.decode(z, tiling="off"))


def test_auto_picks_the_largest_tile_that_fits(vae, monkeypatch):
    z = rand_latents(1, 15, 13, seed=54)
    fits, too_big = decode_peak_bytes(vae.model, 9, 9), decode_peak_bytes(vae.model, 10, 10)
    assert fits < too_big < decode_peak_bytes(vae.model, 15, 13)
    monkeypatch.setattr(vae, "memory_budget", _out_bytes(z) + (fits + too_big) // 2)
    calls = _spy(vae, monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", VAETilingWarning)  # planned tiles are not an out-of-memory fallback
        out = vae.decode(z)
    assert calls == [("tiled", (9, 9), (2, 2))]  # overlap: a quarter of the tile
    assert torch.equal(out, vae.decode(z, tiling="on", tile=(9, 9), overlap=(2, 2)))
    # a frame narrower than the tile: the tile is clipped to it and grows along the other side
    assert choose_decode_tile(vae.model, 6, 40, decode_peak_bytes(vae.model, 6, 20)) == ((6, 20), (1, 5))
    # a given tile caps the planned one; a given overlap replaces the default (a quarter of the tile at most)
    assert decode_peak_bytes(vae.model, 6, 12) <= (fits + too_big) // 2  # the given tile fits as it is
    calls.clear()
    vae.decode(z, tile=(6, 12), overlap=(1, 5))
    vae.decode(z, tile=32, overlap=1)
    assert calls == [("tiled", (6, 12), (1, 3)), ("tiled", (9, 9), (1, 1))]


def test_auto_with_no_room_uses_the_smallest_tile_and_still_falls_back(vae, monkeypatch):
    z = rand_latents(1, 12, 12, seed=55)
    monkeypatch.setattr(vae, "memory_budget", 1)
    calls = _spy(vae, monkeypatch)
    vae.decode(z)
    assert calls == [("tiled", (8, 8), (2, 2))]  # WanVAE.min_tile

    # planned tiles that still run out of memory are halved, with the warning
    class FakeOOM(RuntimeError):
        pass

    monkeypatch.setattr(vae, "memory_budget", _out_bytes(z) + decode_peak_bytes(vae.model, 10, 10))
    monkeypatch.setattr(vae, "is_oom", lambda err: isinstance(err, FakeOOM))
    real_tiled = vae._decode_tiled
    tried = []

    def tiled(z_, shape, tile, overlap, progress, interrupt):
        tried.append(tile)
        if tile == (10, 10):
            raise FakeOOM("pretend")
        return real_tiled(z_, shape, tile, overlap, progress, interrupt)

    monkeypatch.setattr(vae, "_decode_tiled", tiled)
    with pytest.warns(VAETilingWarning, match=r"tiles of 8x8 latents"):
        vae.decode(z)
    assert tried == [(10, 10), (8, 8)]


def test_available_memory(monkeypatch):
    assert available_bytes("cpu", budget=12345) == 12345
    ram = auto_tile._available_ram()
    assert 0 < available_bytes("cpu") <= ram
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (6 * 2**30, 24 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 3 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 2 * 2**30)
    # free memory plus what the caching allocator holds unused, with headroom
    assert available_bytes("cuda") == int(auto_tile.CUDA_HEADROOM * 7 * 2**30)
    assert available_bytes("cuda", budget=2**30) == 2**30


def test_estimate_is_linear_in_area_and_halves_in_half_precision(vae):
    e = [decode_peak_bytes(vae.model, s, s) for s in (4, 8, 16)]
    assert e[2] - e[1] == pytest.approx(4 * (e[1] - e[0]), rel=1e-6)  # 256-64 = 4 x (64-16) latents
    half = build_model(vae.config, "meta", dtype=torch.bfloat16)  # shapes only: no weights needed
    assert decode_peak_bytes(half, 16, 16) == pytest.approx(e[2] / 2, rel=1e-6)
