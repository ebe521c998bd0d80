"""Assigning a GGUF file's tensors to a meta ``WanDiT`` with its Linear weights kept in their blocks (docs/gguf.md).

A block's Linear weight stored quantised (or as F16/BF16 when the compute dtype differs) becomes a ``GGUFLinear``
holding the file's bytes; every other tensor (norms, biases, modulation, embeddings stored as floats, the 5-D patch
embedding) is read into the compute dtype, dequantised first when a converter quantised it. One tensor is read
at a time, copied once out of the memory map: resident weight bytes ~ the file's tensor bytes.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
import torch.nn as nn

from ..checkpoint import CheckpointError, LazyStateDict, nonfinite_error
from ..checkpoint.ggml_blocks import BLOCK_TYPES
from ..checkpoint.gguf_file import GGUFFile
from ..numerics import nonfinite_count
from ..quant.fp8 import is_block_linear
from ..quant.gguf_linear import GGUFLinear

_TORCH_NAMES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


def is_gguf(sd: LazyStateDict) -> bool:
    """True when ``sd`` reads from a GGUF file."""
    return any(isinstance(sd.entry(k)[0], GGUFFile) for k in list(sd)[:1])


def _keeps_blocks(qtype: str, shape: tuple[int, ...], dtype: torch.dtype) -> bool:
    """A Linear weight stays in its blocks unless it is already the compute dtype (or F32: never smaller)."""
    return len(shape) == 2 and qtype != "F32" and qtype != _TORCH_NAMES.get(dtype) \
        and shape[1] % BLOCK_TYPES[qtype].block_size == 0


def load_gguf_weights(model: nn.Module, sd: LazyStateDict, dtype: torch.dtype, device,
                      progress: Callable[[int, int], None] | None = None) -> None:
    """Assign ``sd`` (a GGUF file, official names, shapes checked) to the meta ``model``: Linear weights as
    :class:`GGUFLinear` on ``device`` computing in ``dtype``, the rest as ``dtype`` tensors."""
    linears = {name for name, m in model.named_modules() if type(m) is nn.Linear}
    tensors: dict[str, torch.Tensor] = {}
    blocks: dict[str, tuple[str, torch.Tensor]] = {}
    bad: list[tuple[str, int, int, str]] = []
    keys = list(sd)
    for i, key in enumerate(keys):
        if progress is not None:
            progress(i, len(keys))
        reader, inner = sd.entry(key)
        layer, _, leaf = key.rpartition(".")
        qtype = reader.qtype(inner)
        # only the blocks' Linears keep their bytes: the embeddings, time path and head read ``.weight`` directly
        # (in float32 for the time path), so a file storing them in blocks (F16 from a half-precision source)
        # has them dequantised into the compute dtype here, as small as they are
        if leaf == "weight" and layer in linears and is_block_linear(layer) \
                and _keeps_blocks(qtype, sd.shape(key), dtype):
            blocks[layer] = (qtype, reader.blocks(inner).to(device))
            continue
        t = sd[key].to(device=device, dtype=dtype)
        count = nonfinite_count(t)
        if count:
            bad.append((key, count, t.numel(), ""))
        tensors[key] = t
    if bad:
        raise nonfinite_error(sd.source, bad)
    for layer, (qtype, raw) in blocks.items():
        linear = cast(nn.Linear, model.get_submodule(layer))  # only nn.Linear layers keep blocks
        quantized = GGUFLinear(raw, qtype, linear.in_features, tensors.pop(f"{layer}.bias", None),
                               compute_dtype=dtype)
        parent, _, leaf = layer.rpartition(".")
        setattr(model.get_submodule(parent), leaf, quantized)
    missing, unexpected = model.load_state_dict(tensors, assign=True, strict=False)
    missing = [k for k in missing if k.rpartition(".")[0] not in blocks]
    if missing or unexpected:  # check_shapes ran before, so this is a bug, not a bad file
        raise CheckpointError(f"{sd.source}: GGUF assignment left {missing[:5]} missing, {unexpected[:5]} unused")
    if progress is not None:
        progress(len(keys), len(keys))
