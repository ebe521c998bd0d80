"""Benchmark: our DiT forward vs diffusers' WanTransformer3DModel on identical weights (not a test).

1.3B widths with 2 blocks, ~1170 and ~4700 tokens, fp32 and bf16, runs interleaved (ours, theirs, ours, ...),
median time ratio printed; plus the achieved FLOP/s of our forward against this machine's measured matmul
throughput in the same dtype. ``--compile`` adds a column for our blocks compiled (``wan_core.memory.
compile_blocks``, inductor; the compile happens in the warm-up run; issue 14's target is <= 0.85x of diffusers'
eager forward on a GPU). ``--device cuda`` runs it on a GPU.

    python bench/dit_forward.py [--repeats 5] [--blocks 2] [--compile] [--device cuda]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from wan_core import load_dit
from wan_core.config import DIT_PRESETS
from wan_core.dit.keys import diffusers_to_official


def forward_flops(cfg, tokens: int, blocks: int, ctx: int = 512) -> float:
    d, f, L = cfg.dim, cfg.ffn_dim, tokens
    per_block = (
        2 * L * d * d * 4          # self-attn q, k, v, o
        + 2 * L * L * d * 2        # self-attn QK^T and PV
        + 2 * L * d * d * 2        # cross-attn q, o
        + 2 * ctx * d * d * 2      # cross-attn k, v on the context
        + 2 * L * ctx * d * 2      # cross-attn QK^T and PV
        + 2 * L * d * f * 2        # FFN
    )
    embed = 2 * ctx * (cfg.text_dim * d + d * d) + 2 * L * 64 * d + 2 * L * d * 64
    return blocks * per_block + embed


def matmul_peak(dtype: torch.dtype, n: int = 1536, m: int = 4096, repeats: int = 5) -> float:
    """Best FLOP/s of a plain [m, n] x [n, n] matmul (the shape of a DiT linear layer)."""
    a = torch.randn(m, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    for _ in range(2):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(4):
            a @ b
        best = min(best, (time.perf_counter() - t0) / 4)
    return 2 * m * n * n / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--compile", action="store_true", help="add our forward with the blocks compiled")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    dev = torch.device(args.device)

    from diffusers import WanTransformer3DModel

    cfg = DIT_PRESETS["wan2.1-t2v-1.3b"].replace(num_layers=args.blocks)
    torch.manual_seed(0)
    ref = WanTransformer3DModel(
        patch_size=cfg.patch_size, num_attention_heads=cfg.num_heads, attention_head_dim=cfg.head_dim,
        in_channels=16, out_channels=16, text_dim=cfg.text_dim, freq_dim=cfg.freq_dim, ffn_dim=cfg.ffn_dim,
        num_layers=cfg.num_layers, cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6,
    ).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0, 0.02)
    official = {diffusers_to_official(k): v.contiguous() for k, v in ref.state_dict().items()}
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, 1.3B widths x {args.blocks} blocks")
    for dtype in (torch.float32, torch.bfloat16):
        ours = load_dit(official, dtype=dtype, config=cfg, device=dev)
        theirs = ref.to(dev, dtype)
        compiled = None
        if args.compile:
            from wan_core.memory import compile_blocks

            compiled = load_dit(official, dtype=dtype, config=cfg, device=dev)
            if compile_blocks(compiled, device=dev):  # unavailable: warned, left out
                compiled = None
        peak = matmul_peak(dtype) if dev.type == "cpu" else float("nan")
        for latent in ((5, 36, 26), (5, 72, 52)):
            f, h, w = latent
            tokens = f * (h // 2) * (w // 2)
            x = torch.randn(1, 16, f, h, w).to(dev)
            t = torch.tensor([500], device=dev)
            ctx = torch.zeros(1, 512, cfg.text_dim)
            ctx[:, :20] = torch.randn(1, 20, cfg.text_dim)
            ctx = ctx.to(dev)
            runs = {
                "ours": lambda: ours(x, t, ctx),
                "diffusers": lambda: theirs(hidden_states=x.to(dtype), timestep=t,
                                            encoder_hidden_states=ctx.to(dtype), return_dict=False),
            }
            if compiled is not None:
                runs["compiled"] = lambda: compiled(x, t, ctx)
            times: dict[str, list[float]] = {name: [] for name in runs}
            with torch.inference_mode():
                for fn in runs.values():  # warm-up (and the compile)
                    fn()
                for _ in range(args.repeats):
                    for name, fn in runs.items():
                        if dev.type == "cuda":
                            torch.cuda.synchronize()
                        t0 = time.perf_counter()
                        fn()
                        if dev.type == "cuda":
                            torch.cuda.synchronize()
                        times[name].append(time.perf_counter() - t0)
            mo, md = statistics.median(times["ours"]), statistics.median(times["diffusers"])
            achieved = forward_flops(cfg, tokens, args.blocks) / mo
            extra = ""
            if compiled is not None:
                mc = statistics.median(times["compiled"])
                extra = f"  compiled {mc:.3f}s  ratio compiled/diffusers {mc / md:.3f}"
            print(f"{str(dtype):15s} tokens {tokens:5d}: ours {mo:.3f}s  diffusers {md:.3f}s  "
                  f"ratio ours/diffusers {mo / md:.3f}{extra}  |  ours {achieved / 1e9:.0f} GFLOP/s = "
                  f"{100 * achieved / peak:.0f}% of matmul peak {peak / 1e9:.0f} GFLOP/s")


if __name__ == "__main__":
    main()
