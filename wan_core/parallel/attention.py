"""Ulysses, Ring and USP self-attention on torch.distributed (docs/parallel.md sections 2-4).

Layout is the dispatch's ``[B, N, S, d]``. Each rank of the sequence-parallel group holds a contiguous chunk of
the (padded) sequence. Ulysses swaps the sequence split for a head split with one all-to-all (q, k, v fused)
and back; Ring rotates K/V around the ring group with P2P sends overlapped with the block computation and
merges the blocks through their log-sum-exp in fp32 (fp64 for fp64 inputs); USP is Ulysses inside, Ring
outside. Padded keys are excluded exactly: dropped by slicing (padding sits at the end of the sequence) or,
for skiparse sub-sequences under Ring, by a key mask.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..attention.skiparse import SkiparseMode, skiparse_attention, skiparse_permute, skiparse_unpermute

# ---------------------------------------------------------------------------------------------------------
# Ulysses all-to-all


def seq_to_heads(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """``[B, N, S/P, d]`` (sequence chunk of this rank) -> ``[B, N/P, S, d]`` (head slice of this rank, the
    whole sequence in rank order). One ``all_to_all_single`` over ``group`` (P ranks)."""
    p = dist.get_world_size(group)
    b, n, s, d = x.shape
    if n % p:
        raise ValueError(f"Ulysses degree {p} does not divide {n} heads")
    send = x.reshape(b, p, n // p, s, d).transpose(0, 1).contiguous()  # [P, B, N/P, s, d]: block i goes to rank i
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # recv[i]: rank i's sequence chunk of my heads
    return recv.permute(1, 2, 0, 3, 4).reshape(b, n // p, p * s, d)


def heads_to_seq(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Inverse of :func:`seq_to_heads`: ``[B, N/P, S, d]`` -> ``[B, N, S/P, d]``."""
    p = dist.get_world_size(group)
    b, h, s, d = x.shape
    send = x.reshape(b, h, p, s // p, d).permute(2, 0, 1, 3, 4).contiguous()  # [P, B, N/P, S/P, d]
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # recv[i]: head slice i of my sequence chunk
    return recv.transpose(0, 1).reshape(b, p * h, s // p, d)


# ---------------------------------------------------------------------------------------------------------
# Block attention with log-sum-exp


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _math_attention(q, k, v, scale: float, mask) -> tuple[torch.Tensor, torch.Tensor]:
    acc = _acc_dtype(q.dtype)
    s = torch.matmul(q.to(acc), k.to(acc).transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)
    return torch.matmul(p, v.to(acc)), lse


def attention_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
                       mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention that also returns the log-sum-exp of the scaled scores.

    q ``[B, N, Lq, d]``, k/v ``[B, N, Lk, d]``, ``mask`` bool (True = attend) broadcastable to
    ``[B, N, Lq, Lk]`` -> ``(out [B, N, Lq, d]`` in the accumulation dtype (fp32, fp64 for fp64 inputs),
    ``lse [B, N, Lq]``). Rows with no key give out 0 and lse -inf. Fused kernels where torch has one (CPU
    flash kernel, CUDA flash / memory-efficient), else explicit math."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    acc = _acc_dtype(q.dtype)
    out = lse = None
    try:
        if q.device.type == "cpu":
            bias = None
            if mask is not None:
                bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
            out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=bias,
                                                                                  scale=scale)
        elif q.device.type == "cuda" and mask is None and q.dtype in (torch.float16, torch.bfloat16):
            res = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False, scale=scale)
            out, lse = res[0], res[1]
        elif q.device.type == "cuda" and q.dtype != torch.float64:
            bias = None
            if mask is not None:
                bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
                bias = bias.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
            res = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, scale=scale)
            out, lse = res[0], res[1][..., : q.shape[2]]
    except (RuntimeError, NotImplementedError):
        out = lse = None
    if out is None or lse is None:
        return _math_attention(q, k, v, scale, mask)
    lse = lse.to(acc)
    out = out.to(acc)
    if mask is not None:
        out = torch.where(torch.isneginf(lse).unsqueeze(-1), 0.0, out)
    return out, lse


def merge(out: torch.Tensor | None, lse: torch.Tensor | None, o_s: torch.Tensor,
          lse_s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine two partial softmax results over disjoint key sets: weights ``exp(lse_i - logaddexp(...))``."""
    if out is None or lse is None:
        return o_s, lse_s
    new = torch.logaddexp(lse, lse_s)
    w = torch.exp(lse - new).nan_to_num(0.0).unsqueeze(-1)  # -inf - -inf (no key on either side) -> weight 0
    w_s = torch.exp(lse_s - new).nan_to_num(0.0).unsqueeze(-1)
    return w * out + w_s * o_s, new


# ---------------------------------------------------------------------------------------------------------
# Ring


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: dist.ProcessGroup,
                   key_valid: Callable[[int], object] | None = None, scale: float | None = None) -> torch.Tensor:
    """Ring attention over ``group`` (R ranks): q/k/v ``[B, N, S/R, d]`` of this rank's chunk ->
    ``[B, N, S/R, d]`` (q's dtype). ``key_valid(src)`` says which keys of ring rank ``src``'s chunk are real
    (None, a prefix count, or a bool mask); K/V rotate with ``batch_isend_irecv`` overlapped with compute."""
    r = dist.get_world_size(group)
    me = dist.get_rank(group)
    nxt = dist.get_global_rank(group, (me + 1) % r)
    prv = dist.get_global_rank(group, (me - 1) % r)
    kv = torch.stack([k, v]).contiguous()
    out = lse = None
    for step in range(r):
        src = (me - step) % r
        reqs = []
        if step < r - 1:
            buf = torch.empty_like(kv)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, kv, nxt, group),
                                           dist.P2POp(dist.irecv, buf, prv, group)])
        valid = key_valid(src) if key_valid is not None else None
        kk, vv, mask = kv[0], kv[1], None
        if isinstance(valid, int):
            kk, vv = kk[:, :, :valid], vv[:, :, :valid]
        elif isinstance(valid, torch.Tensor):
            mask = valid
        if kk.shape[2] > 0:
            o_s, lse_s = attention_with_lse(q, kk, vv, scale, mask)
            out, lse = merge(out, lse, o_s, lse_s)
        for req in reqs:
            req.wait()
        if step < r - 1:
            kv = buf
    assert out is not None, "ring attention: no real key in the whole sequence"
    return out.to(q.dtype)


def _sparse_positions(offset: int, length: int, sparse_k: int, mode: SkiparseMode) -> torch.Tensor:
    """Global token positions of a chunk ``[offset, offset+length)`` after the local skiparse permutation:
    ``[k, length/k]`` (sub-sequence, position)."""
    pos = torch.arange(offset, offset + length, dtype=torch.float64).view(1, 1, length, 1)
    return skiparse_permute(pos, sparse_k, mode).view(sparse_k, length // sparse_k)


# ---------------------------------------------------------------------------------------------------------
# USP (Ulysses inside, Ring outside), with padding and skiparse


def usp_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, length: int,
                  ulysses_group: dist.ProcessGroup | None, ring_group: dist.ProcessGroup | None,
                  backend: Callable[..., torch.Tensor] | None = None, backend_masks: bool = True,
                  sparse: tuple[int, SkiparseMode] | None = None) -> torch.Tensor:
    """Self-attention of a sequence split over ``ulysses x ring`` ranks.

    q/k/v ``[B, N, Lp/sp, d]``: this rank's chunk of the sequence zero-padded to ``Lp`` (a multiple of sp;
    of sp * k^2 when ``sparse`` is given and ring > 1); ``length`` = real tokens (keys beyond are ignored).
    ``backend(q, k, v[, attn_mask])`` is used whenever the whole sequence is local (ring 1); ring blocks use
    :func:`attention_with_lse`. ``sparse`` = ``(k, mode)`` runs skiparse. Returns ``[B, N, Lp/sp, d]``.
    """
    if ulysses_group is not None:
        qkv = seq_to_heads(torch.cat([q, k, v]), ulysses_group)
        q, k, v = qkv.chunk(3)
    b = q.shape[0]
    if ring_group is None:  # the whole sequence is here: drop the padding, run the dispatch's backend
        lp = q.shape[2]
        qs, ks, vs = (t[:, :, :length] for t in (q, k, v))
        fn = backend if backend is not None else F.scaled_dot_product_attention
        if sparse is None:
            o = fn(qs, ks, vs)
        else:
            o = skiparse_attention(qs, ks, vs, sparse[0], sparse[1], fn, masks=backend_masks)
        out = F.pad(o, (0, 0, 0, lp - length)) if lp > length else o
    else:
        seg = q.shape[2]  # tokens per ring rank (after Ulysses)
        if sparse is None:
            def valid(src: int):
                n = min(max(length - src * seg, 0), seg)
                return None if n == seg else n
            out = ring_attention(q, k, v, ring_group, valid)
        else:
            sk, mode = sparse
            if seg % (sk * sk):
                raise ValueError(f"skiparse k={sk} under ring attention needs chunks of a multiple of {sk * sk} "
                                 f"tokens, got {seg} (pad the sequence to a multiple of sp * k^2)")
            qp, kp, vp = (skiparse_permute(t, sk, mode) for t in (q, k, v))

            def valid(src: int):
                pos = _sparse_positions(src * seg, seg, sk, mode)  # [k, seg/k]
                if bool((pos < length).all()):
                    return None
                m = (pos < length).to(q.device).view(sk, 1, 1, 1, seg // sk).expand(sk, b, 1, 1, seg // sk)
                return m.reshape(sk * b, 1, 1, seg // sk)
            out = skiparse_unpermute(ring_attention(qp, kp, vp, ring_group, valid), sk, mode, seg)
    if ulysses_group is not None:
        out = heads_to_seq(out.contiguous(), ulysses_group)
    return out
