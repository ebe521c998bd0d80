"""Benchmark the attention and FP8 accelerations (not a test): skiparse, int8 attention, FP8 weights.

1. Self-attention, 12 heads x 128 (Wan 1.3B), bf16: dense SDPA vs skiparse k = 2, 4, 8 at 4k/16k/32k tokens.
   Target: skiparse k=4 >= 3.5x faster than dense at 32k tokens.
2. ``int8`` / ``int8_fp8`` (SageAttention algorithm in torch) vs SDPA, time and accuracy.
3. A 2-block DiT forward at 1.3B widths: dense, skiparse k=4, int8 attention, fp8 weights (upcast, scaled_mm).
4. Model memory: fp8 vs bf16 parameter bytes for the full 1.3B and 14B models (exact, built on meta) and
   a measured 2-block model; a GEMM at 1.3B widths in bf16 vs fp8 upcast vs fp8 scaled_mm.

    python bench/attention.py                       # everything (~10 min on 2 idle CPU cores)
    python bench/attention.py --tokens 4096 16384 --repeats 1 --skip dit
    python bench/attention.py --only memory
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from wan_core import load_dit
from wan_core.attention import int8_attention, skiparse_attention
from wan_core.config import DIT_PRESETS
from wan_core.dit.model import WanDiT
from wan_core.quant import FP8Linear, is_block_linear, parameter_bytes

SECTIONS = ("skiparse", "int8", "dit", "memory")


def interleaved(fns: dict, repeats: int, warmup: int = 1) -> dict:
    """Median wall time of each ``fns[name]()``, runs interleaved (a, b, c, a, b, c, ...) so that load from
    other processes on a shared machine hits every variant alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def qkv(tokens: int, heads: int = 12, dim: int = 128, dtype=torch.bfloat16, offset: float = 0.0):
    g = torch.Generator().manual_seed(tokens)
    q, k, v = (torch.randn(1, heads, tokens, dim, generator=g) for _ in range(3))
    k = k + offset * torch.randn(1, 1, 1, dim, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def bench_skiparse(args) -> None:
    print(f"\n## self-attention 12 heads x 128, {args.dtype}: dense SDPA vs skiparse (single skip; group is "
          f"the same cost)")
    dtype = getattr(torch, args.dtype)
    for tokens in args.tokens:
        q, k, v = qkv(tokens, dtype=dtype)
        small = tokens <= 8192
        fns = {"dense": lambda: F.scaled_dot_product_attention(q, k, v)}
        for sk in (2, 4, 8):
            fns[sk] = lambda sk=sk: skiparse_attention(q, k, v, sk, "single")
        t = interleaved(fns, args.repeats if small else args.large_repeats, 1 if small else 0)
        row = [f"{tokens:6d} tokens: dense {t['dense']:8.3f}s"]
        row += [f"k={sk} {t[sk]:7.3f}s ({t['dense'] / t[sk]:5.2f}x)" for sk in (2, 4, 8)]
        print("  ".join(row), flush=True)


def bench_int8(args) -> None:
    print("\n## int8 attention (SageAttention algorithm in torch) vs SDPA, 12 heads x 128, keys with a shared "
          "per-channel offset")
    for tokens in args.int8_tokens:
        q, k, v = qkv(tokens, dtype=torch.bfloat16, offset=4.0)
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
        fns = {"sdpa": lambda: F.scaled_dot_product_attention(q, k, v)}
        for pv in ("fp16", "fp8"):
            fns[pv] = lambda pv=pv: int8_attention(q, k, v, pv=pv)
        t = interleaved(fns, args.repeats if tokens <= 8192 else 1, 1 if tokens <= 8192 else 0)
        row = [f"{tokens:6d} tokens: sdpa bf16 {t['sdpa']:7.3f}s"]
        for pv in ("fp16", "fp8"):
            a, b = int8_attention(q, k, v, pv=pv).double().flatten(), ref.double().flatten()
            cos = (a @ b / (a.norm() * b.norm())).item()
            rel = ((a - b).abs().sum() / b.abs().sum()).item()
            row.append(f"int8 pv={pv} {t[pv]:7.3f}s (sdpa/int8 {t['sdpa'] / t[pv]:4.2f}, cos {cos:.5f}, "
                       f"rel-L1 {rel:.2e})")
        print("  ".join(row), flush=True)


def random_state(cfg, seed: int = 0) -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        model = WanDiT(cfg)
    g = torch.Generator().manual_seed(seed)
    return {k: (torch.randn(v.shape, generator=g) * (v[0].numel() ** -0.5 if v.dim() > 1 else 0.1))
            .to(torch.bfloat16) for k, v in model.state_dict().items()}


def bench_dit(args) -> None:
    cfg = DIT_PRESETS["wan2.1-t2v-1.3b"].replace(num_layers=2)
    f, h, w = args.dit_grid
    tokens = f * h * w
    print(f"\n## 2-block DiT forward at 1.3B widths, bf16, {tokens} tokens (grid {f}x{h}x{w}), 512 context rows")
    sd = random_state(cfg)
    x = torch.randn(1, 16, f, 2 * h, 2 * w)
    t = torch.tensor([500])
    ctx = [torch.randn(20, cfg.text_dim)]
    variants = {
        "dense sdpa": {},
        "skiparse k=4 (single, group)": {"skiparse": "custom", "skiparse_ks": (4, 4)},
        "int8 attention": {"attention": "int8"},
        "fp8 weights, upcast": {"weights": "fp8_scaled"},
        "fp8 weights, scaled_mm": {"weights": "fp8_scaled", "gemm": "scaled_mm"},
        "skiparse k=4 + fp8 scaled_mm": {"skiparse": "custom", "skiparse_ks": (4, 4), "weights": "fp8_scaled",
                                         "gemm": "scaled_mm"},
    }
    models = {name: load_dit(sd, dtype=torch.bfloat16, config=cfg, **kw) for name, kw in variants.items()}
    with torch.inference_mode():
        outs = {name: m(x, t, ctx) for name, m in models.items()}  # also the warm-up
        times = interleaved({name: (lambda m=m: m(x, t, ctx)) for name, m in models.items()},
                            args.dit_repeats, 0)
    ref_out = outs["dense sdpa"]
    for name in variants:
        rel = ((outs[name] - ref_out).norm() / ref_out.norm()).item()
        print(f"  {name:32s} {times[name]:7.2f}s  ({times['dense sdpa'] / times[name]:4.2f}x)  "
              f"output rel. diff vs dense bf16 {rel:.2e}", flush=True)


def model_bytes(cfg) -> tuple[int, int]:
    """(bf16 bytes, fp8 bytes) of the full model's parameters, computed on the meta device."""
    with torch.device("meta"):
        model = WanDiT(cfg)
    bf16 = fp8 = 0
    for name, p in model.named_parameters():
        bf16 += p.numel() * 2
        layer = name.rpartition(".")[0]
        fp8 += p.numel() + 4 if name.endswith(".weight") and is_block_linear(layer) else p.numel() * 2
    return bf16, fp8


def bench_memory(args) -> None:
    print("\n## parameter memory, bf16 vs fp8 (block Linear layers in fp8 with a per-tensor scale)")
    for preset in ("wan2.1-t2v-1.3b", "wan2.1-t2v-14b"):
        bf16, fp8 = model_bytes(DIT_PRESETS[preset])
        print(f"  {preset:16s} bf16 {bf16 / 2**30:6.2f} GiB  fp8 {fp8 / 2**30:6.2f} GiB  ({fp8 / bf16:.2f}x)")
    cfg = DIT_PRESETS["wan2.1-t2v-1.3b"].replace(num_layers=2)
    sd = random_state(cfg)
    b = parameter_bytes(load_dit(sd, dtype=torch.bfloat16, config=cfg))
    q = parameter_bytes(load_dit(sd, config=cfg, weights="fp8_scaled"))
    print(f"  measured, 2 blocks at 1.3B widths: bf16 {b / 2**20:.1f} MiB, fp8 {q / 2**20:.1f} MiB ({q / b:.2f}x)")

    tokens = 4096
    print(f"\n## one Linear at 1.3B widths, {tokens} tokens: bf16 vs fp8 upcast vs fp8 scaled_mm")
    for n_in, n_out in ((1536, 1536), (1536, 8960), (8960, 1536)):
        lin = torch.nn.Linear(n_in, n_out).to(torch.bfloat16)
        x = torch.randn(tokens, n_in, dtype=torch.bfloat16)
        fns = {"bf16": lambda: lin(x)}
        for gemm in ("upcast", "scaled_mm"):
            fns[gemm] = lambda fl=FP8Linear.from_linear(lin, gemm=gemm): fl(x)
        t = interleaved(fns, args.repeats)
        row = [f"  {n_in:5d}->{n_out:5d}: bf16 {t['bf16'] * 1e3:7.1f} ms"]
        row += [f"fp8 {g} {t[g] * 1e3:7.1f} ms ({t['bf16'] / t[g]:4.2f}x)" for g in ("upcast", "scaled_mm")]
        print("  ".join(row), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384, 32768])
    ap.add_argument("--int8-tokens", type=int, nargs="+", default=[4096])
    ap.add_argument("--dit-grid", type=int, nargs=3, default=[3, 30, 52], metavar=("F", "H", "W"),
                    help="patch grid of the DiT step (default 3x30x52 = 4680 tokens, 9 frames at 480p)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per variant up to 8k tokens")
    ap.add_argument("--large-repeats", type=int, default=1, help="runs per variant above 8k tokens")
    ap.add_argument("--dit-repeats", type=int, default=1)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float16"])
    ap.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    ap.add_argument("--skip", nargs="+", choices=SECTIONS, default=[])
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for section in SECTIONS:
        if section in args.only and section not in args.skip:
            globals()[f"bench_{section}"](args)


if __name__ == "__main__":
    main()
