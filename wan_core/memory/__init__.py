"""Big models on small GPUs (docs/memory.md): block swap with prefetch, streaming load, offload policies,
regional compile of the blocks, and memory accounting."""
from __future__ import annotations

from .swap import BlockSwap, SwapStats, block_swap_of, check_swap_options, enable_block_swap

__all__ = ["BlockSwap", "SwapStats", "block_swap_of", "check_swap_options", "enable_block_swap"]
