"""Streaming load (docs/memory.md): peak RAM while a DiT of 1.3B widths loads from an fp16 file into fp8 stays
<= 1.3x the loaded model's size, measured in a fresh subprocess (``VmHWM`` minus the RSS before loading).
The same ``load_dit`` path loads the 14B config from shapes alone (meta tensors) into fp8.

The file (4 blocks of the 1.3B model's widths: dim 1536, ffn 8960, text 4096) is written tensor by tensor so
the test process itself never holds it. A control run with the memory-mapped reader and no heap release
(the loader before this work) shows the probe can see the difference (slow)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import wan_core
from wan_core.config import DIT_PRESETS, DiTConfig
from wan_core.memory.streaming import tensor_bytes

ROOT = Path(__file__).resolve().parents[2]
WIDTHS_1_3B = DIT_PRESETS["wan2.1-t2v-1.3b"].replace(num_layers=4, name="1.3b-widths-4-blocks")

PROBE = textwrap.dedent("""
    import json, sys
    import torch
    import wan_core
    from wan_core.memory.streaming import peak_rss_bytes, rss_bytes, tensor_bytes
    if sys.argv[2] == "mmap":  # the reader before streaming load: through the memory map, no heap release
        from wan_core import checkpoint
        from wan_core.dit import loader
        from safetensors import safe_open
        def mapped_get(self, name):
            if not hasattr(self, "mapped"):
                self.mapped = safe_open(self.path, framework="pt", device="cpu")
            return self.mapped.get_tensor(name)
        checkpoint._SafetensorsReader.get = mapped_get
        loader.releasing_progress = lambda progress: progress
    torch.zeros(1).float()  # allocator and kernels warm
    before = rss_bytes()
    model = wan_core.load_dit(sys.argv[1], weights="fp8_scaled")
    print(json.dumps({"before": before, "peak": peak_rss_bytes(), "after": rss_bytes(),
                      "model": tensor_bytes(model), "fp8": str(model.blocks[0].ffn[0].weight.dtype)}))
""")


def write_random_fp16(path: Path, cfg: DiTConfig) -> int:
    """A safetensors file of random fp16 weights (~N(0, 1/fan_in)), written one tensor at a time."""
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in wan_core.WanDiT(cfg).state_dict().items()}
    header, offset = {}, 0
    for k, shape in shapes.items():
        n = 2 * int(torch.Size(shape).numel())
        header[k] = {"dtype": "F16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    g = torch.Generator().manual_seed(0)
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little") + blob)
        for shape in shapes.values():
            fan_in = shape[1] if len(shape) > 1 else 25
            f.write((torch.randn(shape, generator=g) * fan_in ** -0.5).half().numpy().tobytes())
    return offset


def measure(path: Path, reader: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", PROBE, str(path), reader], capture_output=True, text=True,
                         env=env, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def fp16_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("stream") / "dit_1.3b_widths_fp16.safetensors"
    write_random_fp16(path, WIDTHS_1_3B)
    return path


def test_peak_rss_near_final_size(fp16_file):
    r = measure(fp16_file, "streaming")
    ratio = (r["peak"] - r["before"]) / r["model"]
    print(f"file {fp16_file.stat().st_size / 2**20:.0f} MiB, model {r['model'] / 2**20:.0f} MiB, "
          f"peak +{(r['peak'] - r['before']) / 2**20:.0f} MiB ({ratio:.2f}x)")
    assert r["fp8"] == "torch.float8_e4m3fn"
    assert r["model"] < 0.6 * fp16_file.stat().st_size  # fp8 blocks: about half the fp16 file
    assert ratio <= 1.3


@pytest.mark.slow
def test_probe_sees_the_mapped_reader(fp16_file):
    """Control: through the memory map without heap release the same load peaks far above 1.3x."""
    r = measure(fp16_file, "mmap")
    assert (r["peak"] - r["before"]) / r["model"] > 1.5


def test_14b_config_loads_from_shapes_into_fp8():
    """The 14B model through the same path on the meta device: fp8 blocks, ~13.5 GiB, half its fp16 size."""
    cfg = DIT_PRESETS["wan2.1-t2v-14b"]
    with torch.device("meta"):
        sd = {k: torch.empty(v.shape, dtype=torch.float16) for k, v in wan_core.WanDiT(cfg).state_dict().items()}
    model = wan_core.load_dit(sd, device="meta", weights="fp8_scaled")
    assert model.config.num_layers == 40 and model.config.dim == 5120
    assert model.blocks[39].ffn[2].weight.dtype == torch.float8_e4m3fn
    fp16 = sum(2 * v.numel() for v in sd.values())
    assert 13.0 * 2**30 < tensor_bytes(model) < 0.52 * fp16
