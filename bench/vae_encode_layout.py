"""Benchmark: the VAE encoder on CPU float32 with a contiguous input against a channels-last one.

``WanVAEModel.encode_chunk`` hands the encoder a channels-last input wherever oneDNN runs the convolutions
(CPU float32 without gradients). This measures that choice against the plain layout, on the same model and
input, whole-sequence and streamed (a TemporalState, 1 + 4 + 4 ... frames per chunk, as ``stream_encode``).
Each round runs every configuration once, in an order that rotates from round to round; the ratio per case
is the median of the per-round ratios. The two outputs' largest difference is printed too (float32 rounding
of a different summation order, nothing more). bf16 and GPU encodes do not take this path.

    python bench/vae_encode_layout.py                 # demo VAE and Wan 2.1 widths, 1 thread
    python bench/vae_encode_layout.py --threads 2 --rounds 5
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wan_core.demo import random_vae_model  # noqa: E402
from wan_core.demo.model import DEMO_VAE  # noqa: E402
from wan_core.vae import WAN21_VAE  # noqa: E402
from wan_core.vae.causal_conv import CHANNELS_LAST, TemporalState  # noqa: E402
from wan_core.vae.streaming import encode_chunks  # noqa: E402

CASES = {  # name: (VAE config, input shape [B, 3, T, H, W], streamed)
    "demo 8x17x64x64 whole": (DEMO_VAE, (8, 3, 17, 64, 64), False),
    "demo 1x17x64x64 streamed": (DEMO_VAE, (1, 3, 17, 64, 64), True),
    "wan2.1 1x9x128x128 whole": (WAN21_VAE, (1, 3, 9, 128, 128), False),
    "wan2.1 1x9x128x128 streamed": (WAN21_VAE, (1, 3, 9, 128, 128), True),
}
LAYOUTS = {"contiguous": torch.contiguous_format, "channels-last": CHANNELS_LAST}


@torch.no_grad()
def encode(model, x: torch.Tensor, layout, streamed: bool) -> torch.Tensor:
    """The encoder's output for ``x`` handed over in ``layout`` (whole, or chunk by chunk with a state)."""
    if not streamed:
        return model.encoder(x.contiguous(memory_format=layout), None, None).contiguous()
    state, outs = TemporalState(), []
    for t0, t1 in encode_chunks(x.shape[2], model.config.temporal_factor):
        outs.append(model.encoder(x[:, :, t0:t1].contiguous(memory_format=layout), state, 1).contiguous())
    return torch.cat(outs, dim=2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated names from: " + ", ".join(CASES))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), float32, {args.rounds} rounds")
    print(f"{'case':32s} {'contiguous s':>13s} {'channels-last s':>16s} {'ratio':>7s} {'max |diff|':>11s}")
    for name in args.cases.split(","):
        cfg, shape, streamed = CASES[name]
        model = random_vae_model(cfg).eval()
        x = torch.rand(shape, generator=torch.Generator().manual_seed(0)) * 2 - 1
        outs = {k: encode(model, x, fmt, streamed) for k, fmt in LAYOUTS.items()}  # also the warm-up
        times: dict[str, list[float]] = {k: [] for k in LAYOUTS}
        order = list(LAYOUTS)
        for r in range(args.rounds):
            for k in order[r % 2:] + order[:r % 2]:
                t0 = time.perf_counter()
                encode(model, x, LAYOUTS[k], streamed)
                times[k].append(time.perf_counter() - t0)
        ratio = statistics.median(a / b for a, b in zip(times["contiguous"], times["channels-last"]))
        diff = float((outs["contiguous"] - outs["channels-last"]).abs().max())
        print(f"{name:32s} {statistics.median(times['contiguous']):13.3f} "
              f"{statistics.median(times['channels-last']):16.3f} {ratio:6.2f}x {diff:11.2e}")


if __name__ == "__main__":
    main()
