"""LoRA costs on Wan-width blocks (not a test): merge, restore and unmerged-branch time, backup bytes, and the
fp8 merge error (docs/lora.md section 2).

Builds ``--blocks`` Wan blocks of the chosen width with random weights (bf16, or fp8 scaled per tensor), a random
rank-``--rank`` LoRA on all ten block linears (as the lightx2v / style LoRAs patch them), then times, as the best of
``--repeats`` (a shared machine only makes a run slower): ``apply_lora`` merged, ``remove_loras`` (restore from the
CPU backups), and one block forward with and without the unmerged branch on ``--tokens`` tokens. fp8: the block
output after the fp8 merge against the bf16 merge, relative to what the LoRA changes.

    python bench/lora.py                          # 1.3B width (1536 / 8960), 2 blocks, rank 32
    python bench/lora.py --width 5120 --ffn 13824 --heads 40 --blocks 1   # 14B width
"""
from __future__ import annotations

import argparse
import time

import torch

from wan_core import apply_lora, remove_loras
from wan_core.config import DiTConfig
from wan_core.dit.model import WanDiT
from wan_core.lora.stack import lora_state
from wan_core.quant.fp8 import parameter_bytes, quantize_linears


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def random_lora(cfg: DiTConfig, rank: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    sd = {}
    for i in range(cfg.num_layers):
        for name in ("self_attn.q", "self_attn.k", "self_attn.v", "self_attn.o", "cross_attn.q", "cross_attn.k",
                     "cross_attn.v", "cross_attn.o", "ffn.0", "ffn.2"):
            out_f = cfg.ffn_dim if name == "ffn.0" else cfg.dim
            in_f = cfg.ffn_dim if name == "ffn.2" else cfg.dim
            key = f"diffusion_model.blocks.{i}.{name}"
            sd[f"{key}.lora_down.weight"] = (torch.randn(rank, in_f, generator=g) / in_f ** 0.5).to(torch.bfloat16)
            sd[f"{key}.lora_up.weight"] = (torch.randn(out_f, rank, generator=g) * 0.02).to(torch.bfloat16)
            sd[f"{key}.alpha"] = torch.tensor(float(rank))
    return sd


def model(cfg: DiTConfig, fp8: bool) -> WanDiT:
    torch.manual_seed(0)
    dit = WanDiT(cfg).to(torch.bfloat16).eval()
    with torch.no_grad():
        for p in dit.parameters():
            p.normal_(0, 0.02)
    if fp8:
        quantize_linears(dit)
    return dit


def block_output(dit: WanDiT, x, e0, ctx, freqs) -> torch.Tensor:
    with torch.no_grad():
        return dit.blocks[0](x, e0, ctx, freqs, dit.attention, 0)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--width", type=int, default=1536)
    p.add_argument("--ffn", type=int, default=8960)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--tokens", type=int, default=1560, help="video tokens of the block forward (1560 = 480x832x1)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    cfg = DiTConfig(dim=args.width, ffn_dim=args.ffn, num_heads=args.heads, num_layers=args.blocks, text_dim=64,
                    name="bench")
    lora = random_lora(cfg, args.rank)
    g = torch.Generator().manual_seed(1)
    tokens = args.tokens // 40 * 40  # a 40-wide token grid
    x = torch.randn(1, tokens, cfg.dim, generator=g)
    e0 = torch.randn(1, 6, cfg.dim, generator=g) * 0.1
    ctx = (torch.randn(1, 512, cfg.dim, generator=g) * 0.5).to(torch.bfloat16)
    from wan_core.dit.rope import rope_frequencies

    freqs = rope_frequencies((1, tokens // 40, 40), cfg.rope_dims, cfg.rope_theta)
    print(f"width {cfg.dim}, ffn {cfg.ffn_dim}, {cfg.num_layers} blocks, LoRA rank {args.rank}, "
          f"{tokens} tokens, {torch.get_num_threads()} threads")
    outs = {}
    for fp8 in (False, True):
        dit = model(cfg, fp8)
        plain = block_output(dit, x, e0, ctx, freqs)
        size = parameter_bytes(dit)
        merge_times, restore_times = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            apply_lora(dit, lora)
            t1 = time.perf_counter()
            remove_loras(dit)
            merge_times.append(t1 - t0)
            restore_times.append(time.perf_counter() - t1)
        merge_s, restore_s = min(merge_times), min(restore_times)
        apply_lora(dit, lora)
        backup = sum(a.numel() * a.element_size() + (0 if s is None else s.numel() * s.element_size())
                     for a, s in lora_state(dit).backups.values())
        merged = block_output(dit, x, e0, ctx, freqs)
        remove_loras(dit)
        t_plain = best(lambda d=dit: block_output(d, x, e0, ctx, freqs), args.repeats)
        apply_lora(dit, lora, merge=False)
        t_branch = best(lambda d=dit: block_output(d, x, e0, ctx, freqs), args.repeats)
        unmerged = block_output(dit, x, e0, ctx, freqs)
        remove_loras(dit)
        kind = "fp8 scaled" if fp8 else "bf16"
        print(f"{kind:10s}: weights {size / 2**20:.1f} MiB (after merge: {parameter_bytes(dit) / 2**20:.1f} MiB), "
              f"CPU backup {backup / 2**20:.1f} MiB; merge {merge_s * 1e3 / cfg.num_layers:.0f} ms per block, "
              f"restore {restore_s * 1e3 / cfg.num_layers:.0f} ms per block; "
              f"block forward {t_plain * 1e3:.0f} ms, with unmerged branch {t_branch * 1e3:.0f} ms")
        outs[kind] = (plain.float(), merged.float(), unmerged.float())
    p16, m16, u16 = outs["bf16"]
    p8, m8, u8 = outs["fp8 scaled"]
    effect = (m16 - p16).abs().max().item()
    print(f"LoRA effect on the block output (bf16 merge vs none): max {effect:.4g}")
    print(f"fp8 merge vs bf16 merge: max {(m8 - m16).abs().max().item():.4g} "
          f"({(m8 - m16).abs().max().item() / effect:.3f} of the effect); fp8 unmerged vs bf16 merge: max "
          f"{(u8 - m16).abs().max().item():.4g}; fp8 without LoRA vs bf16 without: "
          f"{(p8 - p16).abs().max().item():.4g}")


if __name__ == "__main__":
    main()
