"""Loading a GGUF DiT: peak RAM stays near the file's tensor bytes (the map's pages of each copied tensor are
dropped), measured in a fresh subprocess (``VmHWM`` minus the RSS before loading). Slow: writes ~200 MB."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from wan_core.config import DIT_PRESETS
from wan_core.dit.model import WanDiT
from wan_core.quant.fp8 import is_block_linear

gguf = pytest.importorskip("gguf")
ROOT = Path(__file__).resolve().parents[2]
PROBE = textwrap.dedent("""
    import json, sys, torch, wan_core
    from wan_core.memory.streaming import peak_rss_bytes, rss_bytes
    from wan_core.quant.fp8 import parameter_bytes
    torch.zeros(1).float()
    before = rss_bytes()
    model = wan_core.load_dit(sys.argv[1], dtype=torch.float32)
    print(json.dumps({"peak": peak_rss_bytes() - before, "model": parameter_bytes(model)}))
""")


def _random_q8_0_file(path: Path) -> int:
    """Block weights as random Q8_0 blocks (scales ~1e-3), the rest F32; returns the tensor bytes."""
    cfg = DIT_PRESETS["wan2.1-t2v-1.3b"].replace(num_layers=4)
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in WanDiT(cfg).state_dict().items()}
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), arch="wan")
    for name, shape in shapes.items():
        layer, _, leaf = name.rpartition(".")
        if leaf == "weight" and len(shape) == 2 and is_block_linear(layer):
            blocks = rng.integers(-127, 128, (shape[0] * shape[1] // 32, 34), dtype=np.int8).view(np.uint8)
            blocks[:, :2] = np.full(len(blocks), 1e-3, np.float16).view(np.uint8).reshape(-1, 2)
            writer.add_tensor(name, blocks.reshape(shape[0], -1), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(name, rng.standard_normal(shape, dtype=np.float32) * 0.02)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return sum(int(t.n_bytes) for t in gguf.GGUFReader(str(path)).tensors)


@pytest.mark.slow
def test_peak_ram_of_a_gguf_load_stays_near_its_tensor_bytes(tmp_path):
    path = tmp_path / "w-Q8_0.gguf"
    tensor_bytes = _random_q8_0_file(path)
    out = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, cwd=ROOT,
                         check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    assert r["model"] <= 1.15 * tensor_bytes
    assert r["peak"] <= 1.3 * tensor_bytes, (r, tensor_bytes)  # without dropping the map's pages: ~2x
