"""Big models on small GPUs (docs/memory.md): block swap with prefetch, streaming load, offload policies,
regional torch.compile of the blocks, and memory accounting."""
from __future__ import annotations

from .compile import CompileUnavailableWarning, compile_blocks, compile_unavailable, uncompile_blocks
from .swap import BlockSwap, SwapStats, block_swap_of, check_swap_options, enable_block_swap, file_block_count

__all__ = ["BlockSwap", "CompileUnavailableWarning", "SwapStats", "block_swap_of", "check_swap_options",
           "compile_blocks", "compile_unavailable", "enable_block_swap", "file_block_count", "uncompile_blocks"]
