"""A linear layer whose weight stays in its GGUF blocks and is dequantised per call (docs/gguf.md).

``weight``: the raw blocks, uint8 ``[N, K / block_size * type_size]`` (a buffer: it moves with ``.to(device)``
and block swap as its quantised bytes, and ``.to(dtype)`` leaves it alone); each forward dequantises it on its
own device into the compute dtype (float32 math, ``ggml_blocks``), runs the GEMM and frees it. A merged LoRA
(``merge_dense``) replaces the blocks by a dense ``merged`` weight in the compute dtype until ``drop_merged``.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..checkpoint.ggml_blocks import BLOCK_TYPES, dequantize_rows


class GGUFLinear(nn.Module):
    """``nn.Linear`` replacement over GGUF blocks ``weight uint8 [N, row_bytes]`` of type ``qtype``; bias in
    ``compute_dtype``. x ``[..., K]`` -> ``[..., N]``. ``weight_shape`` is the logical ``(N, K)``."""

    weight: torch.Tensor
    merged: torch.Tensor | None

    def __init__(self, raw: torch.Tensor, qtype: str, in_features: int, bias: torch.Tensor | None = None, *,
                 compute_dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        t = BLOCK_TYPES[qtype]
        if in_features % t.block_size or raw.dtype != torch.uint8 or raw.dim() != 2 \
                or raw.shape[1] != t.row_bytes(in_features):
            raise ValueError(f"GGUF {qtype} weight with {in_features} inputs must be uint8 [N, "
                             f"{t.row_bytes(in_features) if in_features % t.block_size == 0 else '?'}], got "
                             f"{raw.dtype} {list(raw.shape)}")
        self.qtype = qtype
        self.in_features, self.out_features = in_features, raw.shape[0]
        self.compute_dtype = compute_dtype
        self.register_buffer("weight", raw)
        self.register_buffer("merged", None)
        self.bias = None if bias is None else nn.Parameter(bias.to(compute_dtype), requires_grad=False)

    @property
    def weight_shape(self) -> tuple[int, int]:
        return self.out_features, self.in_features

    def dequantized_weight(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The weight ``[N, K]`` in ``dtype`` (default the compute dtype): the merged one if a LoRA is merged."""
        if self.merged is not None:
            return self.merged.to(dtype or self.compute_dtype)
        return dequantize_rows(self.weight, self.qtype, dtype or self.compute_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.to(self.compute_dtype)
        return F.linear(x.to(self.compute_dtype), self.dequantized_weight(), bias)

    def merge_dense(self, weight: torch.Tensor) -> None:
        """Hold ``weight [N, K]`` (a LoRA merged in float32) in the compute dtype instead of the blocks."""
        self.merged = weight.to(self.compute_dtype)

    def drop_merged(self) -> None:
        self.merged = None

    def _apply(self, fn, recurse=True):
        raw = self.weight  # uint8 survives dtype casts already; the compute dtype follows the bias
        super()._apply(fn, recurse)
        assert self.weight.dtype == raw.dtype
        if self.bias is not None:
            self.compute_dtype = self.bias.dtype
        elif self.merged is not None:
            self.compute_dtype = self.merged.dtype
        return self

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"weight={self.qtype}{' (LoRA merged: dense)' if self.merged is not None else ''}, "
                f"compute={str(self.compute_dtype).replace('torch.', '')}")


def quantized_shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """``{name: logical shape}`` of the GGUF weights of ``model`` (their tensors hold bytes, not values)."""
    return {f"{name}.weight": m.weight_shape for name, m in model.named_modules() if isinstance(m, GGUFLinear)}
