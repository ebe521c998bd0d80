"""Performance model of context parallelism (issue 15): per-layer communication and expected efficiency of
Ulysses, Ring and USP for a GPU count, link bandwidth and sequence length (docs/parallel.md section 9).

Multi-GPU timings cannot be taken on the machines this project is tested on, so this is arithmetic, not a
measurement. Assumptions (all printed with the table, all overridable):

* Model: Wan 2.1 14B (D 5120, 40 heads of 128, FFN 13824, 40 blocks) or 1.3B (1536, 12, 8960, 30); bf16
  activations (2 bytes); text 512 tokens (cross-attention K/V computed once per prompt, not counted).
* Compute per block and token: self-attention projections 8 D^2, cross-attention q/o 4 D^2, FFN 4 D F FLOPs
  (multiply-add = 2), plus attention 4 L D (QK^T and PV over L keys) and 4 * 512 * D for cross-attention, at a
  sustained ``--tflops`` per GPU (default 400: about 40% of an H100's dense bf16 peak).
* Ulysses (degree u): four all-to-alls per block (q, k, v fused in the code, same bytes, and o); each rank sends
  (u-1)/u of its L/P x D slice of each, at the all-to-all bandwidth ``--a2a-gbs`` (GB/s per GPU, one
  direction); not overlapped with compute.
* Ring (degree r): r-1 steps, each sends the chunk's K and V (2 x L/P x D x u... per rank: 2 x (L/r)(D/u) x 2
  bytes) at ``--p2p-gbs``; a step's transfer overlaps the attention of the previous block, so only
  max(0, transfer - block attention) is exposed.
* USP: Ulysses inside (``--a2a-gbs``), Ring outside (``--p2p-gbs``: across nodes when r spans nodes).
* Token-wise work (projections, FFN, norms) divides perfectly by P; the final all-gather of the block stack
  output (once per step, L x D) and the per-step broadcast of the pool are counted per step, not per block.
* Efficiency = T(1 GPU) / (P x T(P GPUs)) for one DiT forward; 100% = linear speed-up.

    python bench/cp_model.py                       # the table for 2/4/8 GPUs at 32k and 128k tokens
    python bench/cp_model.py --model 1.3b --a2a-gbs 20 --p2p-gbs 20     # PCIe-class links
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

MODELS = {"14b": (5120, 40, 13824, 40), "1.3b": (1536, 12, 8960, 30)}
TEXT = 512
BYTES = 2


@dataclass
class Estimate:
    method: str
    gpus: int
    ulysses: int
    ring: int
    comm_mb: float  # per block per GPU
    compute_ms: float  # per block per GPU
    exposed_ms: float  # communication not hidden behind compute, per block
    efficiency: float


def block_flops(tokens: int, dim: int, ffn: int) -> tuple[float, float]:
    """(token-wise FLOPs, self-attention FLOPs) of one block for ``tokens`` query tokens over ``tokens`` keys."""
    tokenwise = tokens * (12 * dim * dim + 4 * dim * ffn + 4 * TEXT * dim)
    attention = 4.0 * tokens * tokens * dim
    return tokenwise, attention


def estimate(tokens: int, gpus: int, ulysses: int, ring: int, model: str = "14b", tflops: float = 400.0,
             a2a_gbs: float = 300.0, p2p_gbs: float = 300.0) -> Estimate:
    dim, heads, ffn, layers = MODELS[model]
    if ulysses * ring != gpus or heads % ulysses:
        raise ValueError(f"ulysses {ulysses} x ring {ring} does not fit {gpus} GPUs and {heads} heads")
    tokenwise, attention = block_flops(tokens, dim, ffn)
    t1 = (tokenwise + attention) / (tflops * 1e12)  # seconds per block on one GPU
    compute = t1 / gpus
    local = tokens / gpus * dim * BYTES  # bytes of one activation slice per rank
    a2a = 4 * local * (ulysses - 1) / ulysses if ulysses > 1 else 0.0
    a2a_s = a2a / (a2a_gbs * 1e9)
    ring_bytes, ring_exposed = 0.0, 0.0
    if ring > 1:
        step_bytes = 2 * (tokens / ring) * (dim / ulysses) * BYTES  # K and V of one ring chunk, my heads
        step_s = step_bytes / (p2p_gbs * 1e9)
        attn_step_s = attention / gpus / ring / (tflops * 1e12)  # one block of the ring's attention
        ring_bytes = (ring - 1) * step_bytes
        ring_exposed = (ring - 1) * max(0.0, step_s - attn_step_s)
    gather_s = tokens * dim * 4 * (gpus - 1) / gpus / (a2a_gbs * 1e9) / layers  # fp32 output, once per forward
    exposed = a2a_s + ring_exposed + gather_s
    method = "Ulysses" if ring == 1 else "Ring" if ulysses == 1 else "USP"
    return Estimate(method, gpus, ulysses, ring, (a2a + ring_bytes) / 1e6, compute * 1e3, exposed * 1e3,
                    t1 / (gpus * (compute + exposed)))


def layouts(gpus: int, heads: int) -> list[tuple[int, int]]:
    """Ulysses only, Ring only and one USP split (Ulysses inside half of the GPUs) when the heads allow."""
    out = []
    if heads % gpus == 0:
        out.append((gpus, 1))
    out.append((1, gpus))
    if gpus >= 4 and heads % (gpus // 2) == 0:
        out.append((gpus // 2, 2))
    return out


def table(model: str, tflops: float, a2a_gbs: float, p2p_gbs: float, gpus=(2, 4, 8),
          tokens=(32_768, 131_072)) -> str:
    heads = MODELS[model][1]
    rows = ["| tokens | GPUs | method (u x r) | comm MB/block/GPU | compute ms/block | exposed comm ms | efficiency |",
            "|---:|---:|---|---:|---:|---:|---:|"]
    for n in tokens:
        for p in gpus:
            for u, r in layouts(p, heads):
                e = estimate(n, p, u, r, model, tflops, a2a_gbs, p2p_gbs)
                rows.append(f"| {n // 1024}k | {p} | {e.method} ({u}x{r}) | {e.comm_mb:.1f} | {e.compute_ms:.2f} | "
                            f"{e.exposed_ms:.2f} | {e.efficiency:.0%} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="14b")
    ap.add_argument("--tflops", type=float, default=400.0, help="sustained bf16 TFLOP/s per GPU")
    ap.add_argument("--a2a-gbs", type=float, default=300.0, help="all-to-all bandwidth per GPU, GB/s (NVLink)")
    ap.add_argument("--p2p-gbs", type=float, default=300.0, help="ring P2P bandwidth per GPU, GB/s")
    ap.add_argument("--tokens", type=int, nargs="+", default=[32_768, 131_072])
    ap.add_argument("--gpus", type=int, nargs="+", default=[2, 4, 8])
    args = ap.parse_args(argv)
    print(f"Wan {args.model}, {args.tflops:g} TFLOP/s per GPU, all-to-all {args.a2a_gbs:g} GB/s, "
          f"ring P2P {args.p2p_gbs:g} GB/s (assumptions: bench/cp_model.py docstring)\n")
    print(table(args.model, args.tflops, args.a2a_gbs, args.p2p_gbs, tuple(args.gpus), tuple(args.tokens)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
