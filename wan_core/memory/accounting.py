"""Memory accounting (docs/memory.md section 5): peak memory per stage and where it went (weights, the rest =
activations and workspace), on CUDA from the caching allocator's statistics, on the CPU from the process's
resident memory (Linux ``VmHWM``, reset per stage through ``/proc/self/clear_refs``).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .streaming import peak_rss_bytes, rss_bytes, tensor_bytes

__all__ = ["MemoryMeter", "StagePeak", "gib", "model_bytes", "reset_peak_rss"]


def gib(n: float) -> str:
    """Bytes as "1.23 GiB" (or MiB below 1 GiB)."""
    return f"{n / 2**30:.2f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.0f} MiB"


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS to its current RSS (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def model_bytes(model, device: torch.device | None = None) -> int:
    """Bytes of a model's weights (a WanDiT, WanVAE, TextEncoder or any nn.Module), only those on ``device``'s
    type when given (so a block-swapped DiT counts its resident part on the GPU)."""
    if model is None:
        return 0
    module = model if isinstance(model, torch.nn.Module) else getattr(model, "model", None)
    if not isinstance(module, torch.nn.Module):
        return 0
    if device is None:
        return tensor_bytes(module)
    return sum(t.numel() * t.element_size() for t in list(module.parameters()) + list(module.buffers())
               if t.device.type == torch.device(device).type)


@dataclass
class StagePeak:
    name: str
    peak: int  # bytes at the peak of the stage (CUDA allocated, or process RSS)
    weights: int  # bytes of the weights on that memory during the stage
    start: int  # bytes in use when the stage began

    def line(self, kind: str) -> str:
        rest = max(0, self.peak - self.weights)
        return f"{self.name}: peak {gib(self.peak)} {kind} (weights {gib(self.weights)}, other {gib(rest)})"


class MemoryMeter:
    """Records the peak of each stage: ``with meter.stage("sampling", weights=...)``; ``meter.lines()``.

    ``device``: the compute device; CUDA peaks come from ``torch.cuda.max_memory_allocated``, CPU peaks from
    the process RSS (which also counts the interpreter and libraries: ``start`` says how much was there)."""

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda" and torch.cuda.is_available()
        self.stages: list[StagePeak] = []

    @property
    def kind(self) -> str:
        return f"CUDA ({self.device})" if self.cuda else "RAM (RSS)"

    def now(self) -> int:
        return int(torch.cuda.memory_allocated(self.device)) if self.cuda else rss_bytes()

    @contextlib.contextmanager
    def stage(self, name: str, weights: int = 0) -> Iterator[None]:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            reset_peak_rss()
        start = self.now()
        try:
            yield
        finally:
            if self.cuda:
                torch.cuda.synchronize(self.device)
                peak = int(torch.cuda.max_memory_allocated(self.device))
            else:
                peak = peak_rss_bytes()
            self.stages.append(StagePeak(name, peak, weights, start))

    def lines(self) -> list[str]:
        """One line per stage: "memory, sampling: peak 9.81 GiB CUDA (cuda:0) (weights 7.02 GiB, other ...)"."""
        return [f"memory, {s.line(self.kind)}" for s in self.stages]

    def peak(self) -> int:
        return max((s.peak for s in self.stages), default=0)
