"""Benchmark: Wan 2.1 VAE decode time and peak memory, ours vs diffusers ``AutoencoderKLWan`` (same weights).

Real Wan 2.1 widths with random weights (or ``--weights`` for a real file). Four configurations per case:
ours untiled (streamed), ours tiled, diffusers default, diffusers ``enable_tiling`` with the same tiles
(``--tile`` / ``--overlap`` latents = ``enable_tiling(8*tile, 8*tile, 8*(tile-overlap), 8*(tile-overlap))``).

Times are plain runs (no profiler), interleaved: every round runs each configuration once, in an order that
rotates from round to round, so load drift on a shared machine hits them alike; ratios are taken within a
round and their median is printed. Peak memory is a separate pass, one profiled run per configuration
(CUDA: ``max_memory_allocated``; CPU: the torch profiler's replay of every allocation), the returned video
excluded.

On a shared machine, ``--clock cpu --threads 1`` times each run by this process's CPU time, which other
processes' load barely moves (wall time then mostly measures the scheduler).

    python bench/vae.py                                          # CPU: 17/33 frames at 128x224 and 256x448
    python bench/vae.py --cases 17x128x224 --rounds 3 --memory none
    python bench/vae.py --cases 17x480x832 --tile 32 --overlap 8 # a GPU
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wan_core.demo import random_vae_model  # noqa: E402
from wan_core.vae import WAN21_VAE, load_vae  # noqa: E402
from wan_core.vae.keys import official_to_diffusers  # noqa: E402

CPU_CASES = "17x128x224,33x128x224,17x256x448,33x256x448"
GPU_CASES = "17x480x832,33x480x832"
RATIOS = (  # (label, numerator, denominator, acceptance target or None)
    ("ours untiled / diffusers default", "ours untiled", "diffusers default", 1.0),
    ("ours tiled / diffusers tiled", "ours tiled", "diffusers tiled", 1.0),
    ("ours tiled / ours untiled", "ours tiled", "ours untiled", 1.6),
    ("diffusers tiled / diffusers default", "diffusers tiled", "diffusers default", None),
)


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


def device_is_cuda(name: str) -> bool:
    return torch.device(name).type == "cuda"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: torch.device, clock) -> tuple[float, torch.Tensor]:
    gc.collect()
    _sync(device)
    t0 = clock()
    out = fn()
    _sync(device)
    return clock() - t0, out


def peak_mib(fn, device: torch.device) -> float:
    """Peak memory of one call in MiB, its returned video excluded."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        out, peak = cpu_peak(fn)
    return (peak - out.numel() * out.element_size()) / 2**20


def configurations(official, z, dtype, device, tile: int, overlap: int, diffusers: bool) -> dict:
    ours = load_vae(official, dtype=dtype, device=device)
    cases = {
        "ours untiled": lambda: ours.decode(z, tiling="off"),
        "ours tiled": lambda: ours.decode(z, tiling="on", tile=tile, overlap=overlap),
    }
    if diffusers:
        from diffusers import AutoencoderKLWan

        ref = AutoencoderKLWan().to(dtype)
        ref.load_state_dict({official_to_diffusers(k): v for k, v in official.items()})
        ref.to(device).eval()
        zd = z.to(device, dtype)
        px, stride = 8 * tile, 8 * (tile - overlap)

        def diffusers_default():
            ref.disable_tiling()
            with torch.no_grad():
                return ref.decode(zd).sample

        def diffusers_tiled():
            ref.enable_tiling(px, px, stride, stride)
            with torch.no_grad():
                return ref.decode(zd).sample

        cases["diffusers default"] = diffusers_default
        cases["diffusers tiled"] = diffusers_tiled
    return cases


def bench_case(name: str, cases: dict, rounds: int, device: torch.device, memory: bool, clock) -> dict:
    names = list(cases)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]  # rotate: nobody always runs first
        outs = {}
        for n in order:
            seconds, out = timed(cases[n], device, clock)
            times[n].append(seconds)
            if r == 0 and n in ("ours untiled", "diffusers default"):
                outs[n] = out.float().cpu()
            del out
            print(f"  round {r + 1}: {n:18s} {seconds:8.2f} s", flush=True)
        if len(outs) == 2:
            diff = (outs["ours untiled"] - outs["diffusers default"]).abs().max().item()
            print(f"  ours untiled vs diffusers default: max abs diff {diff:.2e}", flush=True)
    result = {"case": name, "seconds": {n: statistics.median(v) for n, v in times.items()}, "ratios": {},
              "peak_mib": {}}
    for label, a, b, _ in RATIOS:
        if a in times and b in times:  # median of the per-round (paired) ratios
            result["ratios"][label] = statistics.median(x / y for x, y in zip(times[a], times[b]))
    if memory:
        for n in names:
            result["peak_mib"][n] = peak_mib(cases[n], device)
            print(f"  peak {n:18s} {result['peak_mib'][n]:8.1f} MiB", flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=None, help=f"FRAMESxHEIGHTxWIDTH,... (CPU default {CPU_CASES}; "
                                                  f"CUDA default {GPU_CASES})")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved timing rounds per case")
    ap.add_argument("--memory", choices=("none", "first", "all"), default="first",
                    help="which cases get the separate peak-memory pass")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tile", type=int, default=8, help="tile size in latents (diffusers: 8x this in px)")
    ap.add_argument("--overlap", type=int, default=2, help="tile overlap in latents")
    ap.add_argument("--weights", default=None, help="a real Wan 2.1 VAE file instead of random weights")
    ap.add_argument("--no-diffusers", action="store_true")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: this process's CPU time (steadier on a loaded machine; use with --threads 1)")
    args = ap.parse_args()
    if args.clock == "cpu" and device_is_cuda(args.device):
        ap.error("--clock cpu does not see GPU time")
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    official = (dict(load_vae(args.weights).model.state_dict()) if args.weights
                else random_vae_model(WAN21_VAE, 0).state_dict())
    specs = (args.cases or (GPU_CASES if device.type == "cuda" else CPU_CASES)).split(",")
    results = []
    for i, spec in enumerate(specs):
        frames, height, width = (int(v) for v in spec.lower().split("x"))
        lat = (1 + (frames - 1) // 4, height // 8, width // 8)
        z = torch.randn(1, 16, *lat, generator=torch.Generator().manual_seed(1)).to(device)
        print(f"# {frames} frames at {height}x{width} (latents {lat}), {args.dtype} on {device}, "
              f"{torch.get_num_threads()} threads, {args.clock} clock, tile {args.tile} overlap {args.overlap} latents",
              flush=True)
        cases = configurations(official, z, dtype, device, args.tile, args.overlap, not args.no_diffusers)
        memory = args.memory == "all" or (args.memory == "first" and i == 0)
        results.append(bench_case(spec, cases, args.rounds, device, memory, clock))
        del cases
        gc.collect()

    print(f"\n| case | configuration | {args.clock} time (s, median of {args.rounds}) | peak (MiB, output excluded) |")
    print("| --- | --- | --- | --- |")
    for r in results:
        for n, s in r["seconds"].items():
            peak = f"{r['peak_mib'][n]:.1f}" if n in r["peak_mib"] else "-"
            print(f"| {r['case']} | {n} | {s:.2f} | {peak} |")
    print("\n| case | ratio (median over rounds) | value | target |\n| --- | --- | --- | --- |")
    for r in results:
        for label, _, _, target in RATIOS:
            if label in r["ratios"]:
                goal = "" if target is None else f"<= {target}x"
                print(f"| {r['case']} | {label} | {r['ratios'][label]:.2f}x | {goal} |")
        p = r["peak_mib"]
        if "ours untiled" in p and "diffusers default" in p:
            print(f"| {r['case']} | peak: ours untiled / diffusers default | "
                  f"{p['ours untiled'] / p['diffusers default']:.2f}x | <= 0.55x |")
        if "ours tiled" in p and "diffusers tiled" in p:
            print(f"| {r['case']} | peak: ours tiled / diffusers tiled | "
                  f"{p['ours tiled'] / p['diffusers tiled']:.2f}x | |")


if __name__ == "__main__":
    main()
