"""Spatial tiling: tile layout, blend weights (partition of unity), exactness with one tile, locality of
tiling differences (seams only), and the automatic fallback to tiles on out-of-memory."""
from __future__ import annotations

import warnings

import pytest
import torch
from vae_testlib import make_reference, official_state_dict, rand_latents, rand_video

from wan_core.vae import VAETilingWarning, load_vae
from wan_core.vae.loader import default_is_oom
from wan_core.vae.tiling import blend_weights, tile_spans


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:  # signals in [-1, 1]: peak-to-peak 2
    return (10 * torch.log10(4.0 / ((a - b) ** 2).mean())).item()


@pytest.mark.parametrize("length, tile, overlap", [
    (8, 32, 8), (33, 32, 8), (60, 32, 8), (104, 32, 8), (57, 32, 8), (16, 10, 4), (7, 2, 1), (9, 3, 0), (50, 8, 7),
])
def test_tile_spans_cover_with_overlap(length, tile, overlap):
    spans = tile_spans(length, tile, overlap)
    assert spans[0][0] == 0 and spans[-1][1] == length
    sizes = [e - s for s, e in spans]
    assert max(sizes) <= tile and max(sizes) - min(sizes) <= 1  # at most `tile`, evenly sized
    for (s0, e0), (s1, _) in zip(spans, spans[1:]):
        assert s0 < s1 and e0 - s1 == overlap  # neighbours share exactly `overlap` latents
    assert sum(sizes) == length + (len(spans) - 1) * overlap  # so nothing beyond the overlaps is decoded twice
    if len(spans) > 1:  # the fewest tiles: one fewer would not reach the end with that overlap
        n = len(spans) - 1
        assert tile + (n - 1) * (tile - overlap) < length


@pytest.mark.parametrize("length, tile, overlap, scale", [
    (60, 32, 8, 8), (104, 32, 8, 8), (57, 32, 8, 8), (16, 10, 4, 1), (7, 2, 1, 8), (50, 8, 7, 1), (9, 3, 0, 8),
])
def test_blend_weights_partition_of_unity(length, tile, overlap, scale):
    spans = tile_spans(length, tile, overlap)
    weights = blend_weights(spans, scale)
    canvas = torch.zeros(length * scale, dtype=torch.float64)
    cover = torch.zeros(length * scale, dtype=torch.int64)
    for (s, e), w in zip(spans, weights):
        assert w.shape == ((e - s) * scale,)
        assert (w > 0).all() and (w <= 1).all()
        canvas[s * scale:e * scale] += w
        cover[s * scale:e * scale] += 1
    assert torch.allclose(canvas, torch.ones_like(canvas), atol=1e-12, rtol=0)
    for (s, e), w in zip(spans, weights):  # exactly 1 where a single tile covers
        single = cover[s * scale:e * scale] == 1
        assert torch.equal(w[single], torch.ones_like(w[single]))
    # 2-D weights (what the decoder uses, float32): outer products, also summing to one
    rows, cols = spans, tile_spans(length + 3, tile, overlap)
    canvas2 = torch.zeros(length * scale, (length + 3) * scale)
    for (ys, ye), wy in zip(rows, weights):
        for (xs, xe), wx in zip(cols, blend_weights(cols, scale)):
            canvas2[ys * scale:ye * scale, xs * scale:xe * scale] += (wy[:, None] * wx[None, :]).float()
    assert (canvas2 - 1).abs().max() <= 1e-6


def test_blend_is_linear_across_an_overlap():
    (a, b) = blend_weights(tile_spans(16, 10, 4), 2)  # tiles [0,10) and [6,16): overlap pixels 12..19
    ramp = b[:8]
    assert torch.allclose(ramp[1:] - ramp[:-1], torch.full((7,), 1 / 8, dtype=torch.float64))
    assert torch.allclose(a[12:], 1 - ramp)


def test_one_tile_covering_the_frame_equals_untiled_exactly(vae):
    z = rand_latents(3, 5, 4, seed=31)
    untiled = vae.decode(z, tiling="off")
    assert torch.equal(vae.decode(z, tiling="on", tile=5, overlap=2), untiled)
    assert torch.equal(vae.decode(z, tiling="on", tile=(8, 64), overlap=1), untiled)
    video = rand_video(9, 40, 32, seed=32)
    assert torch.equal(vae.encode(video, tiling="on", tile=5, overlap=2), vae.encode(video, tiling="off"))


def _local_vae():
    """The tiny VAE made spatially local: every residual branch's second conv and the middle attention's
    output projection zeroed (biases kept), so an output pixel only sees latents within ~2 of it."""
    sd = official_state_dict(make_reference(seed=3))
    for k, v in sd.items():
        if k.endswith("residual.6.weight") or k.endswith("middle.1.proj.weight"):
            v.zero_()
    return load_vae(sd)


def test_tiled_decode_differs_only_near_seams():
    vae = _local_vae()
    z = rand_latents(2, 12, 12, seed=33)
    untiled = vae.decode(z, tiling="off")
    tiled = vae.decode(z, tiling="on", tile=8, overlap=4)  # 2 x 2 tiles: [0,8) and [4,12) per axis
    diff = (tiled - untiled).abs().amax(dim=(0, 1, 2))  # [H, W] pixels
    # latents 0..3 and 8..11 per axis are covered by one tile only, 4 latents from that tile's inner edge
    away = [diff[ys, xs] for ys in (slice(0, 32), slice(64, 96)) for xs in (slice(0, 32), slice(64, 96))]
    assert max(d.max() for d in away) <= 1e-5
    seam = max(diff[32:64].max(), diff[:, 32:64].max())
    assert seam > 1e-3  # the tiles really differ from untiled in the seam bands
    print(f"local model, 2x2 tiles: PSNR {_psnr(tiled, untiled):.1f} dB, max diff in seam bands {seam:.3f}, "
          f"away from seams {max(d.max() for d in away):.1e}")


def test_tiled_decode_2x2_full_model_runs(vae):
    """With all weights random, the middle attention is global per frame: tiles change every pixel a little.
    Reported, and bounded loosely (the decode must stay a faithful rendering of the same latents)."""
    z = rand_latents(3, 8, 8, seed=34)
    untiled = vae.decode(z, tiling="off")
    tiled = vae.decode(z, tiling="on", tile=5, overlap=2)
    assert tiled.shape == untiled.shape and tiled.abs().max() <= 1
    psnr = _psnr(tiled, untiled)
    print(f"random tiny model, 2x2 tiles (5x5 latents, overlap 2): PSNR {psnr:.1f} dB")
    assert psnr > 12


def test_tiled_encode_2x2_close_to_untiled():
    vae = _local_vae()
    video = rand_video(5, 128, 128, seed=35)
    untiled = vae.encode(video, tiling="off")
    tiled = vae.encode(video, tiling="on", tile=10, overlap=4)
    assert tiled.shape == untiled.shape == (1, 16, 2, 16, 16)
    rel = ((tiled - untiled).norm() / untiled.norm()).item()
    print(f"local model, tiled encode relative error {rel:.3f}")
    assert rel < 0.1


class _FakeOOM(RuntimeError):
    pass


def test_auto_falls_back_to_tiles_on_out_of_memory(vae, monkeypatch):
    z = rand_latents(2, 6, 5, seed=36)
    expected = vae.decode(z, tiling="on", tile=4, overlap=1)

    def untiled_oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(vae, "_decode_untiled", untiled_oom)
    with pytest.warns(VAETilingWarning, match=r"tiles of 4x4 latents \(32x32 px\)") as record:
        got = vae.decode(z, tile=4, overlap=1)
    assert len(record) == 1
    assert torch.equal(got, expected)
    with pytest.raises(torch.OutOfMemoryError):  # "off" never falls back
        vae.decode(z, tiling="off")


def test_injectable_oom_predicate_and_tile_shrinking(vae, monkeypatch):
    z = rand_latents(2, 6, 6, seed=37)
    calls = []
    real_tiled = vae._decode_tiled

    def tiled(z_, shape, tile, overlap, progress, interrupt):
        calls.append(tile)
        if tile == 32:  # the default tile "does not fit": the fallback halves it
            raise _FakeOOM("pretend")
        return real_tiled(z_, shape, tile, overlap, progress, interrupt)

    def untiled(*a, **k):
        raise _FakeOOM("pretend")

    monkeypatch.setattr(vae, "_decode_untiled", untiled)
    monkeypatch.setattr(vae, "_decode_tiled", tiled)
    with pytest.raises(_FakeOOM):  # the default predicate does not know this error: no fallback
        vae.decode(z)
    monkeypatch.setattr(vae, "is_oom", lambda err: isinstance(err, _FakeOOM))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = vae.decode(z)
    assert calls == [32, (16, 16)]
    assert [str(w.message) for w in record if issubclass(w.category, VAETilingWarning)] == [
        "VAE decode ran out of memory untiled; used spatial tiles of 16x16 latents (128x128 px) "
        "with overlap 4x4 latents"]
    assert out.shape == (1, 3, 5, 48, 48)


def test_default_oom_predicate():
    assert default_is_oom(torch.OutOfMemoryError("CUDA out of memory"))
    assert default_is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 GB"))
    assert default_is_oom(MemoryError())
    assert not default_is_oom(RuntimeError("shape mismatch"))
    assert not default_is_oom(ValueError("out of memory"))  # only runtime / memory errors count


def test_bad_tiling_arguments(vae):
    z = rand_latents(1, 4, 4)
    with pytest.raises(ValueError, match="tiling must be one of"):
        vae.decode(z, tiling="yes")
    with pytest.raises(ValueError, match="overlap < tile"):
        vae.decode(z, tiling="on", tile=2, overlap=-1)
