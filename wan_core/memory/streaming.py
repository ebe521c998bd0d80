"""Streaming load support: peak RAM near the final model size while a DiT loads (docs/memory.md).

``load_dit`` builds the model on the ``meta`` device and fills it tensor by tensor, converting each (e.g. to
fp8) as it is read; the safetensors reader uses plain file reads (no memory-mapped page stays resident). What
remains is the C allocator: glibc keeps freed per-tensor buffers (the fp16 read, its float32 copy) in its heap
and the next, differently sized ones land beside them, so resident memory creeps towards twice the model.
:func:`release_freed_memory` hands free heap pages back after every tensor (``malloc_trim``), which keeps the
peak within ~1.2x of the final size (``tests/memory/test_streaming_load.py`` measures it in a subprocess).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from collections.abc import Callable

import torch

__all__ = ["release_freed_memory", "releasing_progress", "peak_rss_bytes", "rss_bytes", "tensor_bytes"]


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim  # glibc only; musl has no malloc_trim
    except (OSError, AttributeError):
        return None


def release_freed_memory() -> None:
    """Return the C heap's free pages to the system (glibc ``malloc_trim(0)``; a no-op elsewhere)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def releasing_progress(progress: Callable[[int, int], None] | None) -> Callable[[int, int], None]:
    """A per-tensor ``progress(done, total)`` for the loaders that also releases the freed buffers."""
    def step(done: int, total: int) -> None:
        release_freed_memory()
        if progress is not None:
            progress(done, total)
    return step


def _status(field: str) -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def rss_bytes() -> int:
    """Resident memory of this process now (Linux ``VmRSS``; ``ru_maxrss`` elsewhere; 0 if unknown)."""
    value = _status("VmRSS")
    return value or peak_rss_bytes()


def peak_rss_bytes() -> int:
    """Peak resident memory of this process (Linux ``VmHWM``; ``ru_maxrss`` elsewhere)."""
    value = _status("VmHWM")
    if value:
        return value
    try:
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak) * (1 if sys.platform == "darwin" else 1024)
    except (ImportError, OSError):
        return 0


def tensor_bytes(module: torch.nn.Module) -> int:
    """Bytes of a module's parameters and buffers (shared tensors once)."""
    seen: set[int] = set()
    total = 0
    for t in list(module.parameters()) + list(module.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total
