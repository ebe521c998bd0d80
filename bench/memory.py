"""Block swap: peak memory and DiT step time against the number of swapped blocks (docs/memory.md section 1).

A DiT of the 1.3B model's widths (random weights, --layers blocks, default 30 = the real 1.3B) runs one
forward per repeat on a small latent; for each --swaps value (default 0, 10, 20, all) the swap is attached,
the forward timed (best of --repeats after one warm-up) and the peak memory of the compute device recorded:
CUDA allocator peak on a GPU, peak RSS on the CPU (where the CPU is both devices: the figures show what the
mechanism itself costs, as copies cannot save memory there). Also checks every output equals the unswapped
one. Not a test; run by hand:

    python bench/memory.py [--device cuda] [--layers 30] [--grid 1 8 8] [--prefetch 1] [--dtype bf16]
"""
from __future__ import annotations

import argparse
import time

import torch

from wan_core.config import DIT_PRESETS
from wan_core.dit.model import WanDiT
from wan_core.memory import enable_block_swap
from wan_core.memory.accounting import gib, model_bytes, reset_peak_rss
from wan_core.memory.streaming import peak_rss_bytes, rss_bytes

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def random_dit(layers: int, dtype: torch.dtype) -> WanDiT:
    """1.3B widths, ``layers`` blocks, random weights (N(0, 0.02)) built in place on the CPU."""
    cfg = DIT_PRESETS["wan2.1-t2v-1.3b"].replace(num_layers=layers, name=f"1.3b-widths-{layers}")
    with torch.device("meta"):
        model = WanDiT(cfg)
    model = model.to_empty(device="cpu").to(dtype)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    return model.eval()


def measure(model: WanDiT, n: int, prefetch: int, device: torch.device, inputs, repeats: int):
    """(best step seconds, peak bytes, weights on the device, output) with ``n`` blocks swapped."""
    swap = enable_block_swap(model, n, prefetch, device=device) if n else None
    if swap is None:
        model.to(device)
    x, t, ctx = (v.to(device) if isinstance(v, torch.Tensor) else [c.to(device) for c in v] for v in inputs)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    else:
        reset_peak_rss()
    start = torch.cuda.memory_allocated(device) if cuda else rss_bytes()
    best = float("inf")
    with torch.inference_mode():
        for i in range(repeats + 1):
            t0 = time.perf_counter()
            out = model(x, t, ctx)
            if cuda:
                torch.cuda.synchronize(device)
            if i:  # the first run warms up
                best = min(best, time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated(device) if cuda else peak_rss_bytes()
    resident = model_bytes(model, device) if cuda else model_bytes(model) - (swap.offload_bytes() if swap else 0)
    stats = swap.stats if swap else None
    if swap is not None:
        swap.remove(bring_back=False)
    model.to("cpu")
    return best, peak, start, resident, out.float().cpu(), stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--layers", type=int, default=30, help="blocks (30 = Wan 2.1 1.3B)")
    ap.add_argument("--grid", type=int, nargs=3, default=[1, 8, 8], metavar=("F", "H", "W"),
                    help="latent size (frames, height, width; even H/W); 21 60 104 = 81 frames at 832x480")
    ap.add_argument("--prefetch", type=int, default=1)
    ap.add_argument("--swaps", default="0,10,20,all", help="comma-separated block counts ('all' = every block)")
    ap.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    model = random_dit(args.layers, dtype)
    f, h, w = args.grid
    g = torch.Generator().manual_seed(1)
    inputs = (torch.randn(1, 16, f, h, w, generator=g), torch.tensor([500]), [torch.randn(64, 4096, generator=g)])
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (both devices)"
    kind = "CUDA allocated" if device.type == "cuda" else "RSS"
    block = model_bytes(model.blocks[0])
    print(f"# {name}, torch {torch.__version__}, {args.layers} blocks of 1.3B widths, {args.dtype}, "
          f"model {gib(model_bytes(model))} ({gib(block)} per block), latent {f}x{h}x{w}, prefetch "
          f"{args.prefetch}, {torch.get_num_threads()} threads")
    print(f"{'swapped':>8} {'step s':>8} {'vs 0':>6} {'peak ' + kind:>20} {'weights on device':>18} "
          f"{'max resident':>12} {'copied/step':>12} same")
    ref = base = None
    for spec in args.swaps.split(","):
        n = args.layers if spec.strip() == "all" else int(spec)
        best, peak, start, resident, out, stats = measure(model, n, args.prefetch, device, inputs, args.repeats)
        ref = out if ref is None else ref
        base = best if base is None else base
        same = "yes" if torch.equal(out, ref) else f"NO (max diff {(out - ref).abs().max().item():.2e})"
        res = f"{stats.max_resident}" if stats else "-"
        copied = gib(stats.bytes_in / (args.repeats + 1)) if stats else "-"
        peak_text = gib(peak) if device.type == "cuda" else f"{gib(peak)} (+{gib(peak - start)})"
        print(f"{n:>8} {best:>8.3f} {best / base:>5.2f}x {peak_text:>20} {gib(resident):>18} {res:>12} "
              f"{copied:>12} {same}")


if __name__ == "__main__":
    main()
