"""FP8 weight storage and FP8 / upcast GEMM (docs/algorithms.md section 5, docs/wan_spec.md section 5.4)."""
from .fp8 import (GEMM_MODES, GRANULARITIES, FP8Linear, Gemm, Granularity, fp8_linear, is_block_linear, parameter_bytes,
                  quantize_activation_rows, quantize_linears, quantize_weight, scaled_mm_support, set_gemm)

__all__ = ["GEMM_MODES", "GRANULARITIES", "FP8Linear", "Gemm", "Granularity", "fp8_linear", "is_block_linear",
           "parameter_bytes", "quantize_activation_rows", "quantize_linears", "quantize_weight", "scaled_mm_support",
           "set_gemm"]
