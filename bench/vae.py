"""Benchmark: Wan 2.1 VAE decode time and peak memory, ours vs diffusers ``AutoencoderKLWan`` (same weights).

Real Wan 2.1 widths with random weights (or ``--weights`` for a real file). Each run: wall time, and peak
memory of the call (CUDA: ``max_memory_allocated``; CPU: the torch profiler's replay of every allocation),
the returned video excluded. Configurations: ours untiled (streaming), ours tiled, diffusers default,
diffusers ``enable_tiling()`` with the same tile size.

    python bench/vae.py                                  # 17 frames at 480x832, fp32 and bf16
    python bench/vae.py --height 128 --width 224 --tile 8 --overlap 2    # small CPU run
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wan_core.vae import WAN21_VAE, load_vae  # noqa: E402
from wan_core.vae.keys import official_to_diffusers  # noqa: E402
from wan_core.demo import random_vae_model  # noqa: E402


def random_weights(seed: int = 0) -> dict[str, torch.Tensor]:
    return random_vae_model(WAN21_VAE, seed).state_dict()


def cpu_peak(fn):
    """(result, peak bytes allocated during fn) from the torch profiler's allocation events."""
    from torch._C._profiler import _EventType

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    deltas, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        if e.tag == _EventType.Allocation:
            deltas.append((e.start_time_ns, e.extra_fields.alloc_size))
        stack.extend(e.children)
    live = peak = 0
    for _, size in sorted(deltas):
        live += size
        peak = max(peak, live)
    return result, peak


def run(fn, device: torch.device):
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        peak = torch.cuda.max_memory_allocated() - base
    else:
        t0 = time.perf_counter()
        out, peak = cpu_peak(fn)
        seconds = time.perf_counter() - t0
    out_bytes = out.numel() * out.element_size()
    return seconds, (peak - out_bytes) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=17)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tile", type=int, default=32, help="tile size in latents (diffusers: 8x this in px)")
    ap.add_argument("--overlap", type=int, default=8, help="tile overlap in latents")
    ap.add_argument("--weights", default=None, help="a real Wan 2.1 VAE file instead of random weights")
    ap.add_argument("--no-diffusers", action="store_true")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    official = dict(load_vae(args.weights).model.state_dict()) if args.weights else random_weights()
    lat = (1 + (args.frames - 1) // 4, args.height // 8, args.width // 8)
    z = torch.randn(1, 16, *lat, generator=torch.Generator().manual_seed(1)).to(device)
    print(f"# decode {args.frames} frames at {args.height}x{args.width} (latents {lat}), device {device}, "
          f"tile {args.tile} overlap {args.overlap} latents", flush=True)
    rows = []
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        ours = load_vae(official, dtype=dtype, device=device)
        cases = {
            "ours (streamed, untiled)": lambda: ours.decode(z, tiling="off"),
            "ours (streamed, tiled)": lambda: ours.decode(z, tiling="on", tile=args.tile, overlap=args.overlap),
        }
        ref = None
        if not args.no_diffusers:
            from diffusers import AutoencoderKLWan

            ref = AutoencoderKLWan().to(dtype)
            ref.load_state_dict({official_to_diffusers(k): v for k, v in official.items()})
            ref.to(device).eval()
            zd = z.to(dtype)

            def diffusers_default():
                ref.disable_tiling()
                with torch.no_grad():
                    return ref.decode(zd).sample

            def diffusers_tiled():
                px = 8 * args.tile
                ref.enable_tiling(px, px, px - 8 * args.overlap, px - 8 * args.overlap)
                with torch.no_grad():
                    return ref.decode(zd).sample

            cases["diffusers (default)"] = diffusers_default
            cases["diffusers (enable_tiling)"] = diffusers_tiled
        for name, fn in cases.items():
            seconds, peak = run(fn, device)
            row = {"dtype": dtype_name, "case": name, "seconds": round(seconds, 2), "peak_mib": round(peak, 1)}
            rows.append(row)
            print(json.dumps(row), flush=True)
        del ours, ref
        gc.collect()
    print("\n| dtype | case | time (s) | peak (MiB, output excluded) |\n| --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['dtype']} | {r['case']} | {r['seconds']} | {r['peak_mib']} |")


if __name__ == "__main__":
    main()
