"""Regional ``torch.compile`` of the DiT blocks (docs/memory.md section 4): one compiled block forward shared by
every block, the embeddings, head and hooks left eager.

Each block's ``forward`` becomes the same compiled function bound to that block, so the block's ``__call__``
(and its forward hooks: block swap, caches) stays outside the compiled region, and dynamo compiles the block
code once: parameters are graph inputs (PyTorch >= 2.5 inlines built-in modules), the block index turns
dynamic after the second block, latent shapes after the second size (automatic dynamic shapes). Where compile
cannot work (no ``torch.compile``, no triton for CUDA, no C++ compiler for CPU) a one-line warning says so and
the blocks stay eager; a compile failure at the first call does the same, never a crash.
"""
from __future__ import annotations

import os
import shutil
import sys
import types
import warnings
from typing import Any

import torch
import torch.nn as nn

__all__ = ["compile_blocks", "compile_unavailable", "uncompile_blocks", "CompileUnavailableWarning"]


class CompileUnavailableWarning(RuntimeWarning):
    """torch.compile cannot run here; the blocks run eager (the message says why and what to install)."""


def compile_unavailable(device: torch.device | str, backend: str = "inductor") -> str:
    """Why ``torch.compile`` with ``backend`` cannot run on ``device`` here ("" when it can, as far as can be
    told without compiling)."""
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile (needs PyTorch >= 2.0)"
    if backend != "inductor":
        return ""
    dev = torch.device(device)
    if dev.type == "cuda":
        try:
            from torch.utils._triton import has_triton
        except ImportError:  # pragma: no cover - very old torch
            return "torch.compile on CUDA needs triton, which this PyTorch cannot find"
        if not has_triton():
            hint = "pip install triton-windows" if sys.platform == "win32" else "pip install triton"
            return f"torch.compile on CUDA needs triton ({hint})"
        return ""
    if dev.type == "cpu":
        compilers = [os.environ.get("CXX", ""), "g++", "c++", "clang++", "cl"]
        if not any(c and shutil.which(c) for c in compilers):
            return "torch.compile on the CPU needs a C++ compiler (g++, clang++ or MSVC's cl) on PATH"
        return ""
    return ""


def _warn(message: str) -> None:
    warnings.warn(f"compile_blocks: {message}; the blocks run eager", CompileUnavailableWarning, stacklevel=3)


class _SharedForward:
    """The compiled block forward, shared by all blocks of one class; eager from the first compile failure."""

    def __init__(self, eager, backend: str, mode: str | None, dynamic: bool | None):
        self.eager = eager
        self.compiled = torch.compile(eager, backend=backend, mode=mode, dynamic=dynamic)
        self.failed = ""

    def __call__(self, block: nn.Module, *args: Any, **kwargs: Any):
        if not self.failed:
            try:
                return self.compiled(block, *args, **kwargs)
            except torch._dynamo.exc.TorchDynamoException as e:  # compiler failures, not model errors
                cause = getattr(e, "inner_exception", None) or e.__cause__ or e
                first = (str(cause).strip().splitlines() or [""])[0]
                self.failed = f"compile failed ({type(e).__name__}, {type(cause).__name__}: {first[:200]})"
                _warn(self.failed)
        return self.eager(block, *args, **kwargs)


def compile_blocks(model: nn.Module, backend: str = "inductor", mode: str | None = None,
                   dynamic: bool | None = None, device: torch.device | str | None = None) -> str:
    """Compile every block of ``model.blocks`` with one shared ``torch.compile`` (regional compile).

    ``backend``/``mode``/``dynamic``: as ``torch.compile`` ("inductor" default; "aot_eager" traces without
    generating kernels). ``device``: where the blocks will run (None = where the model's first parameter is;
    with block swap pass the compute device). Returns "" when compiled, else the reason (also warned once
    as :class:`CompileUnavailableWarning`; the blocks then stay eager). Undo with :func:`uncompile_blocks`.
    Compilation itself happens at the first forward (seconds to minutes per distinct shape).
    """
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        raise TypeError("compile_blocks needs a model with a .blocks ModuleList (a WanDiT)")
    if device is None:
        device = next(model.parameters()).device
    reason = compile_unavailable(device, backend)
    if reason:
        _warn(reason)
        return reason
    shared: dict[type, _SharedForward] = {}
    for block in blocks:
        cls = type(block)
        if cls not in shared:
            shared[cls] = _SharedForward(cls.forward, backend, mode, dynamic)
        vars(block)["forward"] = types.MethodType(shared[cls], block)  # instance attribute: __call__ -> it
    vars(model)["compiled_blocks"] = list(shared.values())
    return ""


def uncompile_blocks(model: nn.Module) -> None:
    """Back to the plain eager blocks."""
    for block in getattr(model, "blocks", []):
        vars(block).pop("forward", None)
    vars(model).pop("compiled_blocks", None)
