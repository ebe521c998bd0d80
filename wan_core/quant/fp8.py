"""FP8 linear layers: float8 weight storage with a per-tensor or per-output-channel scale
(docs/algorithms.md section 5).

``W ~= W8 * scale`` with ``W8`` float8_e4m3fn ``[N, K]`` and ``scale`` float32 ``[]`` or ``[N]``. Compute modes:
``upcast`` dequantises the weight per layer per call and runs the GEMM in the compute dtype (same numbers as
a model dequantised on load); ``scaled_mm`` quantises the activations per token (``s_a = max|x| / 448``) and
runs ``torch._scaled_mm`` with row-wise scales (CUDA SM89+ and CPU builds that have it); where that is not
supported a one-line warning says so and the layer upcasts.
"""
from __future__ import annotations

import functools
import re
import warnings
from typing import Literal, cast, get_args

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..checkpoint import FP8_DTYPES, dequantize

Gemm = Literal["upcast", "scaled_mm"]
Granularity = Literal["tensor", "channel"]
GEMM_MODES: tuple[str, ...] = get_args(Gemm)
GRANULARITIES: tuple[str, ...] = get_args(Granularity)
FP8_E4M3 = torch.float8_e4m3fn
FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}
_TINY = torch.finfo(torch.float32).tiny
_QUANT_CHUNK = 1 << 22  # float32 elements per quantisation chunk

# Linear layers converted when a full-precision DiT is quantised on load: the ones inside the blocks.
# Embeddings (patch/text/time), time projection, norms, modulation and the head stay high precision.
# (k_img / v_img: the image cross-attention of Wan 2.1 I2V / FLF2V; vace_blocks: a VACE model's VACE blocks, whose
# before_proj / after_proj stay high precision like the other projections outside the attention / FFN)
BLOCK_LINEAR = re.compile(r"^(?:vace_)?blocks\.\d+\.(?:(?:self_attn|cross_attn)\.(?:[qkvo]|k_img|v_img)|ffn\.[02])$")

_WARNED: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def is_block_linear(name: str) -> bool:
    """True for the DiT Linear layers FP8 applies to on quantise-on-load (``blocks.i.self_attn.q`` ...)."""
    return BLOCK_LINEAR.match(name) is not None


def quantize_weight(w: torch.Tensor, granularity: Granularity = "tensor", scaled: bool = True,
                    fp8_dtype: torch.dtype = FP8_E4M3) -> tuple[torch.Tensor, torch.Tensor]:
    """``w [N, K]`` -> ``(w8 [N, K] fp8, scale float32)``: scale ``[]`` (tensor) or ``[N]`` (channel).

    ``scaled=False`` is a plain saturating cast with scale 1 (ComfyUI's "fp8_e4m3fn" weight dtype).
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"fp8 granularity must be one of {GRANULARITIES}, got {granularity!r}")
    fmax = FP8_MAX[fp8_dtype]
    if w.is_meta:  # shapes only (a size estimate or a shape-only load, docs/memory.md section 2)
        shape = () if granularity == "tensor" or not scaled else (w.shape[0],)
        return torch.empty(w.shape, dtype=fp8_dtype, device="meta"), torch.empty(shape, device="meta")
    if not scaled:
        scale = torch.ones((), device=w.device)
    else:  # max |w| without a temporary copy of w (the streaming load's peak RAM, docs/memory.md)
        lo, hi = torch.aminmax(w) if granularity == "tensor" else torch.aminmax(w, dim=1)
        scale = (torch.maximum(lo.abs(), hi.abs()).float() / fmax).clamp_min(_TINY)
    # row chunks of ~16 MB in float32: the same elementwise results as the whole tensor at once
    w8 = torch.empty(w.shape, dtype=fp8_dtype, device=w.device)
    rows = max(1, _QUANT_CHUNK // max(1, w[0].numel()))
    for r in range(0, w.shape[0], rows):
        part = w[r:r + rows].to(torch.float32, copy=True)
        if scaled:
            part.div_(scale if scale.dim() == 0 else scale[r:r + rows, None])
        w8[r:r + rows] = part.clamp_(-fmax, fmax)
    return w8, scale.float()


def quantize_activation_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token FP8: ``x [M, K]`` -> ``(x8 [M, K] e4m3, s [M, 1] float32)`` with ``x ~= x8 * s``."""
    xf = x.float()
    s = (xf.abs().amax(dim=1, keepdim=True) / FP8_MAX[FP8_E4M3]).clamp_min_(1e-12)
    return (xf / s).clamp_(-448.0, 448.0).to(FP8_E4M3), s


@functools.lru_cache(maxsize=16)
def _scaled_mm_probe(device: str, out_dtype: torch.dtype) -> str:
    """'' if row-wise FP8 ``_scaled_mm`` with ``out_dtype`` works on ``device``, else the reason."""
    if not hasattr(torch, "_scaled_mm"):
        return "this torch build has no torch._scaled_mm"
    dev = torch.device(device)
    if dev.type == "cuda":
        major, minor = torch.cuda.get_device_capability(dev)
        if (major, minor) < (8, 9):
            return f"FP8 GEMM needs an SM89+ GPU, this one is SM{major}{minor}"
    try:
        a = torch.ones(32, 32, device=dev).to(FP8_E4M3)
        b = torch.ones(32, 32, device=dev).to(FP8_E4M3)
        y = torch._scaled_mm(a, b.t(), scale_a=torch.ones(32, 1, device=dev), scale_b=torch.ones(1, 32, device=dev),
                             out_dtype=out_dtype)
        if not torch.allclose(y.float(), torch.full_like(y.float(), 32.0)):
            return "torch._scaled_mm returned wrong values in a self-test"
    except Exception as e:  # RuntimeError / NotImplementedError from the backend
        return f"torch._scaled_mm with row-wise scales and {str(out_dtype).replace('torch.', '')} output " \
               f"failed ({type(e).__name__}: {str(e).splitlines()[0]})"
    return ""


def scaled_mm_support(device: torch.device | str, out_dtype: torch.dtype = torch.bfloat16) -> str:
    """'' when ``gemm="scaled_mm"`` runs on ``device`` with ``out_dtype`` output, else why it does not."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return _scaled_mm_probe(str(dev), out_dtype)


def fp8_linear(x: torch.Tensor, w8: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None, *,
               gemm: Gemm = "upcast", compute_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``y = x (w8 * scale)^T + bias``; x ``[..., K]``, w8 ``[N, K]`` fp8, scale ``[]``/``[N]`` -> ``[..., N]``
    in ``compute_dtype`` (default x's dtype)."""
    dtype = compute_dtype or x.dtype
    if gemm == "scaled_mm":
        reason = scaled_mm_support(x.device, dtype)
        if reason:
            _warn_once(f"scaled_mm:{x.device.type}:{dtype}",
                       f"gemm=scaled_mm: {reason}; using gemm=upcast (fp8 weights dequantised per layer)")
        else:
            return _scaled_mm_linear(x, w8, scale, bias, dtype)
    elif gemm != "upcast":
        raise ValueError(f"gemm must be one of {GEMM_MODES}, got {gemm!r}")
    return F.linear(x.to(dtype), dequantize(w8, scale, dtype), bias)


def _scaled_mm_linear(x, w8, scale, bias, dtype):
    n, k = w8.shape
    lead = x.shape[:-1]
    x8, sa = quantize_activation_rows(x.reshape(-1, k))
    sb = scale.float().reshape(1, -1).expand(1, n).contiguous()
    y = torch._scaled_mm(x8, w8.t(), scale_a=sa, scale_b=sb, out_dtype=dtype)
    if bias is not None:
        y = y + bias.to(dtype)
    return y.reshape(*lead, n)


class FP8Linear(nn.Module):
    """``nn.Linear`` replacement with fp8 ``weight [N, K]``, float32 ``weight_scale`` (``[]`` or ``[N]``) and a
    bias in ``compute_dtype``. State-dict names: ``weight``, ``weight_scale``, ``bias``.

    ``gemm``: "upcast" | "scaled_mm" (see module docstring). ``module.to(dtype)`` changes the compute dtype
    (bias) and keeps the weight in fp8 and the scale in float32.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 compute_dtype: torch.dtype = torch.bfloat16, gemm: Gemm = "upcast",
                 fp8_dtype: torch.dtype = FP8_E4M3, scale_shape: tuple[int, ...] = (),
                 device: torch.device | str | None = None):
        super().__init__()
        if gemm not in GEMM_MODES:
            raise ValueError(f"gemm must be one of {GEMM_MODES}, got {gemm!r}")
        if fp8_dtype not in FP8_DTYPES:
            raise ValueError(f"fp8_dtype must be a float8 dtype, got {fp8_dtype}")
        self.in_features, self.out_features = in_features, out_features
        self.compute_dtype = compute_dtype
        self.gemm = gemm
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=fp8_dtype, device=device),
                                   requires_grad=False)
        self.register_buffer("weight_scale", torch.ones(scale_shape, dtype=torch.float32, device=device))
        self.bias = nn.Parameter(torch.empty(out_features, dtype=compute_dtype, device=device),
                                 requires_grad=False) if bias else None

    @classmethod
    def from_quantized(cls, w8: torch.Tensor, scale: torch.Tensor | None, bias: torch.Tensor | None = None, *,
                       compute_dtype: torch.dtype = torch.bfloat16, gemm: Gemm = "upcast") -> "FP8Linear":
        """Wrap an fp8 weight ``[N, K]`` and its scale (None = 1; ``[]``, ``[1]``, ``[N]`` or ``[N, 1]``)."""
        n, k = w8.shape
        scale = torch.ones((), device=w8.device) if scale is None else scale.float()
        scale = scale.reshape(()) if scale.numel() == 1 else scale.reshape(-1)
        if scale.numel() not in (1, n):
            raise ValueError(f"fp8 weight [{n}, {k}] has a scale of {scale.numel()} values; expected 1 or {n}")
        layer = cls(k, n, bias is not None, compute_dtype=compute_dtype, gemm=gemm, fp8_dtype=w8.dtype,
                    scale_shape=tuple(scale.shape), device="meta")
        layer.weight = nn.Parameter(w8, requires_grad=False)
        layer.weight_scale = scale.to(w8.device)
        if bias is not None:
            layer.bias = nn.Parameter(bias.to(device=w8.device, dtype=compute_dtype), requires_grad=False)
        return layer

    @classmethod
    def from_linear(cls, linear: nn.Linear, granularity: Granularity = "tensor", scaled: bool = True, *,
                    compute_dtype: torch.dtype | None = None, gemm: Gemm = "upcast") -> "FP8Linear":
        """Quantise an ``nn.Linear`` (its weight is read once; keep no reference to free it)."""
        w8, scale = quantize_weight(linear.weight.detach(), granularity, scaled)
        return cls.from_quantized(w8, scale, None if linear.bias is None else linear.bias.detach(),
                                  compute_dtype=compute_dtype or linear.weight.dtype, gemm=gemm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fp8_linear(x, self.weight, self.weight_scale, self.bias, gemm=self.gemm,
                          compute_dtype=self.compute_dtype)

    def dequantized_weight(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        return dequantize(self.weight, self.weight_scale, dtype or self.compute_dtype)

    def _apply(self, fn, recurse=True):
        # Keep fp8 storage and the float32 scale through module.to(dtype) / .half() / .float().
        w8, scale = self.weight.data, self.weight_scale  # .data: _apply may replace a parameter's data in place
        super()._apply(fn, recurse)
        if self.weight.dtype != w8.dtype:
            self.weight = nn.Parameter(w8.to(self.weight.device), requires_grad=False)
        if self.weight_scale.dtype != torch.float32:
            self.weight_scale = scale.to(self.weight_scale.device)
        if self.bias is not None:
            self.compute_dtype = self.bias.dtype
        return self

    def extra_repr(self) -> str:
        gran = "tensor" if self.weight_scale.dim() == 0 else "channel"
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, weight={str(self.weight.dtype).replace('torch.', '')}, "
                f"scale={gran}, compute={str(self.compute_dtype).replace('torch.', '')}, gemm={self.gemm}")


def _set_submodule(root: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, leaf, module)


def quantize_linears(model: nn.Module, select=is_block_linear, granularity: Granularity = "tensor",
                     scaled: bool = True, gemm: Gemm = "upcast") -> list[str]:
    """Replace the ``nn.Linear`` layers whose name passes ``select`` by :class:`FP8Linear`, one at a time
    (the full-precision weight of each is freed as it is replaced). Returns the converted names."""
    names = [n for n, m in model.named_modules() if type(m) is nn.Linear and select(n)]
    for name in names:
        linear = cast(nn.Linear, model.get_submodule(name))  # the filter above kept nn.Linear only
        _set_submodule(model, name, FP8Linear.from_linear(linear, granularity, scaled, gemm=gemm))
    return names


def set_gemm(model: nn.Module, gemm: Gemm, select=is_block_linear) -> int:
    """Switch the compute mode of the FP8 layers whose name passes ``select``; returns how many."""
    if gemm not in GEMM_MODES:
        raise ValueError(f"gemm must be one of {GEMM_MODES}, got {gemm!r}")
    count = 0
    for name, m in model.named_modules():
        if isinstance(m, FP8Linear) and select(name):
            m.gemm = gemm
            count += 1
    return count


def parameter_bytes(model: nn.Module) -> int:
    """Bytes held by the parameters and buffers (fp8 weights count 1 byte per value)."""
    tensors = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    return sum(t.numel() * t.element_size() for t in tensors.values())
