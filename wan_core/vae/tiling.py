"""Spatial tiling with linear blending for VAE decode and encode; every tile streams through time.

Background: docs/algorithms.md section 1.5 (diffusers / Open-Sora tiled VAE). Tiles are laid out in latent
units, evenly spaced with at least ``overlap`` shared latents; across each overlap the two tiles' outputs
are cross-faded linearly and the blend weights sum to one at every output position (partition of unity),
so a single tile reproduces the untiled result exactly.
"""
from __future__ import annotations

import math

import torch

from ..progress import InterruptFn, ProgressCounter
from .model import WanVAEModel
from .streaming import stream_decode, stream_encode

Span = tuple[int, int]


def pair(value, name: str) -> tuple[int, int]:
    """``int`` or ``(h, w)`` -> ``(h, w)`` of positive ints."""
    h, w = (value, value) if isinstance(value, int) else tuple(value)
    if int(h) != h or int(w) != w:
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
    return int(h), int(w)


def tile_spans(length: int, tile: int, overlap: int) -> list[Span]:
    """Latent ranges ``[start, end)`` of at most ``tile`` latents covering ``[0, length)``.

    The fewest tiles in which neighbours share ``overlap`` latents, and every neighbour pair shares exactly
    that many: the slack goes into the tile sizes (which differ by at most one) instead of into wider
    overlaps, so the decoded area is the least any layout with these tiles can have (each overlap latent is
    decoded twice, nothing more). ``tile >= length`` gives one tile covering everything.
    """
    if tile < 1 or not 0 <= overlap < tile:
        raise ValueError(f"need tile >= 1 and 0 <= overlap < tile (latent units), got tile={tile}, overlap={overlap}")
    if tile >= length:
        return [(0, length)]
    n = math.ceil((length - overlap) / (tile - overlap))
    size, bigger = divmod(length + (n - 1) * overlap, n)  # size + 1 <= tile by the choice of n
    spans, start = [], 0
    for k in range(n):
        end = start + size + (k < bigger)
        spans.append((start, end))
        start = end - overlap
    return spans


def blend_weights(spans: list[Span], scale: int = 1) -> list[torch.Tensor]:
    """1-D blend weights (float64), one per span, on the output grid (``scale`` outputs per latent).

    Each tile's raw weight rises linearly across its overlap with the previous tile and falls across its
    overlap with the next one (1 elsewhere); weights are then divided by their sum at each position, so
    they add up to one everywhere and are exactly 1 where only one tile covers.
    """
    bounds = [(s * scale, e * scale) for s, e in spans]
    length = max(e for _, e in bounds)
    raw = []
    for k, (s, e) in enumerate(bounds):
        p = torch.arange(s, e, dtype=torch.float64) + 0.5  # pixel centres
        w = torch.ones(e - s, dtype=torch.float64)
        if k > 0:
            left = bounds[k - 1][1] - s
            if left > 0:
                w = torch.minimum(w, (p - s) / left)
        if k < len(bounds) - 1:
            right = e - bounds[k + 1][0]
            if right > 0:
                w = torch.minimum(w, (e - p) / right)
        raw.append(w)
    total = torch.zeros(length, dtype=torch.float64)
    for (s, e), w in zip(bounds, raw):
        total[s:e] += w
    return [w / total[s:e] if len(raw) > 1 else w for (s, e), w in zip(bounds, raw)]


def tile_grid(height: int, width: int, tile, overlap) -> tuple[list[Span], list[Span]]:
    """Row and column spans (latent units) for a ``height`` x ``width`` latent grid."""
    (th, tw), (oh, ow) = pair(tile, "tile"), pair(overlap, "overlap")
    return tile_spans(height, th, min(oh, th - 1)), tile_spans(width, tw, min(ow, tw - 1))


def _tiles(rows: list[Span], cols: list[Span], scale: int):
    wy, wx = blend_weights(rows, scale), blend_weights(cols, scale)
    for (y0, y1), wr in zip(rows, wy):
        for (x0, x1), wc in zip(cols, wx):
            yield (y0, y1), (x0, x1), (wr[:, None] * wc[None, :]).to(torch.float32)


def tiled_decode(
    model: WanVAEModel,
    z: torch.Tensor,
    out: torch.Tensor,
    tile,
    overlap,
    progress=None,
    interrupt: InterruptFn | None = None,
) -> torch.Tensor:
    """Decode ``z`` [B, 16, T', H', W'] tile by tile into ``out`` [B, 3, T, 8H', 8W'] (zero-filled float32).

    ``tile`` / ``overlap``: latent units (int or (h, w)). Each tile streams one latent frame at a time and
    its frames are added into ``out`` with their blend weights as soon as they are decoded.
    """
    sf = model.config.spatial_factor
    rows, cols = tile_grid(z.shape[3], z.shape[4], tile, overlap)
    prog = ProgressCounter(progress, z.shape[0] * z.shape[2] * len(rows) * len(cols))
    for (y0, y1), (x0, x1), w in _tiles(rows, cols, sf):
        w = w.to(out.device)
        region = (slice(y0 * sf, y1 * sf), slice(x0 * sf, x1 * sf))

        def sink(b: int, t: int, frames: torch.Tensor, region=region, w=w) -> None:
            dst = out[b:b + 1, :, t:t + frames.shape[2], region[0], region[1]]
            dst.addcmul_(frames.to(device=out.device, dtype=out.dtype), w)

        stream_decode(model, z[:, :, :, y0:y1, x0:x1], sink, prog, interrupt)
    return out


def tiled_encode(
    model: WanVAEModel,
    video: torch.Tensor,
    out: torch.Tensor,
    tile,
    overlap,
    progress=None,
    interrupt: InterruptFn | None = None,
) -> torch.Tensor:
    """Encode ``video`` [B, 3, T, H, W] tile by tile into ``out`` [B, 16, T', H/8, W/8] (zero-filled float32).

    ``tile`` / ``overlap``: latent units; blending happens on the latent grid.
    """
    sf = model.config.spatial_factor
    rows, cols = tile_grid(out.shape[3], out.shape[4], tile, overlap)
    prog = ProgressCounter(progress, video.shape[0] * out.shape[2] * len(rows) * len(cols))
    for (y0, y1), (x0, x1), w in _tiles(rows, cols, 1):
        w = w.to(out.device)

        def sink(b: int, i: int, mu: torch.Tensor, y0=y0, y1=y1, x0=x0, x1=x1, w=w) -> None:
            out[b:b + 1, :, i:i + 1, y0:y1, x0:x1].addcmul_(mu.to(device=out.device, dtype=out.dtype), w)

        stream_encode(model, video[:, :, :, y0 * sf:y1 * sf, x0 * sf:x1 * sf], sink, prog, interrupt)
    return out
