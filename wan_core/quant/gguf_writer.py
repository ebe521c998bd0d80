"""Writing a Wan DiT as a GGUF file (``python -m wan_core quantize``; docs/gguf.md), in city96's conventions.

Official tensor names, ``general.architecture = "wan"``; only the 2-D block weights (``is_block_linear``) are
quantised, with the ``gguf`` package's numpy quantisers (``WRITABLE_TYPES``: the types it can quantise); a
block weight whose rows do not split into whole blocks falls back to F16; the 5-D patch embedding is F32; every
other tensor keeps its stored float type (F32 / F16 / BF16; fp8 files: dequantised to F32).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ..checkpoint import FP8_DTYPES, Source, dequantize, is_quant_aux_key, weight_scale_key
from ..checkpoint.ggml_blocks import BLOCK_TYPES
from ..checkpoint.gguf_file import TEXT_LEN_FIELD
from ..dit.loader import official_state_dict
from .fp8 import is_block_linear

WRITABLE_TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "BF16", "F16")
_STORED = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


def _gguf():
    try:
        import gguf
    except ImportError:
        raise ImportError("writing GGUF files needs the gguf package: pip install gguf "
                          "(or pip install comfyui-wancore[gguf])") from None
    return gguf


def tensor_type(name: str, shape: tuple[int, ...], stored: torch.dtype, qtype: str) -> str:
    """The GGUF type a tensor is written in (see the module docstring)."""
    if name == "patch_embedding.weight":
        return "F32"
    layer, _, leaf = name.rpartition(".")
    if leaf == "weight" and len(shape) == 2 and is_block_linear(layer):
        return qtype if shape[1] % BLOCK_TYPES[qtype].block_size == 0 else "F16"
    return _STORED.get(stored, "F32")


def _encode(gguf, t: torch.Tensor, kind: str) -> np.ndarray:
    """``t`` (float32) as what ``GGUFWriter.add_tensor`` takes for ``kind``."""
    x = t.detach().to(torch.float32).contiguous().numpy()
    if kind == "F32":
        return x
    if kind == "F16":
        return x.astype(np.float16)
    return gguf.quants.quantize(x, gguf.GGMLQuantizationType[kind])


def write_gguf(src: Source, out: str | os.PathLike, qtype: str,
               progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Write the Wan DiT ``src`` (any layout ``load_dit`` reads) to a new GGUF file ``out`` with its block
    weights in ``qtype``. Returns ``{type: tensor count}``. Refuses an existing ``out``."""
    if qtype not in WRITABLE_TYPES:
        raise ValueError(f"--type {qtype!r}: the gguf package can quantise {', '.join(WRITABLE_TYPES)}")
    out = Path(out)
    if out.exists():
        raise ValueError(f"{out}: already exists; give a new file name (it is never overwritten)")
    if out.suffix.lower() != ".gguf":
        raise ValueError(f"{out}: the output must be a .gguf file")
    gguf = _gguf()
    sd = official_state_dict(src)
    if str(sd.source).lower().endswith(".gguf"):
        raise ValueError(f"{sd.source}: already a GGUF file; give the .safetensors model to quantise")
    keys = [k for k in sd if not is_quant_aux_key(k)]
    writer = gguf.GGUFWriter(str(out), arch="wan")
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    if "wan_text_len" in sd.metadata:  # keep a text length other than 512 (the safetensors header's field)
        writer.add_uint32(TEXT_LEN_FIELD, int(sd.metadata["wan_text_len"]))
    counts: dict[str, int] = {}
    try:
        for i, key in enumerate(keys):
            if progress is not None:
                progress(i, len(keys))
            t = sd[key]
            if t.dtype in FP8_DTYPES:
                scale_key = weight_scale_key(sd, key)
                t = dequantize(t, sd[scale_key] if scale_key else None, torch.float32)
            kind = tensor_type(key, tuple(t.shape), t.dtype, qtype)
            data = _encode(gguf, t, kind)
            writer.add_tensor(key, data, raw_dtype=None if kind in ("F32", "F16") else gguf.GGMLQuantizationType[kind])
            counts[kind] = counts.get(kind, 0) + 1
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    except BaseException:
        writer.close()
        out.unlink(missing_ok=True)  # never leave a half-written file behind
        raise
    writer.close()
    if progress is not None:
        progress(len(keys), len(keys))
    return counts


