"""Benchmark (not a test): one DiT training step of the demo model under each attention kernel and AdamW variant.

The demo DiT's sequences are short (48-80 video tokens, 32 text rows); there, torch's fused (flash) CPU attention
spends more time in its backward than the plain matrix-product ("math") form does. This measures, side by side
in one run and interleaved (so a busy machine slows every variant alike), the steps/s of: attention kernel
{auto (torch's flash kernel), math} x AdamW {for-loop, fused} x precision {fp32, bf16 autocast}, batch 8, on the
demo latent shapes (17 and 9 frames; 64x64, 80x48, 48x80). ``--compile`` adds math + fused with the DiT's
blocks compiled (``wan_core.memory.compile_blocks``, inductor; built during the warm-up, which is not timed).

usage: python bench/train_kernels.py [--threads 1] [--reps 4] [--steps 12] [--precision bf16 fp32] [--compile]
Prints one line per variant: best and median steps/s over the repetitions, and the ratio to auto (flash) + for-loop.
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
from wan_core.demo.model import DEMO_DIT  # noqa: E402
from wan_core.dit.model import WanDiT  # noqa: E402
from wan_core.memory import compile_blocks  # noqa: E402
from wan_core.train.loop import sdpa_kernels  # noqa: E402
from wan_core.train.loss import flow_matching_loss  # noqa: E402

SHAPES = [(5, 8, 8), (3, 8, 8), (5, 6, 10), (5, 10, 6), (3, 6, 10), (3, 10, 6)]  # latent (F, H, W) of the data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12, help="steps per timing (cycling through the shapes)")
    ap.add_argument("--precision", nargs="+", default=["bf16", "fp32"], choices=["bf16", "fp32"])
    ap.add_argument("--compile", action="store_true", help="add math + fused AdamW with compiled blocks")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(8, 16, *s, generator=g), torch.randn(8, DEMO_DIT.text_len, DEMO_DIT.text_dim, generator=g))
               for s in SHAPES]
    variants = [(p, k, f, False) for p in args.precision for k in ("auto", "math") for f in (False, True)]
    if args.compile:
        variants += [(p, "math", True, True) for p in args.precision]
    runs = {}
    for v in variants:
        torch.manual_seed(0)
        model = WanDiT(DEMO_DIT)
        if v[3] and compile_blocks(model):
            sys.exit("--compile: torch.compile cannot run here (see the warning)")
        runs[v] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4, fused=v[2]))

    def steps(v, n):
        model, opt = runs[v]
        for i in range(n):
            x, ctx = batches[i % len(batches)]
            opt.zero_grad(set_to_none=True)
            with sdpa_kernels(v[1]), torch.autocast("cpu", dtype=torch.bfloat16, enabled=v[0] == "bf16"):
                loss = flow_matching_loss(model, x, ctx, generator=torch.Generator().manual_seed(i))
            loss.backward()
            opt.step()

    rates = {v: [] for v in variants}
    for v in variants:
        steps(v, len(SHAPES))  # warm-up: first-call costs of every shape
    for _ in range(args.reps):
        for v in variants:
            t0 = time.perf_counter()
            steps(v, args.steps)
            rates[v].append(args.steps / (time.perf_counter() - t0))
    print(f"demo DiT ({DEMO_DIT.num_layers} blocks, dim {DEMO_DIT.dim}), batch 8, {args.threads} thread(s), "
          f"{args.reps} x {args.steps} steps per variant, interleaved")
    for p in args.precision:
        base = statistics.median(rates[(p, "auto", False, False)])
        for v in variants:
            if v[0] != p:
                continue
            med = statistics.median(rates[v])
            print(f"{p:5s} attention {v[1]:5s} AdamW {'fused' if v[2] else 'loop ':5s}"
                  f"{' compiled' if v[3] else '         '}: median {med:5.2f} "
                  f"steps/s (best {max(rates[v]):5.2f}), x{med / base:.2f}")


if __name__ == "__main__":
    main()
