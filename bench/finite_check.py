"""Cost of the NaN/Inf check while loading (not a test): ``materialize`` with and without ``check_finite``.

safetensors tensors are memory-mapped, so "load" alone reads nothing and the check is what first reads the
data; the fair comparison is load + first use of every weight (one read of it, as ``.to("cuda")`` or the
first CPU forward does), with and without the check. Times are the best of the repeats (a shared machine
only ever makes a run slower), as wall time and as this process's CPU time.

Writes a random checkpoint of ``--mb`` MB made of DiT-block-shaped tensors (1.3B widths: 1536x1536 attention,
8960x1536 FFN, biases) in each stored format, then reads it fully, runs interleaved, with the file in the
page cache (the worst case for the relative cost: a cold read from disk makes it smaller). Also the fp8 DiT
path (``load_dit(weights="fp8_scaled")`` of an fp8 file: fp8 weights kept, checked bitwise).

    python bench/finite_check.py                 # 400 MB per format, 5 repeats
    python bench/finite_check.py --mb 200 --repeats 3
    python bench/finite_check.py --threads 1     # on a busy shared machine
"""
from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from wan_core.checkpoint import materialize, open_checkpoint
from wan_core.numerics import nonfinite_count

SHAPES = ((1536, 1536), (1536, 1536), (1536, 1536), (1536, 1536), (8960, 1536), (1536, 8960), (1536,), (8960,))


def random_file(path: Path, mb: int, dtype: torch.dtype) -> int:
    """A safetensors file of about ``mb`` MB of ``dtype`` tensors (fp8: with 0-d scales); returns its bytes."""
    g = torch.Generator().manual_seed(0)
    tensors: dict[str, torch.Tensor] = {}
    size, i = 0, 0
    while size < mb * 2**20:
        for j, shape in enumerate(SHAPES):
            w = torch.randn(shape, generator=g) * 0.02
            key = f"blocks.{i}.t{j}.weight"
            if dtype in (torch.float8_e4m3fn,) and w.dim() == 2:
                s = w.abs().amax() / 448
                tensors[key], tensors[key.replace(".weight", ".scale_weight")] = (w / s).to(dtype), s.reshape(())
            else:
                tensors[key] = w.to(torch.bfloat16 if dtype == torch.float8_e4m3fn else dtype)
            size += tensors[key].numel() * tensors[key].element_size()
        i += 1
    if dtype == torch.float8_e4m3fn:
        tensors["scaled_fp8"] = torch.empty(0, dtype=dtype)
    save_file(tensors, path)
    return path.stat().st_size


_BUFFERS: dict[torch.dtype, torch.Tensor] = {}


def first_use(tensors) -> None:
    """Read every weight once, as its first real use does (the copy of ``.to("cuda")`` through a staging
    buffer, or the first forward on the CPU); a reused buffer keeps allocation out of the timing."""
    for v in tensors:
        buf = _BUFFERS.get(v.dtype)
        if buf is None or buf.numel() < v.numel():
            buf = _BUFFERS[v.dtype] = torch.empty(max(v.numel(), 8960 * 1536), dtype=v.dtype)
        buf[: v.numel()].view(v.shape).copy_(v)


def interleaved(fns: dict, repeats: int) -> dict:
    """name -> (wall s, CPU s of this process), each the best of ``repeats`` runs interleaved with the others.

    The CPU time counts what this process did whatever else the machine runs; the wall time only gets
    slower on a busy machine, so the best run is the closest to an idle one."""
    for fn in fns.values():  # warm-up: page cache, allocator
        fn()
    times: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            gc.collect()
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times[name].append((time.perf_counter() - t0, time.process_time() - c0))
    return {name: (min(t[0] for t in ts), min(t[1] for t in ts)) for name, ts in times.items()}


def describe(base: tuple[float, float], checked: tuple[float, float]) -> str:
    return (f"wall {base[0]:.3f} -> {checked[0]:.3f} s (x{checked[0] / base[0]:.2f}), "
            f"CPU {base[1]:.3f} -> {checked[1]:.3f} s (x{checked[1] / base[1]:.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads (0 = torch's default); use 1 on a busy shared machine, where every "
                         "parallel op waits for its second thread to be scheduled and times measure the queue")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; file in page cache; best of "
          f"{args.repeats}, interleaved")
    with tempfile.TemporaryDirectory() as tmp:
        cases = [("bf16 file, as stored", torch.bfloat16, None), ("fp16 file, as stored", torch.float16, None),
                 ("fp32 file, as stored", torch.float32, None), ("bf16 file -> fp32", torch.bfloat16, torch.float32),
                 ("scaled fp8 file -> bf16", torch.float8_e4m3fn, torch.bfloat16)]
        for label, stored, target in cases:
            path = Path(tmp) / f"{stored}.safetensors"
            if not path.exists():
                random_file(path, args.mb, stored)
            sd = open_checkpoint(path)

            def load(check: bool, touch: bool, sd=sd, target=target) -> None:
                out = materialize(sd, target, check_finite=check)
                if touch:
                    first_use(out.values())

            t = interleaved({(c, touch): (lambda c=c, touch=touch: load(c, touch))
                             for touch in (False, True) for c in (False, True)}, args.repeats)
            mb = path.stat().st_size / 2**20
            print(f"{label:24s} {mb:4.0f} MB, load + first use: {describe(t[False, True], t[True, True])}; "
                  f"load alone {t[False, False][0]:.3f} -> {t[True, False][0]:.3f} s", flush=True)
        # the fp8 weights the fp8 DiT path keeps as they are (checked bitwise)
        sd = open_checkpoint(Path(tmp) / f"{torch.float8_e4m3fn}.safetensors")
        keys = [k for k in sd if sd.dtype(k) == torch.float8_e4m3fn and k != "scaled_fp8"]

        def kept(check: bool) -> None:
            tensors = [sd[k] for k in keys]
            if check:
                for v in tensors:
                    nonfinite_count(v)
            first_use(tensors)

        t = interleaved({"off": lambda: kept(False), "on": lambda: kept(True)}, args.repeats)
        mb = sum(sd[k].numel() for k in keys) / 2**20
        print(f"{'fp8 weights kept':24s} {mb:4.0f} MB, load + first use: {describe(t['off'], t['on'])}")


if __name__ == "__main__":
    main()
