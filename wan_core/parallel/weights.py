"""Which weights the workers of a pool still need (docs/parallel.md section 12).

Rank 0 sends a model's weights to its workers once, through shared memory, and keeps, per weight, the fingerprint
of what it sent: the base model it came from and the patches applied to it (LoRA strengths and the patch
objects themselves, compared by identity, so a freed and reallocated object is never mistaken for the same).
On the next forward only the weights whose fingerprint changed are sent again: a changed LoRA strength re-sends
the weights that LoRA patches, another base model re-sends everything.
"""
from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import torch

_PLAIN = (int, float, complex, str, bytes, bool, type(None))


def same(a: Any, b: Any) -> bool:
    """Plain values by equality, tuples and lists element-wise, anything else by identity."""
    if isinstance(a, _PLAIN) or isinstance(b, _PLAIN):
        return type(a) is type(b) and a == b
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a is b


class WeightVersions:
    """The fingerprints of the weights a pool's workers hold (one instance per pool)."""

    def __init__(self) -> None:
        self._base: weakref.ref | None = None
        self._sent: dict[str, Any] = {}  # keeps the patch objects alive: identity stays meaningful
        self.version: Any = None  # a cheap token of everything sent (rank 0's patch-set id), or None

    def changed(self, base: Any, patches: dict[str, Any], keys: Iterable[str]) -> list[str]:
        """The names among ``keys`` to (re)send for ``base`` with ``patches`` (name -> its patches)."""
        if self._base is None or self._base() is not base:
            return list(keys)
        return [k for k in keys if k not in self._sent or not same(self._sent[k], patches.get(k, ()))]

    def commit(self, base: Any, patches: dict[str, Any], keys: Iterable[str], version: Any = None) -> None:
        """The workers now hold ``keys`` of ``base`` with these patches."""
        if self._base is None or self._base() is not base:
            self._sent = {}
            self._base = weakref.ref(base)
        for k in keys:
            self._sent[k] = patches.get(k, ())
        self.version = version


def shared_copies(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU copies in shared memory (one copy for all workers; each worker copies it to its device)."""
    return {k: t.detach().to("cpu", copy=True).share_memory_() for k, t in tensors.items()}


def nbytes(tensors: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())
