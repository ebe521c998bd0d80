"""Long videos: sampling time and peak memory at 1x, 4x and 8x the context window's length, with context windows
and, for contrast, the plain sampler on the whole video (docs/long_video.md, "Memory and time in length").

A random DiT (default: 2 blocks of width 256, 4 heads, FFN 1024; no text encoder, random text embeddings,
guidance 1 so one DiT forward per window and step) samples a video of 1x, 4x and 8x the window's latent frames.
Every case runs in a fresh process after a one-frame warm-up and reports:

* time: CPU seconds of the process (best of --repeats, 1 thread; on a shared machine wall time says more about
  the neighbours than about the sampler), and per DiT forward;
* peak tensors: the peak of the tensor bytes alive during sampling, counted at the ops that create them until
  their last Python reference goes (weights and inputs made before are left out): activations, the latent, the
  solver's and the fuse's buffers, cache state. Exact and repeatable; taken in a separate run, since counting
  slows every op;
* peak RSS above the RSS before sampling: what the OS sees, within a few MiB of allocator noise.

With windows, time should grow with the number of windows and the peak stay flat (the DiT only ever sees one
window); only the latent-sized buffers grow. The plain sampler's peak grows with the tokens. Not a test; run by
hand:

    python bench/long_video.py [--size 128] [--window 17] [--overlap 8] [--multiples 1,4,8] [--steps 2]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import time
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from wan_core.config import DiTConfig
from wan_core.dit.model import WanDiT
from wan_core.memory.accounting import reset_peak_rss
from wan_core.memory.streaming import peak_rss_bytes, rss_bytes
from wan_core.pipeline import GenerationConfig, WanPipeline
from wan_core.sampling.context_windows import ContextWindows, latent_length

TEXT_DIM = 256


def random_dit(dim: int, layers: int) -> WanDiT:
    cfg = DiTConfig(dim=dim, ffn_dim=4 * dim, num_heads=max(dim // 64, 1), num_layers=layers, text_dim=TEXT_DIM,
                    name=f"bench-long-video-{dim}x{layers}")
    torch.manual_seed(0)
    model = WanDiT(cfg).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (p[0].numel() ** -0.5 if p.dim() > 1 else 0.02))
    return model


class LiveTensorBytes(TorchDispatchMode):
    """Peak bytes of the tensor storages that ops create while the mode is on. A storage counts from the first
    op output that holds it until the last such Python tensor is gone; storages that existed before (``known``:
    weights, inputs) are never counted, nor are their views."""

    def __init__(self, known: list[torch.Tensor]):
        super().__init__()
        self.known = {t.untyped_storage().data_ptr() for t in known}
        self.refs: dict[int, list[int]] = {}  # storage address -> [live tensors, bytes]
        self.live = self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out

    def _track(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key == 0 or key in self.known:
            return
        entry = self.refs.get(key)
        if entry is None:
            entry = self.refs[key] = [0, storage.nbytes()]
            self.live += entry[1]
            self.peak = max(self.peak, self.live)
        entry[0] += 1
        weakref.finalize(t, self._release, key)

    def _release(self, key: int) -> None:
        entry = self.refs[key]
        entry[0] -= 1
        if entry[0] == 0:
            self.live -= entry[1]
            del self.refs[key]


def run_case(args: argparse.Namespace, frames: int, windowed: bool) -> dict:
    """One sampling run in this (fresh) process: seconds, peak RSS above the start, windows per step."""
    torch.set_num_threads(args.threads)
    pipe = WanPipeline(dit=random_dit(args.dim, args.layers))
    cond = [torch.randn(64, TEXT_DIM, generator=torch.Generator().manual_seed(2))]
    context = ContextWindows.from_frames(args.window, args.overlap) if windowed else None
    cfg = GenerationConfig(width=args.size, height=args.size, frames=frames, steps=args.steps, guidance=1.0, seed=0,
                           context=context)
    with torch.inference_mode():
        pipe.sample_latents(cond, None, cfg.replace(frames=1, steps=1, context=None), cache=args.cache)  # warm-up
        reset_peak_rss()
        start = rss_bytes()
        seconds = float("inf")
        for _ in range(args.repeats):  # CPU time, the best of a few: a shared machine inflates wall time
            t0 = time.process_time()
            latents = pipe.sample_latents(cond, None, cfg, cache=args.cache)
            seconds = min(seconds, time.process_time() - t0)
        peak = peak_rss_bytes() - start
        known = [*pipe.dit.parameters(), *pipe.dit.buffers(), *cond]
        with LiveTensorBytes(known) as counter:
            pipe.sample_latents(cond, None, cfg, cache=args.cache)
        del latents
    n = latent_length(frames)
    count = sum(len(context.windows(n, s)) for s in range(args.steps)) // args.steps if context else 1
    latent = 16 * n * (args.size // 8) ** 2 * 4
    return {"seconds": seconds, "peak": peak, "tensors": counter.peak, "latent": latent, "windows": count}


def _child(args, frames, windowed, queue) -> None:
    queue.put(run_case(args, frames, windowed))


def in_fresh_process(args: argparse.Namespace, frames: int, windowed: bool) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(args, frames, windowed, queue))
    proc.start()
    try:
        return queue.get(timeout=args.timeout)
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=128, help="width = height in pixels (latent size / 8)")
    ap.add_argument("--window", type=int, default=17, help="context window in real frames (4n+1)")
    ap.add_argument("--overlap", type=int, default=8, help="window overlap in real frames")
    ap.add_argument("--multiples", default="1,4,8", help="video lengths in window lengths (latent frames)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: CPU time = compute, no spinning)")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per case (best kept)")
    ap.add_argument("--cache", default="exact", help="cache preset (exact: the default, text K/V kept per prompt)")
    ap.add_argument("--no-plain", action="store_true", help="skip the plain sampler on the whole video")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per case")
    args = ap.parse_args()
    length = latent_length(args.window)
    tokens = (args.size // 16) ** 2  # latent / 8, patch 2 x 2
    print(f"# CPU, torch {torch.__version__}, {args.threads} threads; random DiT width {args.dim} x {args.layers} "
          f"blocks; {args.size}x{args.size} ({tokens} tokens a latent frame); window {args.window} frames "
          f"({length} latent), overlap {args.overlap}; {args.steps} steps, guidance 1, cache {args.cache}")
    print(f"{'length':>7} {'frames':>6} {'sampler':>8} {'windows':>7} {'DiT tokens':>10} {'CPU s':>8} "
          f"{'time x':>7} {'s/forward':>9} {'peak tensors':>12} {'x':>6} {'peak RSS':>10} {'x':>6} {'latent':>9}")
    base: dict[str, dict] = {}
    for multiple in (int(m) for m in args.multiples.split(",")):
        frames = 4 * (length * multiple - 1) + 1
        for windowed in (True, False):
            if not windowed and args.no_plain:
                continue
            name = "windows" if windowed else "plain"
            r = in_fresh_process(args, frames, windowed)
            ref = base.setdefault(name, r)
            seen = (length if windowed and multiple > 1 else length * multiple) * tokens
            per = r["seconds"] / (r["windows"] * args.steps)
            print(f"{multiple:>6}x {frames:>6} {name:>8} {r['windows']:>7} {seen:>10} {r['seconds']:>8.2f} "
                  f"{r['seconds'] / ref['seconds']:>6.2f}x {per:>9.3f} {mib(r['tensors']):>12} "
                  f"{r['tensors'] / ref['tensors']:>5.2f}x {mib(r['peak']):>10} "
                  f"{r['peak'] / max(ref['peak'], 1):>5.2f}x "
                  f"{mib(r['latent']):>9}", flush=True)


if __name__ == "__main__":
    main()
