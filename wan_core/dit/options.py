"""The acceleration switches a DiT is loaded with (``ModelOptions``): attention backend, skiparse schedule, weight
format and FP8 GEMM, one frozen record checked together. ``load_dit`` takes them as keywords and stores the
record on the model (``model.load_options``); the model itself reads them to build its attention dispatch."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch

from ..attention.dispatch import Attention, AttentionDispatch, AttentionOverride, get_backend
from ..attention.skiparse import SCHEDULES, SUV_PROFILE, Skiparse, SkiparseMode, skiparse_schedule
from ..attention.steps import check_step_range
from ..quant.fp8 import GEMM_MODES, GRANULARITIES, Gemm, Granularity

Weights = Literal["fp32", "bf16", "fp16", "fp8_e4m3fn", "fp8_scaled"]
WEIGHT_FORMATS: tuple[str, ...] = get_args(Weights)
FLOAT_WEIGHTS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class ModelOptions:
    """The acceleration switches a DiT was loaded with (``model.load_options``): one field per keyword
    argument of :func:`load_dit`, with the same defaults (a test keeps the two equal), checked together.

    attention: backend for every attention call: "sdpa" | "sage" | "int8" | "int8_fp8" (or any registered).
    attention_overrides: ``AttentionOverride`` rules (backend per block list / step range / kind).
    skiparse: "none" | "osp13" | "suv" | "custom" (self-attention only; every sparse schedule approximates
      the dense model). skiparse_k: ratio for osp13. skiparse_ks / skiparse_modes: per block for custom.
      suv_profile / suv_stage_blocks: per-stage ratios and sizes for suv. skiparse_steps: step range where
      the schedule is active (None = always), e.g. ``(0.3, None)`` = dense for the first 30% of steps.
    weights: None (as stored, fp8 files dequantised to bf16) | "fp32" | "bf16" | "fp16" | "fp8_e4m3fn"
      (fp8 storage; a full-precision file is cast with scale 1) | "fp8_scaled" (fp8 with a scale; a
      full-precision file is quantised with scale max|W|/448). FP8 applies to the Linear layers inside the
      blocks; embeddings, time projection, norms, modulation and head stay in the compute dtype.
    fp8_granularity: "tensor" | "channel" scale when quantising on load.
    gemm: "upcast" (dequantise per layer, default) | "scaled_mm" (FP8 GEMM, per-token activation scales).
    """

    attention: Attention | str = "sdpa"  # a built-in backend or a name given to register_backend
    attention_overrides: tuple[AttentionOverride, ...] = ()
    skiparse: Skiparse = "none"
    skiparse_k: int = 4
    skiparse_ks: tuple[int, ...] | None = None
    skiparse_modes: tuple[SkiparseMode, ...] | None = None
    suv_profile: tuple[int, ...] = SUV_PROFILE
    suv_stage_blocks: tuple[int, ...] | None = None
    skiparse_steps: tuple | None = None
    weights: Weights | None = None
    fp8_granularity: Granularity = "tensor"
    gemm: Gemm = "upcast"

    def __post_init__(self):
        for name in ("attention_overrides", "skiparse_ks", "skiparse_modes", "suv_profile", "suv_stage_blocks"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))
        get_backend(self.attention)
        if self.skiparse not in SCHEDULES:
            raise ValueError(f"skiparse must be one of {', '.join(SCHEDULES)}, got {self.skiparse!r}")
        check_step_range(self.skiparse_steps, "skiparse_steps")
        if self.weights is not None and self.weights not in WEIGHT_FORMATS:
            raise ValueError(f"weights must be one of {', '.join(WEIGHT_FORMATS)} (or None = as stored), "
                             f"got {self.weights!r}")
        if self.fp8_granularity not in GRANULARITIES:
            raise ValueError(f"fp8_granularity must be one of {', '.join(GRANULARITIES)}, got "
                             f"{self.fp8_granularity!r}")
        if self.gemm not in GEMM_MODES:
            raise ValueError(f"gemm must be one of {', '.join(GEMM_MODES)}, got {self.gemm!r}")
        if self.gemm == "scaled_mm" and not self.fp8:
            raise ValueError("gemm='scaled_mm' needs fp8 weights: add weights='fp8_scaled' (quantises a "
                             "bf16/fp16 file on load, keeps an fp8 file as it is) or weights='fp8_e4m3fn'")

    @property
    def fp8(self) -> bool:
        return self.weights in ("fp8_e4m3fn", "fp8_scaled")

    def skiparse_schedule(self, num_layers: int):
        return skiparse_schedule(self.skiparse, num_layers, k=self.skiparse_k, ks=self.skiparse_ks,
                                 modes=self.skiparse_modes, profile=self.suv_profile,
                                 stage_blocks=self.suv_stage_blocks, steps=self.skiparse_steps)

    def attention_dispatch(self, num_layers: int) -> AttentionDispatch:
        return AttentionDispatch(self.attention, overrides=self.attention_overrides,
                                 skiparse=self.skiparse_schedule(num_layers))
