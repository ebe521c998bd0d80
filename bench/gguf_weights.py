"""GGUF DiT weights (docs/gguf.md): resident bytes against the file, forward time against dense / fp8 weights, and
the cost of dequantising a 14B-width Q4_K weight against the matmul it feeds. Not a test; run by hand (the name
is not gguf.py: run as a script, that would shadow the gguf package):

    python bench/gguf_weights.py [--device cpu] [--layers 2] [--grid 2 16 16] [--dtype fp32] [--tokens 4096] [--compile]

A DiT of the 1.3B model's widths (dim 1536, ffn 8960; --layers blocks, random weights) is written as Q8_0 by
``write_gguf`` and as Q4_K with random blocks (gguf cannot quantise K-quants; scales chosen for weights of the
1.3B model's size), loaded with ``load_dit`` and run once per repeat (best of --repeats after a warm-up) next to
the dense model in --dtype, the dense model in bf16 and fp8_scaled (upcast GEMM). Times are printed as ratios to
the dense --dtype forward, measured in one run on one machine.
"""
from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from wan_core import load_dit
from wan_core.checkpoint.ggml_blocks import BLOCK_TYPES, dequantize_rows
from wan_core.config import DIT_PRESETS
from wan_core.dit.model import WanDiT
from wan_core.memory.accounting import reset_peak_rss
from wan_core.memory.streaming import peak_rss_bytes, rss_bytes
from wan_core.quant.fp8 import is_block_linear, parameter_bytes
from wan_core.quant.gguf_writer import write_gguf

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def timed(fn, repeats: int, device: torch.device) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def random_q4_k(rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """``[rows, cols / 256 * 144]`` random Q4_K blocks, values of order 0.02 (d, dmin ~ 2e-4)."""
    t = BLOCK_TYPES["Q4_K"]
    n = rows * cols // t.block_size
    blocks = rng.integers(0, 256, (n, t.type_size), dtype=np.uint8)
    for at in (0, 2):
        blocks[:, at:at + 2] = (2e-4 * rng.uniform(0.5, 1.5, n)).astype(np.float16).view(np.uint8).reshape(n, 2)
    return blocks.reshape(rows, -1)


def write_q4_k(weights: dict[str, torch.Tensor], path: Path) -> None:
    import gguf

    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), arch="wan")
    for name, w in weights.items():
        layer, _, leaf = name.rpartition(".")
        if leaf == "weight" and w.dim() == 2 and is_block_linear(layer):
            writer.add_tensor(name, random_q4_k(w.shape[0], w.shape[1], rng), raw_dtype=gguf.GGMLQuantizationType.Q4_K)
        else:
            writer.add_tensor(name, w.float().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def file_tensor_bytes(path: Path) -> int:
    import gguf

    return sum(int(t.n_bytes) for t in gguf.GGUFReader(str(path)).tensors)


def memory_report(name: str, path: Path, dtype: torch.dtype) -> None:
    gc.collect()
    before = rss_bytes()
    exact_peak = reset_peak_rss()  # else VmHWM holds the peak of what ran before
    model = load_dit(path, dtype=dtype)
    peak = peak_rss_bytes() - before
    tensors = file_tensor_bytes(path)
    held = parameter_bytes(model)
    print(f"{name}: file tensor bytes {tensors / 2**20:.1f} MiB, resident weights {held / 2**20:.1f} MiB "
          f"({held / tensors:.3f}x), peak RSS over the load {peak / 2**20:.1f} MiB ({peak / tensors:.2f}x"
          f"{'' if exact_peak else ', peak not resettable here: an upper bound'})")
    del model


def forward_report(models: dict[str, torch.nn.Module], grid, dev: torch.device, repeats: int) -> None:
    g = torch.Generator().manual_seed(1)
    f, h, w = grid
    x = torch.randn(1, 16, f, 2 * h, 2 * w, generator=g).to(dev)
    ctx = [torch.randn(64, 4096, generator=g).to(dev)]
    t = torch.tensor([500.0], device=dev)
    times = {}
    with torch.inference_mode():
        ref = next(iter(models.values()))(x, t, ctx)
        for name, model in models.items():
            out = model(x, t, ctx)
            times[name] = timed(lambda m=model: m(x, t, ctx), repeats, dev)
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            print(f"forward {name}: {times[name]:.3f} s ({times[name] / next(iter(times.values())):.2f}x the "
                  f"first), rel-L2 vs the first {err:.1e}")


def dequant_report(tokens: int, dtype: torch.dtype, dev: torch.device, repeats: int, compile_too: bool) -> None:
    """A 5120x5120 Q4_K weight (14B q/k/v/o): dequantise time vs ``x [tokens, 5120] @ W^T``."""
    raw = torch.from_numpy(random_q4_k(5120, 5120, np.random.default_rng(2))).to(dev)
    x = torch.randn(tokens, 5120, device=dev, dtype=dtype)
    w = dequantize_rows(raw, "Q4_K", dtype)
    td = timed(lambda: dequantize_rows(raw, "Q4_K", dtype), repeats, dev)
    tm = timed(lambda: x @ w.t(), repeats, dev)
    line = (f"Q4_K 5120x5120 dequantise to {str(dtype).replace('torch.', '')}: {td * 1e3:.1f} ms; matmul with "
            f"{tokens} tokens {tm * 1e3:.1f} ms; dequantise / matmul {td / tm:.3f}")
    if compile_too:
        fn = torch.compile(dequantize_rows)
        tc = timed(lambda: fn(raw, "Q4_K", dtype), repeats, dev)
        line += f"; compiled dequantise {tc * 1e3:.1f} ms ({td / tc:.2f}x faster)"
    print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--grid", type=int, nargs=3, default=[2, 16, 16], metavar=("F", "H", "W"),
                    help="latent patch grid of the forward (tokens = F*H*W)")
    ap.add_argument("--dtype", choices=list(DTYPES), default=None, help="compute dtype (default fp32 on CPU, bf16)")
    ap.add_argument("--tokens", type=int, default=None, help="rows of the dequantise-vs-matmul check "
                    "(default 4096 on CPU, 32760 = 81 frames at 480p on a GPU)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--compile", action="store_true", help="also time torch.compile'd dequantisation")
    args = ap.parse_args()
    dev = torch.device(args.device)
    run(dev, DTYPES[args.dtype or ("fp32" if dev.type == "cpu" else "bf16")], args.layers, args.grid,
        args.tokens or (4096 if dev.type == "cpu" else 32760), args.repeats, args.compile)


def run(dev: torch.device, dtype: torch.dtype, layers: int, grid, tokens: int, repeats: int,
        compile_too: bool) -> None:
    """Every report of this script (bench/gpu_check.py calls it with GPU sizes)."""
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(f"# {name}, torch {torch.__version__}, {torch.get_num_threads()} threads, compute {dtype}")
    cfg = DIT_PRESETS["wan2.1-t2v-1.3b"].replace(num_layers=layers, name=f"1.3b-widths-{layers}")
    torch.manual_seed(0)
    with torch.no_grad():
        dense = WanDiT(cfg)
        for p in dense.parameters():
            p.normal_(0, 0.02)
    weights = {k: v.contiguous() for k, v in dense.state_dict().items()}
    del dense
    with tempfile.TemporaryDirectory() as tmp:
        src, q8, q4k = Path(tmp) / "m.safetensors", Path(tmp) / "m-Q8_0.gguf", Path(tmp) / "m-Q4_K.gguf"
        save_file(weights, str(src))
        write_gguf(src, q8, "Q8_0")
        write_q4_k(weights, q4k)
        for label, path in (("Q8_0", q8), ("Q4_K", q4k)):
            memory_report(label, path, dtype)
        models = {f"dense {dtype}": load_dit(src, dtype=dtype, device=dev),
                  "Q8_0": load_dit(q8, dtype=dtype, device=dev), "Q4_K": load_dit(q4k, dtype=dtype, device=dev),
                  "fp8_scaled (upcast)": load_dit(src, dtype=dtype, device=dev, weights="fp8_scaled")}
        if dtype != torch.bfloat16:
            models["dense bf16"] = load_dit(src, dtype=torch.bfloat16, device=dev)
        forward_report(models, grid, dev, repeats)
        del models
    dequant_report(tokens, dtype, dev, repeats, compile_too)

if __name__ == "__main__":
    main()
