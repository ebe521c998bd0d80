"""The SageAttention algorithm in plain torch (docs/algorithms.md sections 3.1-3.3): backends ``int8`` and ``int8_fp8``.

K smoothing (subtract the per-channel key mean: exact for softmax), per-block INT8 Q (128 tokens) and K
(64 tokens) with scale max|x|/127, exact int32 QK^T by ``torch._int_mm``, softmax in float32, then P.V with
fp32 accumulation from FP16-rounded P and V (SageAttention 1, ``int8``) or FP8-E4M3 P (static x448) and
per-channel-scaled FP8 V (SageAttention 2, ``int8_fp8``). Runs on any device; on CPU it stands in for the
CUDA kernels and serves as their accuracy reference. Softmax is blockwise over queries with the full key
row in memory (equal to the kernels' online softmax up to the FP16/FP8 rounding of P).
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

INT8_MAX = 127.0
FP8_MAX = 448.0  # float8_e4m3fn
PV_MODES = ("fp16", "fp8")
_TINY = torch.finfo(torch.float32).tiny


def round_half_away(x: torch.Tensor) -> torch.Tensor:
    """Round to nearest, ties away from zero (the kernels' rounding; torch.round ties to even)."""
    return (x + torch.copysign(torch.full_like(x, 0.5), x)).trunc_()


def quantize_int8_blocks(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block symmetric INT8: ``x [B, N, L, d]`` -> int8 ``[B, N, L, d]``, float32 scales ``[B, N, ceil(L/block)]``.

    One scale per ``block`` consecutive tokens (all channels): ``max|x| / 127``; ``x ~= q * scale``.
    """
    b, n, length, d = x.shape
    nb = -(-length // block)
    xf = x.float()
    pad = nb * block - length
    if pad:
        xf = F.pad(xf, (0, 0, 0, pad))
    blocks = xf.reshape(b, n, nb, block * d)
    scale = blocks.abs().amax(-1).div_(INT8_MAX).clamp_min_(_TINY)
    q = round_half_away(blocks / scale[..., None]).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q.view(b, n, nb * block, d)[:, :, :length], scale


def _int_matmul(a: torch.Tensor, bt: torch.Tensor) -> torch.Tensor:
    """int8 ``[M, K] @ [K, N] -> int32``, exact; pads to the CUDA kernel's shape rules when on CUDA."""
    if a.device.type != "cuda":
        return torch._int_mm(a, bt)
    m, n = a.shape[0], bt.shape[1]
    pm = max(17, -(-m // 8) * 8) - m
    pn = -(-n // 8) * 8 - n
    out = torch._int_mm(F.pad(a, (0, 0, 0, pm)) if pm else a, F.pad(bt, (0, pn)) if pn else bt)
    return out[:m, :n]


def _prepare_mask(mask: torch.Tensor | None, shape: tuple[int, int, int, int]) -> torch.Tensor | None:
    if mask is None:
        return None
    if mask.dtype != torch.bool:
        mask = mask.float()
    try:
        return mask.expand(shape)
    except RuntimeError:
        raise ValueError(f"attn_mask of shape {list(mask.shape)} does not broadcast to {list(shape)}") from None


def _quantize_v(v: torch.Tensor, pv: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """V ``[B, N, Lk, dv]`` as the P.V product sees it (float32 values on the fp16 or fp8 grid) and, for fp8, the
    per-channel scale ``[B, N, 1, dv]`` that undoes it (None for fp16)."""
    if pv == "fp16":
        return v.to(torch.float16).float(), None
    sv = v.float().abs().amax(dim=2, keepdim=True).div_(FP8_MAX).clamp_min_(_TINY)  # [B, N, 1, dv]
    vq = (v.float() / sv).to(torch.float8_e4m3fn).float()
    return vq, sv / FP8_MAX  # undo the static x448 of P as well


def _softmax_pv(s: torch.Tensor, m: torch.Tensor | None, vq: torch.Tensor,
                v_scale: torch.Tensor | None) -> torch.Tensor:
    """One tile: scores ``s [rows, Lk]`` (float32, overwritten), its mask ``m`` (bool or additive, or None) ->
    ``softmax(s) @ v`` ``[rows, dv]`` with P rounded to fp16, or to fp8 when ``v_scale`` is given; fully
    masked rows give 0."""
    if m is not None:
        if m.dtype == torch.bool:
            s.masked_fill_(~m, float("-inf"))
        else:
            s.add_(m)
    row_max = s.amax(-1, keepdim=True)
    row_max.masked_fill_(row_max == float("-inf"), 0.0)
    p = s.sub_(row_max).exp_()
    denom = p.sum(-1, keepdim=True).clamp_min_(_TINY)
    if v_scale is None:
        acc = p.to(torch.float16).float() @ vq
    else:
        acc = (p.mul_(FP8_MAX).to(torch.float8_e4m3fn).float() @ vq).mul_(v_scale)
    return acc.div_(denom)


def int8_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
                   attn_mask: torch.Tensor | None = None, *, smooth_k: bool = True, pv: str = "fp16",
                   block_q: int = 128, block_k: int = 64, chunk_elems: int = 1 << 23) -> torch.Tensor:
    """SageAttention-style 8-bit attention. q ``[B, N, Lq, d]``, k ``[B, N, Lk, d]``, v ``[B, N, Lk, dv]``
    -> ``[B, N, Lq, dv]`` in q's dtype.

    ``attn_mask``: bool (True = attend) or additive float, broadcastable to ``[B, N, Lq, Lk]``; fully
    masked rows give 0. ``pv``: "fp16" (SageAttention 1) or "fp8" (SageAttention 2). ``chunk_elems``
    bounds the float32 score tile (query rows x keys) held at once.
    """
    if pv not in PV_MODES:
        raise ValueError(f"pv must be one of {PV_MODES}, got {pv!r}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or k.shape[:3] != v.shape[:3] or q.shape[:2] != k.shape[:2] \
            or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"int8 attention expects q [B, N, Lq, d], k/v [B, N, Lk, d]; got {list(q.shape)}, "
                         f"{list(k.shape)}, {list(v.shape)}")
    b, n, lq, d = q.shape
    lk, dv = k.shape[2], v.shape[-1]
    sm_scale = scale if scale is not None else d ** -0.5

    kf = k.float()
    if smooth_k:
        kf = kf - kf.mean(dim=2, keepdim=True)
    q8, sq = quantize_int8_blocks(q, block_q)
    k8, sk = quantize_int8_blocks(kf, block_k)
    del kf
    sq_tok = (sq * sm_scale).repeat_interleave(block_q, dim=-1)[..., :lq]  # [B, N, Lq]
    sk_tok = sk.repeat_interleave(block_k, dim=-1)[..., :lk]  # [B, N, Lk]

    vq, v_scale = _quantize_v(v, pv)
    mask = _prepare_mask(attn_mask, (b, n, lq, lk))

    out = torch.empty(b, n, lq, dv, dtype=torch.float32, device=q.device)
    rows = max(block_q, chunk_elems // max(lk, 1) // block_q * block_q)
    for bi in range(b):
        for hi in range(n):
            kt = k8[bi, hi].t()
            for r0 in range(0, lq, rows):
                r1 = min(r0 + rows, lq)
                s = _int_matmul(q8[bi, hi, r0:r1], kt).float()
                s.mul_(sq_tok[bi, hi, r0:r1, None]).mul_(sk_tok[bi, hi, None, :])
                out[bi, hi, r0:r1] = _softmax_pv(s, None if mask is None else mask[bi, hi, r0:r1], vq[bi, hi],
                                                 None if v_scale is None else v_scale[bi, hi])
    return out.to(q.dtype)


int8_fp8_attention = functools.partial(int8_attention, pv="fp8")
int8_fp8_attention.__doc__ = "``int8_attention`` with FP8 P.V (the SageAttention 2 variant)."
