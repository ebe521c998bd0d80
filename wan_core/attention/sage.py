"""Backend ``sage``: ``sageattention.sageattn`` on CUDA, a named fallback elsewhere
(docs/algorithms.md sections 3.1-3.2).

K is smoothed here (a new tensor) and the kernel is called with ``smooth_k=False``, so the caller's K is
never modified (sageattention 1.x subtracts the mean in place). When the package is missing, the tensors
are not on CUDA, a mask is given, or the kernel raises, one warning per process names the fallback:
``int8`` (the same algorithm in torch) on CPU, ``sdpa`` on CUDA.
"""
from __future__ import annotations

import functools

import torch

from .dispatch import get_backend, warn_once


@functools.lru_cache(maxsize=1)
def _load_sageattn():
    """``(sageattn, None)`` or ``(None, reason)``."""
    try:
        from sageattention import sageattn
    except Exception as e:  # ImportError, or a broken CUDA/Triton install raising at import
        return None, f"sageattention is not importable ({type(e).__name__}: {e}); install it with " \
                     f"'pip install sageattention' on a CUDA machine"
    return sageattn, None


def sage_kernel_installed() -> bool:
    """True when the SageAttention package imports here (its kernel then runs on CUDA tensors)."""
    return _load_sageattn()[0] is not None


def sage_kernel_usable(q: torch.Tensor) -> tuple[bool, str]:
    """Whether the CUDA kernel can take this call, and if not, why."""
    fn, reason = _load_sageattn()
    if fn is None:
        return False, reason
    if not q.is_cuda:
        return False, f"tensors are on {q.device.type}, SageAttention needs CUDA"
    return True, ""


def _fallback(q, k, v, scale, attn_mask, reason: str) -> torch.Tensor:
    name = "sdpa" if q.is_cuda else "int8"
    warn_once(f"sage->{name}", f"attention=sage: {reason}; using the '{name}' attention backend instead")
    return get_backend(name).fn(q, k, v, scale=scale, attn_mask=attn_mask)


def sage_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
                   attn_mask: torch.Tensor | None = None) -> torch.Tensor:
    """q ``[B, N, Lq, d]``, k/v ``[B, N, Lk, d]`` -> ``[B, N, Lq, d]``; SageAttention kernel when usable."""
    ok, reason = sage_kernel_usable(q)
    if ok and attn_mask is not None:
        ok, reason = False, "the SageAttention kernel takes no attention mask"
    if not ok:
        return _fallback(q, k, v, scale, attn_mask, reason)
    fn, _ = _load_sageattn()
    dtype = q.dtype
    half = dtype if dtype in (torch.float16, torch.bfloat16) else torch.bfloat16
    ks = k - k.mean(dim=2, keepdim=True)  # smoothing (exact for softmax); a new tensor, K is untouched
    try:
        out = fn(q.to(half), ks.to(half), v.to(half), tensor_layout="HND", is_causal=False, sm_scale=scale,
                 smooth_k=False)
    except Exception as e:  # unsupported head_dim / GPU generation: degrade loudly, never crash
        return _fallback(q, k, v, scale, attn_mask, f"the SageAttention kernel failed ({type(e).__name__}: {e})")
    return out.to(dtype)
