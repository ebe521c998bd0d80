"""One prepared script for a lent GPU (issue 5's device checks; not a test). Prints one line per check.

1. attention at --tokens (12 heads x 128, bf16): sdpa vs sage (if importable) vs int8, time and accuracy
   (cosine, rel-L1) against fp32 SDPA;
2. FP8 GEMM at 1.3B widths (the FFN and q/k/v/o shapes): bf16 linear vs FP8Linear upcast vs scaled_mm;
3. a 2-block 1.3B-width DiT forward: bf16 sdpa vs fp8_scaled + scaled_mm + sage;
4. Wan 2.1 VAE decode at --vae (default 17 frames at 480x832, bf16, random weights): ours untiled / tiled
   (32 latents, overlap 8) vs diffusers default / enable_tiling, time and peak memory (bench/vae.py);
5. block swap (docs/memory.md section 1) on an 8-block 1.3B-width DiT at --swap-grid, bf16 and fp8: 0 / 4 / 8
   blocks swapped with prefetch 1 and 2 (side CUDA stream): output identical to no swap, step time, peak
   memory, most swapped blocks resident; with --compile also the blocks compiled (inductor) vs eager;
6. GGUF weights (bench/gguf_weights.py, docs/gguf.md) at --gguf-grid: resident bytes vs file, a 2-block
   1.3B-width forward Q8_0 / Q4_K / fp8_scaled / bf16 (dequantised on the GPU, per layer), and a 5120x5120 Q4_K
   dequantise vs its matmul at --tokens rows (with --compile also torch.compile'd).
7. with --native-cp N (2+ GPUs, --comfy pointing at a ComfyUI checkout): ComfyUI's own WanModel at 1.3B width
   (--native-blocks blocks, random weights) through comfy.sample.sample (UniPC, cfg 5, 3 steps) at --dit-grid,
   plain vs WanCore Native Context Parallel on N GPUs (Ulysses N when it divides the 12 heads, else Ring):
   relative error of the latent (expected <= 1e-2 in bf16, <= 1e-5 in fp32) and the time ratio
   (docs/parallel.md section 12). On CPU it runs with WANCORE_CPU_PROCESSES=N (checks the script only).

    python bench/gpu_check.py [--tokens 32760] [--repeats 5] [--device cuda]
Runs on CPU too (small --tokens, e.g. --vae 5x64x64) so the script itself is checked where no GPU is lent.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from wan_core.attention.dispatch import get_backend
from wan_core.config import DIT_PRESETS
from wan_core.dit.model import WanDiT
from wan_core.quant.fp8 import FP8Linear


def timed(fn, repeats: int, device: torch.device) -> float:
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def accuracy(out: torch.Tensor, ref: torch.Tensor) -> str:
    a, b = out.float().flatten(), ref.float().flatten()
    cos = F.cosine_similarity(a, b, dim=0).item()
    return f"cos {cos:.5f} rel-L1 {((a - b).abs().sum() / b.abs().sum()).item():.2e}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, default=32760)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dit-grid", type=int, nargs=3, default=[21, 30, 52], metavar=("F", "H", "W"),
                    help="latent patch grid of the DiT check (default: 81 frames at 832x480)")
    ap.add_argument("--vae", default="17x480x832", help="VAE decode case FRAMESxHEIGHTxWIDTH ('none': skip)")
    ap.add_argument("--swap-grid", type=int, nargs=3, default=[21, 30, 52], metavar=("F", "H", "W"),
                    help="latent patch grid of the block-swap check ('0 0 0': skip)")
    ap.add_argument("--compile", action="store_true", help="also time compiled blocks in the block-swap check")
    ap.add_argument("--gguf-grid", type=int, nargs=3, default=[21, 30, 52], metavar=("F", "H", "W"),
                    help="latent patch grid of the GGUF check ('0 0 0': skip)")
    ap.add_argument("--native-cp", type=int, default=0, help="check 7 on this many GPUs (0: skip)")
    ap.add_argument("--native-blocks", type=int, default=4)
    ap.add_argument("--comfy", default="", help="ComfyUI checkout (check 7)")
    args = ap.parse_args()
    if args.native_cp:
        native_cp_check(args)
        return
    dev = torch.device(args.device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(f"# {name}, torch {torch.__version__}")

    g = torch.Generator().manual_seed(0)
    shape = (1, 12, args.tokens, 128)
    q, k, v = (torch.randn(shape, generator=g).to(dev, torch.bfloat16) for _ in range(3))
    k = k + torch.randn(1, 12, 1, 128, generator=g).to(dev, torch.bfloat16) * 4  # DiT-like shared key offset
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    for backend in ("sdpa", "sage", "int8"):
        fn = get_backend(backend).fn
        out = fn(q, k, v)
        t = timed(lambda: fn(q, k, v), args.repeats, dev)
        print(f"attention {backend:5s} {args.tokens} tokens: {t * 1e3:8.1f} ms  {accuracy(out, ref)}")

    for n, kk in ((8960, 1536), (1536, 8960), (1536, 1536)):
        x = torch.randn(args.tokens, kk, generator=g).to(dev, torch.bfloat16)
        lin = torch.nn.Linear(kk, n).to(dev, torch.bfloat16)
        ref = lin(x)
        for gemm in ("upcast", "scaled_mm"):
            fp8 = FP8Linear.from_linear(lin, gemm=gemm).to(dev)
            out = fp8(x)
            t = timed(lambda: fp8(x), args.repeats, dev)
            print(f"gemm [{args.tokens}x{kk}]x[{kk}x{n}] fp8 {gemm:9s}: {t * 1e3:8.1f} ms  {accuracy(out, ref)}")
        t = timed(lambda: lin(x), args.repeats, dev)
        print(f"gemm [{args.tokens}x{kk}]x[{kk}x{n}] bf16          : {t * 1e3:8.1f} ms")

    from wan_core import load_dit

    cfg = DIT_PRESETS["wan2.1-t2v-1.3b"].replace(num_layers=2)
    dense = WanDiT(cfg).to(torch.bfloat16)
    sd = {k: v.contiguous() for k, v in dense.state_dict().items()}
    f, h, w = args.dit_grid
    x = torch.randn(1, 16, f, 2 * h, 2 * w, generator=g).to(dev)
    ctx = [torch.randn(20, 4096, generator=g).to(dev)]
    t5 = torch.tensor([500], device=dev)
    base = load_dit(sd, config=cfg, device=dev)
    fast = load_dit(sd, config=cfg, device=dev, dtype=torch.bfloat16, attention="sage", weights="fp8_scaled",
                    gemm="scaled_mm")
    with torch.inference_mode():
        ref = base(x, t5, ctx)
        out = fast(x, t5, ctx)
        tb = timed(lambda: base(x, t5, ctx), max(1, args.repeats // 2), dev)
        tf = timed(lambda: fast(x, t5, ctx), max(1, args.repeats // 2), dev)
    print(f"DiT 2 blocks {f * h * w} tokens: bf16 sdpa {tb:.3f} s, fp8+scaled_mm+sage {tf:.3f} s "
          f"({tb / tf:.2f}x)  {accuracy(out, ref)}")
    if args.vae != "none":
        vae_check(args.vae, dev, max(2, args.repeats // 2))
    if all(args.swap_grid):
        swap_check(args.swap_grid, dev, max(1, args.repeats // 2), args.compile)
    if all(args.gguf_grid):
        gguf_check(args.gguf_grid, args.tokens, dev, max(1, args.repeats // 2), args.compile)


def gguf_check(grid, tokens: int, dev: torch.device, repeats: int, compile_too: bool) -> None:
    """6. GGUF weights: bench/gguf_weights.py's reports at GPU sizes, bf16 compute."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("bench_gguf", Path(__file__).with_name("gguf_weights.py"))
    bench_gguf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_gguf)
    bench_gguf.run(dev, torch.bfloat16, 2, grid, tokens, repeats, compile_too)


def swap_check(grid, dev: torch.device, repeats: int, compile_too: bool) -> None:
    """5. block swap: identical output, time and peak memory against blocks swapped (and compiled blocks)."""
    from wan_core import load_dit
    from wan_core.memory import compile_blocks, enable_block_swap

    g = torch.Generator().manual_seed(2)
    cfg = DIT_PRESETS["wan2.1-t2v-1.3b"].replace(num_layers=8)
    sd = {k: (v.normal_(generator=g) * 0.02).to(torch.bfloat16) for k, v in WanDiT(cfg).state_dict().items()}
    f, h, w = grid
    x = torch.randn(1, 16, f, 2 * h, 2 * w, generator=g).to(dev)
    ctx = [torch.randn(20, 4096, generator=g).to(dev)]
    t5 = torch.tensor([500], device=dev)
    for weights in (None, "fp8_scaled"):
        ref = base_t = None
        cases = [(0, 0, False), (4, 1, False), (8, 1, False), (8, 2, False)] + ([(0, 0, True), (8, 1, True)]
                                                                               if compile_too else [])
        for n, prefetch, compiled in cases:
            model = load_dit(sd, config=cfg, dtype=torch.bfloat16, weights=weights, device="cpu")
            swap = enable_block_swap(model, n, prefetch, device=dev) if n else None
            if swap is None:
                model.to(dev)
            if compiled:
                compile_blocks(model, device=dev)
            if dev.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(dev)
            with torch.inference_mode():
                out = model(x, t5, ctx)
                t = timed(lambda m=model: m(x, t5, ctx), repeats, dev)
            peak = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else float("nan")
            ref = out if ref is None else ref
            base_t = t if base_t is None else base_t
            diff = (out.float() - ref.float()).abs().max().item()
            resident = swap.stats.max_resident if swap else "-"
            same = "" if diff or compiled else " (identical)"
            print(f"block swap {weights or 'bf16'} {f * h * w} tokens: swapped {n}/8 prefetch {prefetch}"
                  f"{' compiled' if compiled else ''}: {t:.3f} s ({t / base_t:.2f}x), peak {peak:.2f} GiB, "
                  f"max resident {resident}, max diff vs no swap {diff:.1e}{same}")


def vae_check(case: str, dev: torch.device, rounds: int) -> None:
    """4. ours vs diffusers VAE decode (bench/vae.py's configurations, interleaved rounds, then peaks)."""
    import importlib.util
    from pathlib import Path

    from wan_core.demo import random_vae_model
    from wan_core.vae import WAN21_VAE

    spec = importlib.util.spec_from_file_location("bench_vae", Path(__file__).with_name("vae.py"))
    bench_vae = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_vae)
    frames, height, width = (int(v) for v in case.split("x"))
    z = torch.randn(1, 16, 1 + (frames - 1) // 4, height // 8, width // 8, generator=torch.Generator().manual_seed(1))
    cases = bench_vae.configurations(random_vae_model(WAN21_VAE, 0).state_dict(), z.to(dev), torch.bfloat16, dev,
                                     32, 8, True)
    r = bench_vae.bench_case(case, cases, rounds, dev, True, time.perf_counter)
    times = ", ".join(f"{n} {s:.2f} s / {r['peak_mib'][n]:.0f} MiB" for n, s in r["seconds"].items())
    ratios = ", ".join(f"{k} {v:.2f}x" for k, v in r["ratios"].items())
    peak = r["peak_mib"]["ours untiled"] / r["peak_mib"]["diffusers default"]
    print(f"VAE decode {case} bf16: {times}; {ratios}; peak ours untiled / diffusers default {peak:.2f}x")



def native_cp_check(args) -> None:
    """7. WanCore Native Context Parallel on ComfyUI's own WanModel vs the plain native run (see module doc)."""
    import os
    import sys

    sys.path.append(args.comfy)  # after this repo: its nodes package, not ComfyUI's nodes.py
    argv, sys.argv = sys.argv, [sys.argv[0]] + (["--cpu"] if args.device == "cpu" else [])
    import comfy.options

    comfy.options.enable_args_parsing()
    import comfy.sample
    import comfy.sd

    sys.argv = argv
    os.environ.setdefault("WANCORE_CPU_PROCESSES", str(args.native_cp))  # CPU only: the script check
    from nodes import native
    from wan_core.parallel.pool import shutdown_pools

    cfg = DIT_PRESETS["wan2.1-t2v-1.3b"].replace(num_layers=args.native_blocks)
    sd = {k: v.contiguous() for k, v in WanDiT(cfg).state_dict().items()}
    model = comfy.sd.load_diffusion_model_state_dict(sd)
    f, h, w = args.dit_grid
    g = torch.Generator().manual_seed(0)
    pos = [[torch.randn(1, 512, 4096, generator=g) * 0.1, {}]]
    neg = [[torch.zeros(1, 512, 4096), {}]]
    latent = torch.zeros(1, 16, f, 2 * h, 2 * w)
    noise = torch.randn(latent.shape, generator=g)

    def run(m):
        t = time.perf_counter()
        out = comfy.sample.sample(m, noise, 3, 5.0, "uni_pc", "simple", pos, neg, latent, denoise=1.0,
                                  disable_pbar=True, seed=0)
        return out.float(), time.perf_counter() - t

    n = args.native_cp
    u = n if cfg.num_heads % n == 0 else 1
    par = native.patch_parallel(model, n, u, n // u, False)[0]
    run(model)  # loads the model
    ref, t1 = run(model)
    run(par)  # starts the workers, sends the weights
    out, tn = run(par)
    err = ((out - ref).abs().max() / ref.abs().max()).item()
    print(f"native CP ulysses {u} x ring {n // u} on {n} devices, {f * h * w} tokens, {args.native_blocks} blocks: "
          f"plain {t1:.2f} s, parallel {tn:.2f} s ({t1 / tn:.2f}x), rel max error {err:.2e}")
    shutdown_pools()


if __name__ == "__main__":
    main()
