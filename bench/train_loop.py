"""Benchmark of the training utilities (not a test): bucket-sampler planning time and loop steps/s.

usage: python bench/train_loop.py [--samples 1000000] [--steps 50] [--dim 64] [--layers 2] [--threads 1]
Prints one line per measurement. Runs on CPU (or CUDA with --device cuda).
"""
import argparse
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
from wan_core.config import dit_preset  # noqa: E402
from wan_core.dit.model import WanDiT  # noqa: E402
from wan_core.train import BucketSampler, TrainConfig, train  # noqa: E402


class SolidClips(torch.utils.data.Dataset):
    def __init__(self, shapes, text_dim):
        g = torch.Generator().manual_seed(0)
        self.shapes = shapes
        self.items = [(torch.randn(16, 1, 1, 1, generator=g).expand(16, *s).clone(),
                       torch.randn(8, text_dim, generator=g)) for s in shapes]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (tiny models run best on 1)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    rnd = random.Random(0)
    buckets = [(21, 60, 104), (1, 60, 104), (21, 30, 52), (13, 60, 104), (5, 90, 160)]
    keys = [rnd.choice(buckets) for _ in range(args.samples)]
    sampler = BucketSampler(keys, 4, num_replicas=8, rank=3)
    t0 = time.perf_counter()
    plan = sampler.plan()
    print(f"bucket plan: {args.samples} samples, world 8 x batch 4: {time.perf_counter() - t0:.2f} s, "
          f"{len(plan.megabatches)} megabatches, {len(plan.replaced)} minority replacements")

    cfg = dit_preset("tiny").replace(dim=args.dim, ffn_dim=2 * args.dim, num_layers=args.layers, text_len=64)
    ds = SolidClips([(1, 8, 8)] * 16 + [(3, 8, 8)] * 16, cfg.text_dim)
    train(WanDiT(cfg).to(args.device), ds, TrainConfig(max_steps=3, batch_size=4, progress=False),
          device=args.device)                                   # warm-up (first-call costs)
    for precision in ("fp32", "bf16"):
        torch.manual_seed(0)
        model = WanDiT(cfg).to(args.device)
        t0 = time.perf_counter()
        res = train(model, ds, TrainConfig(max_steps=args.steps, batch_size=4, precision=precision, lr=1e-3,
                                           progress=False), device=args.device)
        dt = time.perf_counter() - t0
        print(f"loop {precision}: tiny WanDiT dim {args.dim} x {args.layers} layers, batch 4: "
              f"{args.steps / dt:.1f} steps/s, loss {res.losses[0]:.3f} -> {res.losses[-1]:.3f}")


if __name__ == "__main__":
    main()
