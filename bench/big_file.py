"""A DiT file larger than RAM: the Wan 2.1 T2V-14B in fp16 (28.6 GB) loaded into fp8 and run once (issue 49,
docs/memory.md section 2).

Writes the file it needs, streamed tensor by tensor (random fp16 weights ~N(0, 1/fan_in), the official 14B key
names and shapes; ``--layers`` fewer than 40 gives a smaller file of the same widths where the disk or the time
is short), then in a fresh subprocess loads it with ``load_dit(path, dtype=torch.bfloat16,
weights="fp8_e4m3fn")`` (the path of ``--weights fp8_e4m3fn`` and the loader node), runs one DiT forward (a few
latent frames, a 64-token text) and checks the output is finite; reports load and forward time, the peak RSS
and its ratio to the loaded fp8 model's bytes (target <= 1.3x), and the machine's RAM and swap. ``--form
diffusers`` does the same with a diffusers-sharded folder (diffusers names, ~5 GB shards, an index). The files
are deleted afterwards, also on an error or Ctrl-C. Not a test; run by hand:

    python bench/big_file.py [--form file|diffusers|both] [--layers 40] [--dir /tmp] [--frames 2]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wan_core.config import DIT_PRESETS  # noqa: E402
from wan_core.dit.keys import official_to_diffusers  # noqa: E402
from wan_core.dit.model import WanDiT  # noqa: E402

SHARD_BYTES = 5 * 10**9  # diffusers' usual shard size for the Wan transformers

CHILD = r"""
import json, sys, time
import torch
import wan_core
from wan_core.memory.streaming import peak_rss_bytes, rss_bytes, tensor_bytes

path, frames, text_len = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.zeros(1).float()
before = rss_bytes()
start = time.perf_counter()
last = [0.0]
def progress(done, total):
    now = time.perf_counter()
    if now - last[0] > 30 or done == total:
        last[0] = now
        print(f"  load {done}/{total} tensors, {now - start:.0f} s, RSS {rss_bytes() / 2**30:.2f} GiB",
              file=sys.stderr, flush=True)
model = wan_core.load_dit(path, dtype=torch.bfloat16, weights="fp8_e4m3fn", progress=progress)
load_s = time.perf_counter() - start
load_peak = peak_rss_bytes()
cfg = model.config
g = torch.Generator().manual_seed(0)
x = torch.randn(1, cfg.in_dim, frames, 16, 16, generator=g, dtype=torch.bfloat16)
ctx = torch.randn(text_len, cfg.text_dim, generator=g, dtype=torch.bfloat16)
start = time.perf_counter()
with torch.no_grad():
    out = model(x, torch.tensor([500.0]), [ctx])
forward_s = time.perf_counter() - start
print(json.dumps({"before": before, "load_peak": load_peak, "peak": peak_rss_bytes(), "load_s": load_s,
                  "forward_s": forward_s, "model": tensor_bytes(model), "finite": bool(torch.isfinite(out).all()),
                  "out_shape": list(out.shape), "fp8": str(model.blocks[0].ffn[0].weight.dtype),
                  "layers": cfg.num_layers, "dim": cfg.dim}))
"""


def official_shapes(layers: int) -> dict[str, tuple[int, ...]]:
    """Official key -> shape of the Wan 2.1 T2V-14B DiT with ``layers`` blocks, in the model's order."""
    cfg = DIT_PRESETS["wan2.1-t2v-14b"].replace(num_layers=layers, name=f"14b-{layers}")
    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in WanDiT(cfg).state_dict().items()}


def random_fp16(shape: tuple[int, ...], g: torch.Generator) -> bytes:
    fan_in = shape[1] if len(shape) > 1 else 25
    return (torch.randn(shape, generator=g, dtype=torch.float16) * fan_in ** -0.5).numpy().tobytes()


def write_safetensors(path: Path, shapes: dict[str, tuple[int, ...]], g: torch.Generator,
                      metadata: dict[str, str] | None = None) -> int:
    """A safetensors file of random fp16 tensors, written one at a time (never the whole file in memory)."""
    header: dict = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for k, shape in shapes.items():
        n = 2 * int(torch.Size(shape).numel())
        header[k] = {"dtype": "F16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little") + blob)
        for shape in shapes.values():
            f.write(random_fp16(shape, g))
    return path.stat().st_size


def write_file(where: Path, layers: int) -> Path:
    path = where / f"wan2.1_t2v_14B_{layers}blocks_fp16_random.safetensors"
    write_safetensors(path, official_shapes(layers), torch.Generator().manual_seed(0))
    return path


def write_diffusers(where: Path, layers: int) -> Path:
    """A diffusers ``transformer`` folder: diffusers names, shards of ~``SHARD_BYTES``, an index, a config."""
    folder = where / "transformer"
    folder.mkdir()
    named = {official_to_diffusers(k) or k: s for k, s in official_shapes(layers).items()}
    groups: list[dict[str, tuple[int, ...]]] = [{}]
    size = 0
    for k, s in named.items():
        n = 2 * int(torch.Size(s).numel())
        if size and size + n > SHARD_BYTES:
            groups.append({})
            size = 0
        groups[-1][k] = s
        size += n
    g = torch.Generator().manual_seed(0)
    weight_map = {}
    for i, group in enumerate(groups):
        name = f"diffusion_pytorch_model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        write_safetensors(folder / name, group, g, {"format": "pt"})
        weight_map.update({k: name for k in group})
    (folder / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    cfg = DIT_PRESETS["wan2.1-t2v-14b"]
    (folder / "config.json").write_text(json.dumps({
        "_class_name": "WanTransformer3DModel", "num_attention_heads": cfg.num_heads, "attention_head_dim": 128,
        "num_layers": layers, "ffn_dim": cfg.ffn_dim, "in_channels": cfg.in_dim, "out_channels": cfg.out_dim,
        "text_dim": cfg.text_dim, "freq_dim": cfg.freq_dim}))
    return folder


def ram() -> dict[str, int]:
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
    return {k: info.get(k, 0) for k in ("MemTotal", "MemAvailable", "SwapTotal")}


def run_child(path: Path, frames: int, text_len: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", CHILD, str(path), str(frames), str(text_len)], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, text=True)
    if run.returncode:
        raise SystemExit(f"the load/forward subprocess failed with exit code {run.returncode} (see stderr above)")
    return json.loads(run.stdout.strip().splitlines()[-1])


def one(form: str, where: Path, layers: int, frames: int, text_len: int) -> dict:
    need = 2 * sum(int(torch.Size(s).numel()) for s in official_shapes(layers).values())
    free = shutil.disk_usage(where).free
    if need + 2**30 > free:
        raise SystemExit(f"{where}: {free / 1e9:.1f} GB free, the {form} form with {layers} blocks needs "
                         f"{need / 1e9:.1f} GB; use --dir elsewhere or fewer --layers")
    scratch = Path(tempfile.mkdtemp(prefix="wan_big_", dir=where))
    try:
        start = time.perf_counter()
        path = write_file(scratch, layers) if form == "file" else write_diffusers(scratch, layers)
        write_s = time.perf_counter() - start
        on_disk = sum(p.stat().st_size for p in ([path] if path.is_file() else path.iterdir()))
        print(f"{form}: wrote {on_disk / 1e9:.2f} GB in {write_s:.0f} s: {path}", flush=True)
        r = run_child(path, frames, text_len)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    r.update(form=form, on_disk=on_disk, write_s=write_s)
    return r


def report(r: dict, mem: dict[str, int]) -> str:
    gib = 2**30
    return (f"| {r['form']} | {r['layers']} | {r['on_disk'] / 1e9:.2f} GB | {r['model'] / gib:.2f} GiB | "
            f"{r['load_s']:.0f} | {r['forward_s']:.0f} | {r['load_peak'] / gib:.2f} GiB | {r['peak'] / gib:.2f} GiB | "
            f"{r['peak'] / r['model']:.2f}x | {(r['peak'] - r['before']) / r['model']:.2f}x | "
            f"{'yes' if r['finite'] else 'NO'} | {mem['MemTotal'] / gib:.1f} / {mem['SwapTotal'] / gib:.1f} GiB |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--form", choices=("file", "diffusers", "both"), default="both")
    ap.add_argument("--layers", type=int, default=40, help="DiT blocks (40 = the real 14B, 28.6 GB in fp16)")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the files are written (and deleted)")
    ap.add_argument("--frames", type=int, default=2, help="latent frames of the forward (16x16 latent)")
    ap.add_argument("--text-len", type=int, default=64)
    args = ap.parse_args()
    if not 1 <= args.layers <= 40 or args.frames < 1 or args.text_len < 1:
        raise SystemExit("--layers must be 1..40, --frames and --text-len at least 1")
    mem = ram()
    forms = ("file", "diffusers") if args.form == "both" else (args.form,)
    print("| form | blocks | on disk | fp8 model | load s | forward s | peak RSS (load) | peak RSS | peak / model "
          "| growth / model | finite | RAM / swap |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for form in forms:
        r = one(form, Path(args.dir), args.layers, args.frames, args.text_len)
        print(report(r, mem), flush=True)
        print(json.dumps(r), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
