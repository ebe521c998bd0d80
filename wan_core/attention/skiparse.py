"""Skiparse sparse self-attention and its block schedules (docs/algorithms.md sections 1.1, 1.2 and 6.1).

Each sparse block splits the token axis into ``k`` sub-sequences of ``L'/k`` tokens (``L'`` = L padded to a
multiple of k^2) and attends inside each one: "single" skip takes every k-th token, "group" skip takes runs
of k consecutive tokens every k^2 tokens (the seed's ``b (g k) d -> (k b) g d`` and
``b (n m k) d -> (m b) (n k) d`` rearrangements, sub-sequences folded into the batch, group-major). RoPE is
already applied to q/k when they reach the dispatcher, so permuting there is correct. Cross-attention stays
dense. Every sparse schedule is a training-free approximation of the dense model: outputs change.
Tensors use the dispatch layout ``[B, N, L, d]``.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Literal, get_args
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .steps import check_step_range, step_in_range

SkiparseMode = Literal["single", "group"]
Skiparse = Literal["none", "osp13", "suv", "custom"]
MODES: tuple[str, ...] = get_args(SkiparseMode)
SCHEDULES: tuple[str, ...] = get_args(Skiparse)
SUV_PROFILE = (1, 2, 4, 8, 4, 2, 1)  # Open-Sora Plan v1.5 per-stage sparse ratios


def _check(sparse_k: int, mode: str) -> None:
    if isinstance(sparse_k, bool) or not isinstance(sparse_k, int) or sparse_k < 1:
        raise ValueError(f"skiparse ratio k must be an int >= 1, got {sparse_k!r}")
    if mode not in MODES:
        raise ValueError(f"skiparse mode must be one of {MODES}, got {mode!r}")


def pad_length(length: int, sparse_k: int) -> int:
    """Tokens appended so the sequence is a multiple of k^2 (in both modes, as the reference does)."""
    kk = sparse_k * sparse_k
    return (kk - length % kk) % kk


def skiparse_permute(x: torch.Tensor, sparse_k: int, mode: SkiparseMode) -> torch.Tensor:
    """``[B, N, L, d] -> [k*B, N, L'/k, d]``: zero-pad to L' (multiple of k^2), then regroup (group-major batch).

    single: token i -> sub-sequence ``i % k``, position ``i // k``.
    group:  token i = n*k^2 + m*k + j -> sub-sequence m, position ``n*k + j``.
    """
    _check(sparse_k, mode)
    b, n, length, d = x.shape
    k = sparse_k
    pad = pad_length(length, k)
    if pad:
        x = F.pad(x, (0, 0, 0, pad))
    lp = length + pad
    if mode == "single":
        y = x.reshape(b, n, lp // k, k, d).permute(3, 0, 1, 2, 4)
    else:
        y = x.reshape(b, n, lp // (k * k), k, k, d).permute(3, 0, 1, 2, 4, 5)
    return y.reshape(k * b, n, lp // k, d)


def skiparse_unpermute(y: torch.Tensor, sparse_k: int, mode: SkiparseMode, length: int) -> torch.Tensor:
    """Inverse of :func:`skiparse_permute`: ``[k*B, N, L'/k, d] -> [B, N, length, d]`` (padding dropped)."""
    _check(sparse_k, mode)
    kb, n, lg, d = y.shape
    k = sparse_k
    if kb % k:
        raise ValueError(f"skiparse: batch {kb} is not a multiple of k={k}")
    b, lp = kb // k, lg * k
    if lp % (k * k) or not 0 < length <= lp:
        raise ValueError(f"skiparse: {lg} tokens per group cannot hold {length} tokens for k={k}")
    if mode == "single":
        x = y.reshape(k, b, n, lg, d).permute(1, 2, 3, 0, 4)
    else:
        x = y.reshape(k, b, n, lp // (k * k), k, d).permute(1, 2, 3, 0, 4, 5)
    x = x.reshape(b, n, lp, d)
    return x[:, :, :length] if length < lp else x


@functools.lru_cache(maxsize=64)
def _index(length: int, sparse_k: int, mode: SkiparseMode) -> torch.Tensor:
    lp = length + pad_length(length, sparse_k)
    ar = torch.arange(lp).view(1, 1, lp, 1)
    return skiparse_permute(ar, sparse_k, mode).reshape(-1)


def skiparse_index(length: int, sparse_k: int, mode: SkiparseMode) -> torch.Tensor:
    """The permutation as an index map: ``permuted.flatten(tokens) == padded[index]``, int64 ``[L']``.

    Entry ``g * (L'/k) + p`` is the original position of token p of sub-sequence g; values >= ``length``
    are padding.
    """
    _check(sparse_k, mode)
    return _index(length, sparse_k, mode).clone()


def group_lengths(length: int, sparse_k: int, mode: SkiparseMode) -> list[int]:
    """Real (non-pad) tokens in each of the k sub-sequences; pads always sit at the end of a sub-sequence."""
    _check(sparse_k, mode)
    idx = _index(length, sparse_k, mode).view(sparse_k, -1)
    return (idx < length).sum(1).tolist()


@functools.lru_cache(maxsize=64)
def _key_mask(length: int, sparse_k: int, mode: SkiparseMode) -> torch.Tensor | None:
    if not pad_length(length, sparse_k):
        return None
    return (_index(length, sparse_k, mode) < length).view(sparse_k, 1, 1, -1)


def skiparse_key_mask(length: int, sparse_k: int, mode: SkiparseMode, batch: int,
                      device: torch.device | str | None = None) -> torch.Tensor | None:
    """Bool key mask ``[k*B, 1, 1, L'/k]`` (True = real key, False = padding), None when nothing is padded."""
    _check(sparse_k, mode)
    m = _key_mask(length, sparse_k, mode)
    if m is None:
        return None
    return m.repeat_interleave(batch, dim=0).to(device)


def _attend_by_length(q, k, v, lengths: list[int], batch: int, attn: Callable) -> torch.Tensor:
    """Mask-free padding: run the backend once per distinct sub-sequence length on the unpadded prefixes."""
    out = None
    for c in sorted(set(lengths)):
        if c == 0:
            continue
        rows = [g * batch + b for g, n in enumerate(lengths) if n == c for b in range(batch)]
        idx = torch.tensor(rows, device=q.device)
        part = attn(*(t[:, :, :c].index_select(0, idx) for t in (q, k, v)))  # contiguous copies
        if out is None:
            out = q.new_zeros(q.shape[:-1] + (v.shape[-1],), dtype=part.dtype)
        out[rows, :, :c] = part
    assert out is not None, "skiparse: every group is empty (sequence length 0)"
    return out


def skiparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sparse_k: int, mode: SkiparseMode,
                       attn: Callable | None = None, *, masks: bool = True) -> torch.Tensor:
    """Skiparse self-attention: permute, attend inside each sub-sequence, restore token order.

    q/k/v ``[B, N, L, d]`` (RoPE already applied) -> ``[B, N, L, d]``. ``attn(q, k, v, attn_mask=None)`` is
    the dense backend (default: torch SDPA). When L is not a multiple of k^2 the pad keys are excluded:
    with ``masks=True`` through a bool key mask passed to ``attn``, otherwise (backends without mask support)
    by running each group of equal-length sub-sequences on its unpadded prefix.
    """
    if attn is None:
        attn = F.scaled_dot_product_attention
    if k.shape[2] != q.shape[2]:
        raise ValueError(f"skiparse is for self-attention: q has {q.shape[2]} tokens, k has {k.shape[2]}")
    b, _, length, _ = q.shape
    qp, kp, vp = (skiparse_permute(t, sparse_k, mode) for t in (q, k, v))
    if not pad_length(length, sparse_k):
        out = attn(qp, kp, vp)
    elif masks:
        out = attn(qp, kp, vp, attn_mask=skiparse_key_mask(length, sparse_k, mode, b, q.device))
    else:
        out = _attend_by_length(qp, kp, vp, group_lengths(length, sparse_k, mode), b, attn)
    return skiparse_unpermute(out, sparse_k, mode, length)


# ---------------------------------------------------------------------------------------------------------
# Schedules: which blocks are sparse, with which k and mode


def suv_stage_blocks(num_layers: int, num_stages: int = 7) -> tuple[int, ...]:
    """Split ``num_layers`` blocks into a symmetric U of stages shaped like the v1.5 release (2,4,6,8,6,4,2).

    Stage sizes are even where possible (single/group alternation); the middle stage absorbs the rest.
    30 blocks -> (2, 4, 6, 6, 6, 4, 2); 40 -> (2, 4, 8, 12, 8, 4, 2); 32 -> the release table.
    """
    if num_stages < 1 or num_stages % 2 == 0:
        raise ValueError(f"SUV needs an odd number of stages, got {num_stages}")
    weights = [2 * (min(i, num_stages - 1 - i) + 1) for i in range(num_stages)]
    unit = 2 if num_layers >= 2 * num_stages else 1
    sizes = [max(unit, unit * round(w / sum(weights) * num_layers / unit)) for w in weights]
    mid = num_stages // 2
    sizes[mid] += num_layers - sum(sizes)
    if sizes[mid] < 1:
        raise ValueError(f"cannot split {num_layers} blocks into {num_stages} U-shaped stages; pass the "
                         f"stage sizes explicitly (suv_stage_blocks) or use a shorter profile")
    return tuple(sizes)


@dataclass(frozen=True)
class SkiparseSchedule:
    """Per-block sparse ratio ``ks[i]`` (1 = dense) and mode ``modes[i]``; ``steps`` limits the sampling
    steps where it is active (see ``steps.py``; None = every step and calls with no step set).

    Build with :meth:`osp13`, :meth:`suv` or :meth:`custom`. All sparse schedules approximate the dense model.
    """

    ks: tuple[int, ...]
    modes: tuple[SkiparseMode, ...]
    steps: tuple | None = None
    name: str = "custom"

    def __post_init__(self):
        object.__setattr__(self, "ks", tuple(self.ks))
        object.__setattr__(self, "modes", tuple(self.modes))
        object.__setattr__(self, "steps", check_step_range(self.steps, "skiparse steps"))
        if len(self.ks) != len(self.modes):
            raise ValueError(f"skiparse schedule: {len(self.ks)} ratios but {len(self.modes)} modes")
        for k, m in zip(self.ks, self.modes):
            _check(k, m)

    @property
    def num_layers(self) -> int:
        return len(self.ks)

    def plan(self, layer: int, step: int | None = None,
             total: int | None = None) -> tuple[int, SkiparseMode] | None:
        """``(k, mode)`` for block ``layer`` at this step, or None for dense attention."""
        if not 0 <= layer < len(self.ks):
            raise ValueError(f"skiparse schedule {self.name!r} covers {len(self.ks)} blocks; block {layer} "
                             f"is out of range (build the schedule for this model's block count)")
        if self.steps is not None and not step_in_range(self.steps, step, total):
            return None
        k = self.ks[layer]
        return None if k == 1 else (k, self.modes[layer])

    def describe(self) -> str:
        """One line per schedule, e.g. ``osp13: 1 1 4s 4g 4s ... 1 1``."""
        cells = ["1" if k == 1 else f"{k}{m[0]}" for k, m in zip(self.ks, self.modes)]
        return f"{self.name}: " + " ".join(cells)

    @classmethod
    def osp13(cls, num_layers: int, k: int = 4, dense_first: int = 2, dense_last: int = 2,
              steps=None) -> "SkiparseSchedule":
        """Open-Sora Plan v1.3: first/last two blocks dense, even blocks single skip, odd blocks group skip."""
        ks = tuple(k if dense_first <= i < num_layers - dense_last else 1 for i in range(num_layers))
        modes: tuple[SkiparseMode, ...] = tuple("single" if i % 2 == 0 else "group" for i in range(num_layers))
        return cls(ks, modes, steps, "osp13")

    @classmethod
    def suv(cls, num_layers: int, profile: Sequence[int] = SUV_PROFILE,
            stage_blocks: Sequence[int] | None = None, steps=None) -> "SkiparseSchedule":
        """Open-Sora Plan v1.5 U-shape: stage s has ratio ``profile[s]``; inside a stage, blocks alternate
        single (even index in the stage) / group (odd). Stage sizes default to :func:`suv_stage_blocks`."""
        profile = tuple(int(k) for k in profile)
        sizes = tuple(stage_blocks) if stage_blocks is not None else suv_stage_blocks(num_layers, len(profile))
        if len(sizes) != len(profile):
            raise ValueError(f"SUV: {len(sizes)} stage sizes for {len(profile)} stage ratios")
        if sum(sizes) != num_layers or min(sizes) < 1:
            raise ValueError(f"SUV stage sizes {list(sizes)} must be >= 1 and sum to {num_layers} blocks")
        ks, modes = [], []
        for n, k in zip(sizes, profile):
            ks += [k] * n
            modes += ["single" if j % 2 == 0 else "group" for j in range(n)]
        return cls(tuple(ks), tuple(modes), steps, "suv")

    @classmethod
    def custom(cls, ks: Sequence[int], modes: Sequence[SkiparseMode] | None = None, steps=None) -> "SkiparseSchedule":
        """A ratio per block; modes default to single on even, group on odd block indices."""
        ks = tuple(int(k) for k in ks)
        modes = tuple(modes) if modes is not None else tuple(
            "single" if i % 2 == 0 else "group" for i in range(len(ks)))
        return cls(ks, modes, steps, "custom")


def skiparse_schedule(name: Skiparse, num_layers: int, *, k: int = 4, ks: Sequence[int] | None = None,
                      modes: Sequence[SkiparseMode] | None = None, profile: Sequence[int] = SUV_PROFILE,
                      stage_blocks: Sequence[int] | None = None, steps=None) -> SkiparseSchedule | None:
    """Schedule by name: ``none`` (None), ``osp13`` (ratio ``k``), ``suv`` (``profile``, ``stage_blocks``),
    ``custom`` (``ks`` per block, optional ``modes``)."""
    if name == "none":
        return None
    if name == "osp13":
        return SkiparseSchedule.osp13(num_layers, k, steps=steps)
    if name == "suv":
        return SkiparseSchedule.suv(num_layers, profile, stage_blocks, steps=steps)
    if name == "custom":
        if ks is None:
            raise ValueError("skiparse='custom' needs skiparse_ks: one ratio per block (1 = dense)")
        if len(ks) != num_layers:
            raise ValueError(f"skiparse='custom': {len(ks)} ratios given for a {num_layers}-block model")
        return SkiparseSchedule.custom(ks, modes, steps=steps)
    raise ValueError(f"unknown skiparse schedule {name!r}; choose one of {', '.join(SCHEDULES)}")
