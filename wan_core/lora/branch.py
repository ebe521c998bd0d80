"""Unmerged LoRA: a low-rank branch added to a linear layer's output at run time,
``y = layer(x) + strength * scale * (x @ down^T) @ up^T`` (docs/lora.md section 2).

The weights are not touched, so the strength can change without any merge, and fp8 or otherwise quantised
weights keep their exact bits. Implemented as a forward hook on the ``nn.Linear`` / ``FP8Linear`` / ``GGUFLinear``
module (the DiT stays plain); the LoRA tensors are moved to the input's device and dtype on first use.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..quant.fp8 import FP8Linear
from ..quant.gguf_linear import GGUFLinear
from .match import Patch


def can_branch(module: nn.Module, leaf: str) -> bool:
    """True for the weight or bias of a linear layer (the parameters a run-time branch can stand in for)."""
    return isinstance(module, (nn.Linear, FP8Linear, GGUFLinear)) and leaf in ("weight", "bias")


class LoraBranch:
    """Forward hook adding the changes of one LoRA to one linear layer's output ``[..., out]``."""

    def __init__(self, weight: list[tuple[Patch, float]], bias: list[tuple[Patch, float]]):
        self.weight = weight
        self.bias = bias
        self._cast: dict[tuple, list[tuple[torch.Tensor, torch.Tensor | None]]] = {}

    def _tensors(self, device: torch.device, dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        key = (device, dtype)
        if key not in self._cast:
            out: list[tuple[torch.Tensor, torch.Tensor | None]] = []
            for patch, strength in self.weight:
                factor = strength * patch.scale
                if patch.low_rank:
                    assert patch.up is not None and patch.down is not None
                    down = patch.down.to(device=device, dtype=torch.float32).flatten(1)
                    up = patch.up.to(device=device, dtype=torch.float32).flatten(1) * factor
                    out.append((down.to(dtype), up.to(dtype)))
                else:
                    assert patch.diff is not None
                    out.append(((patch.diff.to(device=device, dtype=torch.float32) * factor).to(dtype), None))
            self._cast = {key: out}  # one device/dtype at a time: no stale copies kept on another device
        return self._cast[key]

    def __call__(self, module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        x = args[0]
        for a, b in self._tensors(x.device, x.dtype):
            output = output + (F.linear(F.linear(x, a), b) if b is not None else F.linear(x, a)).to(output.dtype)
        for patch, strength in self.bias:
            output = output + (strength * patch.delta((output.shape[-1],), output.device)).to(output.dtype)
        return output
