"""Benchmark: WF-VAE (Open-Sora Plan; WF-VAE-L 4x8x8 and the v1.5 8x8x8) vs our Wan 2.1 VAE: encode and decode
time and peak memory at the same video size, and the latent each makes (docs/wfvae.md section 6).

Every VAE at its released widths with random weights (WF-VAE-L: base 192, latent 16; v1.5: base 160, latent 32;
Wan 2.1: base 96, latent 16), float32, streamed through time, untiled (``tiling="off"``). Times are interleaved
rounds (each round runs every VAE once, the order rotating) and the median per VAE is printed, with its ratio to
the Wan 2.1 VAE; ``--clock cpu --threads 1`` (the default) times this process's CPU time, which other
processes' load barely moves. Peak memory is one profiled run per VAE and direction (the torch profiler's replay
of every CPU allocation, the returned tensor excluded; weights and input exist before the call).

    python bench/wfvae.py                                  # 17 frames of 64x64
    python bench/wfvae.py --frames 33 --size 128 --rounds 3
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wan_core.demo import random_vae_model  # noqa: E402
from wan_core.vae import WAN21_VAE, WanVAE  # noqa: E402
from wan_core.wfvae.autoencoder import WFVAE  # noqa: E402
from wan_core.wfvae.config import OSP15_WFVAE, WFVAE_L16  # noqa: E402
from wan_core.wfvae.model import build_model  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_vae", ROOT / "bench" / "vae.py")
_bench_vae = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench_vae)
cpu_peak = _bench_vae.cpu_peak  # the torch profiler's allocation replay (bench/vae.py)


def build_vaes(seed: int = 0) -> dict:
    torch.manual_seed(seed)
    out = {"Wan 2.1 VAE": WanVAE(random_vae_model(WAN21_VAE, seed), source="<random>")}
    for name, cfg in (("WF-VAE-L 4x8x8", WFVAE_L16), ("WF-VAE v1.5 8x8x8", OSP15_WFVAE)):
        out[name] = WFVAE(build_model(cfg).eval().requires_grad_(False), source="<random>")
    return out


def params(vae) -> float:
    return sum(p.numel() for p in vae.model.parameters()) / 1e6


def run_pair(vae, video: torch.Tensor, clock) -> tuple[float, float, torch.Tensor]:
    """(encode seconds, decode seconds, latent)."""
    t0 = clock()
    z = vae.encode(video, tiling="off")
    t1 = clock()
    vae.decode(z, tiling="off")
    return t1 - t0, clock() - t1, z


def peaks(vae, video: torch.Tensor, z: torch.Tensor) -> tuple[float, float]:
    """Peak MiB of encode and decode, the returned tensor excluded."""
    out, enc = cpu_peak(lambda: vae.encode(video, tiling="off"))
    enc -= out.numel() * out.element_size()
    out, dec = cpu_peak(lambda: vae.decode(z, tiling="off"))
    dec -= out.numel() * out.element_size()
    return enc / 2**20, dec / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=17, help="video frames (1 + 8k serves both structures)")
    ap.add_argument("--size", type=int, default=64, help="height = width in pixels (multiple of 8)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--memory", choices=("cpu", "none"), default="cpu")
    args = ap.parse_args()
    if (args.frames - 1) % 8 or args.size % 8:
        ap.error("--frames must be 1 + 8k and --size a multiple of 8 (both structures take them)")
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    video = torch.rand(1, 3, args.frames, args.size, args.size, generator=torch.Generator().manual_seed(1)) * 2 - 1
    vaes = build_vaes()
    times: dict[str, list[tuple[float, float]]] = {n: [] for n in vaes}
    latents = {}
    names = list(vaes)
    with torch.no_grad():
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                enc, dec, latents[name] = run_pair(vaes[name], video, clock)
                times[name].append((enc, dec))
                print(f"round {r + 1} {name}: encode {enc:.2f} s, decode {dec:.2f} s", file=sys.stderr, flush=True)
    report(args, vaes, times, latents, video)
    return 0


def report(args, vaes, times, latents, video) -> None:
    base = "Wan 2.1 VAE"
    med = {n: tuple(statistics.median(t[i] for t in times[n]) for i in (0, 1)) for n in vaes}
    mem = {n: peaks(vaes[n], video, latents[n]) for n in vaes} if args.memory == "cpu" else {}
    print(f"{args.frames} frames of {args.size}x{args.size}, float32, {args.threads} thread(s), {args.clock} clock, "
          f"median of {args.rounds} round(s)")
    print("| VAE | params (M) | latent | values | encode s (x Wan) | decode s (x Wan) | encode peak MiB (x Wan) "
          "| decode peak MiB (x Wan) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in vaes:
        z = latents[n]
        e, d = med[n]
        row = [n, f"{params(vaes[n]):.0f}", "x".join(str(s) for s in z.shape[1:]), f"{z.numel()}",
               f"{e:.2f} ({e / med[base][0]:.2f})", f"{d:.2f} ({d / med[base][1]:.2f})"]
        if mem:
            row += [f"{mem[n][i]:.0f} ({mem[n][i] / mem[base][i]:.2f})" for i in (0, 1)]
        print("| " + " | ".join(row) + " |")
    l4, l8 = latents["WF-VAE-L 4x8x8"], latents["WF-VAE v1.5 8x8x8"]
    print(f"latent frames 8x8x8 / 4x8x8: {l8.shape[2]} / {l4.shape[2]} = {l8.shape[2] / l4.shape[2]:.2f} "
          f"(DiT tokens per 2x2 patch the same ratio); values {l8.numel()} / {l4.numel()} = "
          f"{l8.numel() / l4.numel():.2f} (32 vs 16 channels)")


if __name__ == "__main__":
    sys.exit(main())
