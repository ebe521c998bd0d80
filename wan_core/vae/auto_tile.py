"""``tiling="auto"``: the streamed decode's peak memory, the memory there is, and the largest tile that fits.

The streamed decode (streaming.py) holds, for the whole call, two cached frames for every causal layer at
that layer's resolution, plus the working set of one full-resolution layer; both grow with the decoded
area (a tile or the whole frame), not with the video length. ``decode_peak_bytes`` adds them up from the
model's own layers, ``choose_decode_tile`` compares that with the memory available (CUDA: free device
memory; CPU: a budget) and picks untiled, or the largest tile that fits.
"""
from __future__ import annotations

import os

import torch

from .causal_conv import CausalConv3d
from .model import WanVAEModel
from .resample import Resample
from .tiling import pair

# Working set of the widest full-resolution layer, in frames of its output: the 3-frame window of a
# residual conv, its output, the block input kept for the shortcut, lower-level frames waiting as pieces,
# per-pixel norms. Measured with the torch profiler: 6.0 at the Wan 2.1 widths, 6.6-7.7 for the narrow
# test models (8 channels: the one-channel norms weigh more); tests/vae/test_auto_tile.py checks the bound.
WORKING_FRAMES = 7.5
CUDA_HEADROOM = 0.85  # of the free CUDA memory: cuDNN workspaces and allocator rounding come on top
CPU_SHARE = 0.5       # of the available RAM when no budget is given


def decode_peak_bytes(model: WanVAEModel, height: int, width: int) -> int:
    """Estimated peak bytes of streaming ``height`` x ``width`` latents (one tile, or the whole frame) through
    the decoder as ``stream_decode`` does, the output video excluded (an upper bound: see WORKING_FRAMES)."""
    dec = model.decoder
    area = 1      # output pixels per latent at the current level
    cached = 0    # cached elements per latent, all causal layers
    frame = 0     # elements per latent of the widest layer output (a full-resolution frame)
    for layer in [dec.conv1, *dec.middle, *dec.upsamples, dec.head]:
        for m in layer.modules():
            if isinstance(m, CausalConv3d):
                narrow_head = layer is dec.head and m.out_channels < m.in_channels  # caches partial sums
                cached += m.front * (m.out_channels if narrow_head else m.in_channels) * area
                frame = max(frame, m.out_channels * area)
        if isinstance(layer, Resample) and layer.mode.startswith("up"):
            area *= 4  # every upsampling doubles height and width
    element = next(model.parameters()).element_size()
    weights = max(m.weight.numel() for m in dec.modules() if isinstance(m, CausalConv3d))  # oneDNN's copy
    return int(element * (height * width * (cached + WORKING_FRAMES * frame) + weights))


def available_bytes(device: torch.device | str, budget: int | None = None) -> int:
    """Memory a decode on ``device`` may use: ``budget`` if given; CUDA: free device memory plus what the
    caching allocator holds unused, times CUDA_HEADROOM; otherwise CPU_SHARE of the available RAM."""
    if budget is not None:
        return int(budget)
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(CUDA_HEADROOM * (free + cached))
    return int(CPU_SHARE * _available_ram())


def _available_ram() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30  # unknown platform: assume a modest machine


def choose_decode_tile(
    model: WanVAEModel,
    height: int,
    width: int,
    available: int,
    reserved: int = 0,
    min_tile: int = 8,
    max_overlap: int | tuple[int, int] = 8,
    max_tile: int | tuple[int, int] | None = None,
) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """None when ``height`` x ``width`` latents decode untiled within ``available`` bytes (``reserved`` of
    them already spoken for, e.g. the output video on the same device); else ``(tile, overlap)`` in latents:
    the largest tile (square, clipped to the frame and to ``max_tile``) whose estimate fits, the overlap a
    quarter of the tile, at most ``max_overlap`` (int or (h, w)). Never below ``min_tile``: if even that
    does not fit, that is the answer (the out-of-memory fallback of ``WanVAE`` can still halve it).
    """
    budget = available - reserved
    if decode_peak_bytes(model, height, width) <= budget:
        return None
    cap_h, cap_w = pair(max_tile, "tile") if max_tile is not None else (height, width)
    for side in range(max(height, width), 0, -1):
        th, tw = min(side, height, cap_h), min(side, width, cap_w)
        if max(th, tw) <= min_tile or decode_peak_bytes(model, th, tw) <= budget:
            break
    th, tw = max(th, min(min_tile, height, cap_h)), max(tw, min(min_tile, width, cap_w))  # a given tile wins
    oh, ow = pair(max_overlap, "overlap")
    return (th, tw), (min(oh, th // 4), min(ow, tw // 4))


def plan_decode(vae, z: torch.Tensor, tile=None, overlap=None) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The plan of ``WanVAE.decode(z, tiling="auto", tile, overlap)``: None (untiled fits) or ``(tile, overlap)``.

    Available memory: ``vae.memory_budget`` if set, else ``available_bytes`` of the model's device; the
    float32 output video counts against it when it lives on that device. A given ``tile`` caps the tile, a
    given ``overlap`` replaces the default one (both still at most what the tile allows).
    """
    model = vae.model
    device = next(model.parameters()).device
    cfg = model.config
    b, _, t, h, w = z.shape
    out_bytes = 4 * b * cfg.out_channels * cfg.video_frames(t) * h * w * cfg.spatial_factor ** 2
    same = z.device.type == device.type and (device.type == "cpu" or z.device == device)
    return choose_decode_tile(model, h, w, available_bytes(device, vae.memory_budget),
                              reserved=out_bytes if same else 0, min_tile=vae.min_tile,
                              max_overlap=vae.default_overlap if overlap is None else overlap, max_tile=tile)
