"""Merged LoRA: ``W += strength * scale * up @ down`` computed in float32 and cast back to the weight's dtype;
fp8 weights (``FP8Linear``) are dequantised, merged and requantised with a new scale of the same granularity,
so the model stays fp8 in memory (docs/lora.md section 2). GGUF weights (``GGUFLinear``) are dequantised and
merged in float32 and then held dense in the compute dtype (a wider format than the blocks: more memory; the
blocks are kept untouched, so ``restore`` only drops the dense copy). A one-time warning says so.

``backup`` copies what a merge will overwrite (the weight; for fp8 also its scale) to the CPU once, so
``restore`` can put the original bits back without reading the checkpoint again.
"""
from __future__ import annotations

import warnings
from typing import cast

import torch
import torch.nn as nn

from ..quant.fp8 import FP8Linear, Granularity, quantize_weight
from ..quant.gguf_linear import GGUFLinear
from .match import Patch

Backup = tuple[torch.Tensor, torch.Tensor | None]  # (parameter data, fp8 weight_scale or None), on the CPU


def owner(model: nn.Module, param: str) -> tuple[nn.Module, str]:
    """The module holding parameter ``param`` and the parameter's attribute name."""
    module_name, _, leaf = param.rpartition(".")
    return (model.get_submodule(module_name) if module_name else model), leaf


def _cpu_copy(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", copy=True)


def backup(model: nn.Module, param: str) -> Backup:
    module, leaf = owner(model, param)
    if isinstance(module, GGUFLinear) and leaf == "weight":  # the blocks are never written: nothing to copy
        return torch.empty(0), None
    data = getattr(module, leaf).data
    scale = module.weight_scale if isinstance(module, FP8Linear) and leaf == "weight" else None
    return _cpu_copy(data), None if scale is None else _cpu_copy(scale)


def restore(model: nn.Module, param: str, saved: Backup) -> None:
    """Put the backed-up bits back into the parameter (in place: other references stay valid)."""
    module, leaf = owner(model, param)
    if isinstance(module, GGUFLinear) and leaf == "weight":
        module.drop_merged()
        return
    data, scale = saved
    getattr(module, leaf).data.copy_(data)
    if scale is not None:
        cast(torch.Tensor, module.weight_scale).copy_(scale)


def add_change(w: torch.Tensor, patch: Patch, strength: float) -> None:
    """``w += strength * patch.delta`` in place on a contiguous float32 tensor (low rank: one fused addmm)."""
    factor = strength * patch.scale
    if patch.up is not None and patch.down is not None and patch.diff is None:
        up = patch.up.to(device=w.device, dtype=torch.float32).flatten(1)
        down = patch.down.to(device=w.device, dtype=torch.float32).flatten(1)
        w.view(w.shape[0], -1).addmm_(up, down, alpha=factor)
    else:
        assert patch.diff is not None
        w.add_(patch.diff.to(device=w.device, dtype=torch.float32).reshape(w.shape), alpha=factor)


def merge(model: nn.Module, param: str, changes: list[tuple[Patch, float]]) -> None:
    """Add ``sum(strength * patch.delta)`` to ``param`` in place (float32 math, cast back; fp8 requantised)."""
    module, leaf = owner(model, param)
    if isinstance(module, GGUFLinear) and leaf == "weight":
        _merge_gguf(module, changes)
        return
    p = getattr(module, leaf)
    if isinstance(module, FP8Linear) and leaf == "weight":
        w = module.dequantized_weight(torch.float32).contiguous()
        for patch, strength in changes:
            add_change(w, patch, strength)
        granularity: Granularity = "tensor" if module.weight_scale.dim() == 0 else "channel"
        w8, scale = quantize_weight(w, granularity, scaled=True, fp8_dtype=p.dtype)
        p.data.copy_(w8)
        module.weight_scale.copy_(scale.reshape(module.weight_scale.shape))
        return
    w = p.data.to(torch.float32, copy=True).contiguous()
    for patch, strength in changes:
        add_change(w, patch, strength)
    p.data.copy_(w.to(p.dtype))


def _merge_gguf(module: GGUFLinear, changes: list[tuple[Patch, float]]) -> None:
    """Dequantise (or take the dense weight of an earlier merge), add in float32, hold dense in the compute dtype."""
    w = module.dequantized_weight(torch.float32).contiguous()
    for patch, strength in changes:
        add_change(w, patch, strength)
    if module.merged is None:
        warnings.warn(f"merged LoRA on GGUF {module.qtype} weights: each patched layer is kept dense in "
                      f"{str(module.compute_dtype).replace('torch.', '')} (more memory than its blocks); "
                      f"use merge=False to keep the model quantised", RuntimeWarning, stacklevel=4)
    module.merge_dense(w)
