"""Distributed VAE decode: the spatial tiles of ``wan_core.vae.tiling`` split over the ranks (docs/parallel.md
section 8).

Every rank decodes every ``world``-th tile (each streaming through time as usual) into a zero-filled output and
adds it with its blend weights; the partial outputs are summed on ``dst`` (the blend weights are a partition of
unity, so the sum is the tiled decode). The result equals the single-process tiled decode with the same tile and
overlap up to the order of the float32 additions.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ..progress import ProgressCounter
from ..vae.streaming import stream_decode
from ..vae.tiling import _tiles, tile_grid


def distributed_decode(vae: Any, z: torch.Tensor, tile=32, overlap=8, group: dist.ProcessGroup | None = None,
                       dst: int = 0, all_ranks: bool = False, progress=None, interrupt=None) -> torch.Tensor | None:
    """Raw latents ``z`` [B, 16, T', H', W'] (the same on every rank) -> video [B, 3, T, 8H', 8W'] float32 in
    [-1, 1] on rank ``dst`` (None on the others; on every rank with ``all_ranks``). ``tile`` / ``overlap`` in
    latent units as ``vae.decode(tiling="on")``; pick a tile that gives at least as many tiles as ranks."""
    cfg = vae.config
    b, _, t, h, w = z.shape
    sf = cfg.spatial_factor
    out = torch.zeros((b, cfg.out_channels, cfg.video_frames(t), h * sf, w * sf), dtype=torch.float32,
                      device=z.device)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    rows, cols = tile_grid(h, w, tile, overlap)
    mine = list(_tiles(rows, cols, sf))[rank::world]
    prog = ProgressCounter(progress, b * t * len(mine))
    zin = z.to(vae.dtype)
    for (y0, y1), (x0, x1), wt in mine:
        wt = wt.to(out.device)
        region = (slice(y0 * sf, y1 * sf), slice(x0 * sf, x1 * sf))

        def sink(bi: int, ti: int, frames: torch.Tensor, region=region, wt=wt) -> None:
            dst_view = out[bi:bi + 1, :, ti:ti + frames.shape[2], region[0], region[1]]
            dst_view.addcmul_(frames.to(device=out.device, dtype=out.dtype), wt)

        stream_decode(vae.model, zin[:, :, :, y0:y1, x0:x1], sink, prog, interrupt)
    if all_ranks:
        dist.all_reduce(out, group=group)
        return out
    dist.reduce(out, dist.get_global_rank(group, dst) if group is not None else dst, group=group)
    return out if rank == dst else None
