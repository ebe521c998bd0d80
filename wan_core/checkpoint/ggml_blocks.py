"""GGML block formats (the tensor types of GGUF files) and their dequantisation in torch (docs/gguf.md).

A quantised row of ``K`` values is ``K / block_size`` blocks of ``type_size`` bytes; each block holds f16
scale(s) and packed integers. ``dequantize_rows(raw, qtype, dtype)`` turns ``raw uint8 [N, K/bs*ts]`` into
``[N, K]``: every kernel unpacks all blocks at once with shifts and masks (no per-block Python loop) and
computes in float32 with the same roundings as the ``gguf`` package's numpy reference (in place: one float32
buffer per call), with f16 scales converted to float32 exactly (subnormals included), so the result is
bit-equal to it; the cast to ``dtype`` comes last.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

QK_K = 256  # values per K-quant super-block


@dataclass(frozen=True)
class BlockType:
    """One GGML tensor type: its id in GGUF headers, values per block and bytes per block."""

    name: str
    type_id: int
    block_size: int
    type_size: int

    def row_bytes(self, k: int) -> int:
        """Bytes of a row of ``k`` values (``k`` must be a multiple of ``block_size``)."""
        return k // self.block_size * self.type_size


# ids and sizes as in ggml.h (checked against the gguf package in tests/checkpoint/test_ggml_blocks.py)
BLOCK_TYPES: dict[str, BlockType] = {t.name: t for t in (
    BlockType("F32", 0, 1, 4), BlockType("F16", 1, 1, 2), BlockType("BF16", 30, 1, 2),
    BlockType("Q4_0", 2, 32, 18), BlockType("Q4_1", 3, 32, 20), BlockType("Q5_0", 6, 32, 22),
    BlockType("Q5_1", 7, 32, 24), BlockType("Q8_0", 8, 32, 34),
    BlockType("Q2_K", 10, QK_K, 84), BlockType("Q3_K", 11, QK_K, 110), BlockType("Q4_K", 12, QK_K, 144),
    BlockType("Q5_K", 13, QK_K, 176), BlockType("Q6_K", 14, QK_K, 210),
)}
BY_ID: dict[int, BlockType] = {t.type_id: t for t in BLOCK_TYPES.values()}
FLOAT_TYPES = ("F32", "F16", "BF16")


def _f16(blocks: torch.Tensor, at: int) -> torch.Tensor:
    """The f16 stored at byte ``at`` of every block, as float32 ``[n, 1]`` (exact: f16 -> f32 never rounds)."""
    return blocks[:, at:at + 2].contiguous().view(torch.float16).float()


@functools.lru_cache(maxsize=64)
def _shift_amounts(shifts: tuple[int, ...], device: torch.device) -> torch.Tensor:
    # cached: a fresh small tensor per call would be a blocking host-to-GPU copy in every forward
    return torch.tensor(shifts, dtype=torch.uint8, device=device)


def _shifted(x: torch.Tensor, shifts: tuple[int, ...], axis: int) -> torch.Tensor:
    """``x >> s`` for every ``s`` in ``shifts``, stacked as a new dimension at ``axis`` (uint8 kept)."""
    s = _shift_amounts(shifts, x.device)
    shape = [1] * (x.dim() + 1)
    shape[axis] = len(shifts)
    return x.unsqueeze(axis) >> s.view(shape)


def _nibbles(qs: torch.Tensor, group: int) -> torch.Tensor:
    """Packed 4-bit values: per ``group`` bytes, the low nibbles come first, then the high ones. ``[n, B]`` ->
    ``[n, 2B]`` uint8."""
    n = qs.shape[0]
    return (_shifted(qs.reshape(n, -1, group), (0, 4), 2) & 0x0F).reshape(n, -1)


def _bits(packed: torch.Tensor, group: int, width: int) -> torch.Tensor:
    """``width``-bit fields: per ``group`` bytes, field ``i`` of every byte, for ``i`` = 0, 1, ... ->
    ``[n, B * 8 / width]`` uint8."""
    n = packed.shape[0]
    fields = tuple(range(0, 8, width))
    return (_shifted(packed.reshape(n, -1, group), fields, 2) & ((1 << width) - 1)).reshape(n, -1)


def _q8_0(b: torch.Tensor) -> torch.Tensor:
    return b[:, 2:].contiguous().view(torch.int8).float().mul_(_f16(b, 0))


def _q4_0(b: torch.Tensor) -> torch.Tensor:
    return _nibbles(b[:, 2:], 16).float().sub_(8).mul_(_f16(b, 0))


def _q4_1(b: torch.Tensor) -> torch.Tensor:
    return _nibbles(b[:, 4:], 16).float().mul_(_f16(b, 0)).add_(_f16(b, 2))


def _five_bit(qh: torch.Tensor, qs: torch.Tensor) -> torch.Tensor:
    """32 five-bit values: low nibbles as Q4_0, bit ``j`` of the little-endian uint32 ``qh`` on top."""
    high = (_shifted(qh, tuple(range(8)), 2) & 1).reshape(qh.shape[0], 32)  # byte j // 8, bit j % 8
    return _nibbles(qs, 16) | (high << 4)


def _q5_0(b: torch.Tensor) -> torch.Tensor:
    return _five_bit(b[:, 2:6], b[:, 6:]).float().sub_(16).mul_(_f16(b, 0))


def _q5_1(b: torch.Tensor) -> torch.Tensor:
    return _five_bit(b[:, 4:8], b[:, 8:]).float().mul_(_f16(b, 0)).add_(_f16(b, 2))


def _q2_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    scales = b[:, :16]
    dl = (_f16(b, 80) * (scales & 0x0F).float()).view(n, 16, 1)
    ml = (_f16(b, 82) * (scales >> 4).float()).view(n, 16, 1)
    q = _bits(b[:, 16:80], 32, 2).view(n, 16, 16).float()
    return q.mul_(dl).sub_(ml).view(n, QK_K)


def _q3_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    low = _bits(b[:, 96:104], 8, 4)  # [n, 16]: low nibbles of bytes 0-7, then their high nibbles
    high = _bits(b[:, 104:108], 4, 2)  # [n, 16]: 2-bit fields 0 of bytes 8-11, then fields 1, 2, 3
    scales = ((low | (high << 4)).to(torch.int8) - 32).float()
    dl = (_f16(b, 108) * scales).view(n, 16, 1)
    ql = _bits(b[:, 32:96], 32, 2).view(n, 16, 16)
    qh = (_bits(b[:, :32], 32, 1).view(n, 16, 16) ^ 1)  # a set bit means no -4 offset
    q = (ql.to(torch.int8) - (qh << 2).to(torch.int8)).float()
    return q.mul_(dl).view(n, QK_K)


def _k_scales(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The eight 6-bit scales and mins of a Q4_K/Q5_K block, from its 12 packed bytes ``[n, 12]``."""
    d, m, md = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = torch.cat([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], dim=1)
    mn = torch.cat([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], dim=1)
    return sc, mn


def _q4_k_like(b: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    sc, mn = _k_scales(b[:, 4:16])
    d = (_f16(b, 0) * sc.float()).view(n, 8, 1)
    dm = (_f16(b, 2) * mn.float()).view(n, 8, 1)
    return q.view(n, 8, 32).float().mul_(d).sub_(dm).view(n, QK_K)


def _q4_k(b: torch.Tensor) -> torch.Tensor:
    return _q4_k_like(b, _nibbles(b[:, 16:], 32))


def _q5_k(b: torch.Tensor) -> torch.Tensor:
    return _q4_k_like(b, _nibbles(b[:, 48:], 32) | (_bits(b[:, 16:48], 32, 1) << 4))


def _q6_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    d = (_f16(b, 208) * b[:, 192:208].contiguous().view(torch.int8).float()).view(n, 16, 1)
    ql = _nibbles(b[:, :128], 64)
    qh = _bits(b[:, 128:192], 32, 2)
    q = ((ql | (qh << 4)).to(torch.int8) - 32).view(n, 16, 16).float()
    return q.mul_(d).view(n, QK_K)


def _float(torch_dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda b: b.contiguous().view(torch_dtype).float()


KERNELS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "F32": _float(torch.float32), "F16": _float(torch.float16), "BF16": _float(torch.bfloat16),
    "Q8_0": _q8_0, "Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1,
    "Q2_K": _q2_k, "Q3_K": _q3_k, "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k,
}


def dequantize_rows(raw: torch.Tensor, qtype: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``raw uint8 [..., row_bytes]`` of type ``qtype`` -> ``[..., K]`` in ``dtype`` (float32 math, on ``raw``'s
    device)."""
    t = BLOCK_TYPES[qtype]
    if raw.dtype != torch.uint8 or raw.shape[-1] % t.type_size:
        raise ValueError(f"{qtype} data must be uint8 rows of whole {t.type_size}-byte blocks, got "
                         f"{raw.dtype} {list(raw.shape)}")
    lead = raw.shape[:-1]
    k = raw.shape[-1] // t.type_size * t.block_size
    out = KERNELS[qtype](raw.reshape(-1, t.type_size))
    return out.reshape(*lead, k).to(dtype)
