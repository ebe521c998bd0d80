"""GGUF files for the tests: written by ``wan_core quantize`` (types gguf can quantise) or by hand with the gguf
package's writer (K-quants as random blocks with sane f16 scales, other architectures, odd conventions)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from wan_core.checkpoint.ggml_blocks import BLOCK_TYPES
from wan_core.config import DiTConfig
from wan_core.dit.model import WanDiT
from wan_core.quant.fp8 import is_block_linear

# the f16 scale bytes of each K-quant block (block_q*_K in ggml-common.h): (offset, magnitude)
K_SCALES = {"Q2_K": ((80, 2e-3), (82, 1e-3)), "Q3_K": ((108, 2e-3),), "Q4_K": ((0, 4e-4), (2, 4e-4)),
            "Q5_K": ((0, 2e-4), (2, 2e-4)), "Q6_K": ((208, 3e-4),)}


def random_weights(cfg: DiTConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    model = WanDiT(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}


def save_safetensors(weights: dict[str, torch.Tensor], path: Path) -> Path:
    save_file(weights, str(path))
    return path


def random_k_blocks(qtype: str, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """``[rows, cols / 256 * type_size]`` random K-quant blocks whose scales give values of order 0.1."""
    t = BLOCK_TYPES[qtype]
    n = rows * cols // t.block_size
    blocks = rng.integers(0, 256, (n, t.type_size), dtype=np.uint8)
    for at, mag in K_SCALES[qtype]:
        d = (mag * rng.uniform(0.5, 1.5, n)).astype(np.float16)
        blocks[:, at:at + 2] = d.view(np.uint8).reshape(n, 2)
    return blocks.reshape(rows, -1)


def write_gguf_file(path: Path, tensors: dict[str, tuple[np.ndarray, str | None]], arch: str | None = "wan",
                    fields: dict[str, list[int]] | None = None) -> Path:
    """``tensors``: name -> (numpy data, GGUF type name for raw bytes or None for float32/float16 arrays)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch=arch or "wan")
    if arch is None:  # no architecture key at all (some community files)
        writer.kv_data[0].pop("general.architecture", None)
    for key, values in (fields or {}).items():
        writer.add_array(key, values)
    for name, (data, qtype) in tensors.items():
        writer.add_tensor(name, data, raw_dtype=None if qtype is None else gguf.GGMLQuantizationType[qtype])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def k_quant_file(path: Path, weights: dict[str, torch.Tensor], qtype: str, seed: int = 0) -> Path:
    """A Wan GGUF whose block weights are random ``qtype`` blocks (the other tensors F32 from ``weights``)."""
    rng = np.random.default_rng(seed)
    tensors: dict[str, tuple[np.ndarray, str | None]] = {}
    for name, w in weights.items():
        layer, _, leaf = name.rpartition(".")
        if leaf == "weight" and w.dim() == 2 and is_block_linear(layer):
            tensors[name] = (random_k_blocks(qtype, w.shape[0], w.shape[1], rng), qtype)
        else:
            tensors[name] = (w.float().numpy(), None)
    return write_gguf_file(path, tensors)
