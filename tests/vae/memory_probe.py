"""Peak-memory probe for VAE decode (run as a subprocess by test_memory.py; also usable by hand).

Builds the VAE with the real Wan 2.1 widths (base dim 96) and random weights once, then measures each
requested case with the torch profiler: every CPU allocation and free made during the decode (tensors and
the kernels' internal buffers, e.g. im2col columns) is replayed in time order and the running total's
maximum is the peak. The returned video (the output buffer) is subtracted; weights and the input exist
before the call and are not counted.

Usage: python memory_probe.py CASE [CASE ...]; CASE = [full:]frames:height:width[:tile[:overlap]] in latent
units. No tile: untiled streaming; ``full:``: the whole-sequence reference (memory grows with length).
Prints one JSON line per case.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from wan_core.demo import random_vae_model  # noqa: E402
from wan_core.vae import WAN21_VAE, WAN22_VAE, WanVAE  # noqa: E402


def random_vae(seed: int = 0, cfg=WAN21_VAE) -> WanVAE:
    """The VAE with random weights (every tensor random; conv weights scaled by 1/sqrt(fan_in))."""
    return WanVAE(random_vae_model(cfg, seed), source="<random>")


def profiled_peak_bytes(fn):
    """Run ``fn()`` under the torch profiler; return (its result, peak bytes allocated during the call)."""
    from torch._C._profiler import _EventType

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    deltas = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        if event.tag == _EventType.Allocation:
            deltas.append((event.start_time_ns, event.extra_fields.alloc_size))
        stack.extend(event.children)
    deltas.sort()
    live = peak = 0
    for _, size in deltas:
        live += size
        peak = max(peak, live)
    return result, peak


def measure(vae: WanVAE, case: str) -> dict:
    full = case.startswith("full:")
    parts = [int(p) for p in case.removeprefix("full:").split(":")]
    frames, height, width = parts[:3]
    tile = parts[3] if len(parts) > 3 else None
    overlap = parts[4] if len(parts) > 4 else 0
    z = torch.randn(1, vae.config.z_dim, frames, height, width, generator=torch.Generator().manual_seed(1))
    if full:
        def run():
            with torch.no_grad():
                return vae.model.decode_full(z)
    elif tile is None:
        def run():
            return vae.decode(z, tiling="off")
    else:
        def run():
            return vae.decode(z, tiling="on", tile=tile, overlap=overlap)
    t0 = time.perf_counter()
    out, peak = profiled_peak_bytes(run)
    seconds = time.perf_counter() - t0
    out_bytes = out.numel() * out.element_size()
    return {"case": case, "frames": frames, "height": height, "width": width, "tile": tile,
            "overlap": overlap, "seconds": round(seconds, 2), "out_mib": out_bytes / 2**20,
            "peak_mib": (peak - out_bytes) / 2**20}


# PROBE_VAE selects the network: "2.1" (default, real widths), "2.2" (the Wan 2.2 layout at 1/4 of its widths,
# fast enough for the default suite) or "2.2-full" (the released Wan 2.2 widths)
VAES = {"2.1": WAN21_VAE, "2.2-full": WAN22_VAE,
        "2.2": dataclasses.replace(WAN22_VAE, base_dim=40, decoder_base_dim=64, name="wan2.2-quarter")}


def main(argv: list[str]) -> None:
    torch.set_num_threads(int(os.environ.get("PROBE_THREADS", "1")))
    vae = random_vae(cfg=VAES[os.environ.get("PROBE_VAE", "2.1")])
    for case in argv:
        print(json.dumps(measure(vae, case)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
