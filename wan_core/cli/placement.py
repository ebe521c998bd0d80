"""Where a run computes and where the DiT's blocks live: the device from --device, --blocks-to-swap decided
once against the device and the DiT's block count (``swap_blocks``: the one number the memory check, the
loader and the placement read), the memory check before loading, and the DiT placed for sampling (block swap
or a plain move, then --compile-blocks) with one loop over its experts (docs/memory.md)."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, cast

from .errors import UsageError

if TYPE_CHECKING:
    from .request import GenerateRequest


def device_of(name: str):
    """--device as a ``torch.device`` (auto: cuda when present); UsageError for one this machine lacks."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError as e:
        raise UsageError(f"--device {name!r}: {e}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: CUDA is not available on this machine; use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise UsageError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s) "
                         f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"--device {name}: MPS (Apple GPU) is not available on this machine; use --device cpu")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise UsageError(f"--device {name}: use auto, cpu, cuda, cuda:N or mps")
    return dev


def swap_blocks(request: "GenerateRequest", device, layers: int | None) -> int:
    """The DiT blocks that stream from pinned CPU memory: --blocks-to-swap on a GPU, 0 elsewhere (a one-line note
    on stderr when the flag is a no-op). Checked against the device and ``layers`` (the file's block count;
    None for tiny-random) before loading; UsageError (one line) when it does not fit."""
    from ..memory import check_swap_options

    try:
        note = check_swap_options(request.blocks_to_swap, request.prefetch, device, layers)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if note:
        print(f"wan_core: {note}", file=sys.stderr)
    return request.blocks_to_swap if device.type == "cuda" else 0


def check_memory(request: "GenerateRequest", device, dit_size: str | None, layers: int | None = None,
                 swapped: int = 0) -> None:
    """Refuse, before loading, a size that cannot fit in the device's memory (``wan_core.estimate``). Blocks
    swapped to RAM (``swapped`` of the DiT's ``layers``) do not count on the device, except the prefetch + 1 in
    flight (docs/memory.md section 1)."""
    from ..estimate import fit_problem, memory_needs, total_memory

    ram = total_memory("cpu")
    compute = total_memory(device) if device.type != "cpu" else ram
    dtype = "fp8" if request.weights else ("fp32" if device.type == "cpu" else "bf16")
    if compute is not None and swapped and layers:  # swap_blocks refused more blocks than the file has
        weights = memory_needs(request.width, request.height, request.frames, model=dit_size, dtype=dtype)["weights"]
        compute += int(weights / layers * (swapped - min(request.prefetch + 1, swapped)))
    problem = fit_problem(request.width, request.height, request.frames, compute_bytes=compute, host_bytes=ram,
                          model=dit_size, dtype=dtype)
    if problem:
        raise UsageError(problem)


def swap_experts(dit, blocks: int, prefetch: int, device) -> list:
    """Block swap (``wan_core.memory.enable_block_swap``) on each expert of ``dit`` (the DiT itself, or the two
    of a ``WanMoE``): its last ``blocks`` blocks (at most all of them) in pinned CPU memory, streamed to
    ``device``. A low-noise expert that waits off the device (``offload_device`` set) keeps its resident parts
    where they are until the switch (``WanMoE.activate`` moves them). Returns the ``BlockSwap`` of each."""
    from ..dit.moe import experts, is_moe
    from ..memory import enable_block_swap

    waits = is_moe(dit) and dit.offload_device is not None
    return [enable_block_swap(expert, min(blocks, len(cast(Any, expert).blocks)), prefetch, device=device,
                              place_resident=not (name == "low" and waits))
            for name, expert in experts(dit)]


def place_dit(request: "GenerateRequest", dit, device, swapped: int) -> None:
    """The DiT on ``device`` for sampling: ``swapped`` blocks of each expert streamed from CPU memory, or a plain
    move (only the high-noise expert when the low-noise one waits on the CPU), then --compile-blocks."""
    from ..dit.moe import experts, is_moe
    from ..memory import compile_blocks
    from ..memory.offload import move

    if swapped:
        for (name, _), swap in zip(experts(dit), swap_experts(dit, swapped, request.prefetch, device)):
            label = f"{name}-noise expert: " if name else ""
            print(f"wan_core: {label}{swap} ({swap.offload_bytes() / 2**30:.2f} GiB of blocks in pinned RAM)",
                  file=sys.stderr)
    else:
        waits = is_moe(dit) and dit.offload_device is not None
        move(experts(dit)[0][1] if waits else dit, device)
    if request.compile_blocks:
        for _, expert in experts(dit):
            compile_blocks(expert, device=device)  # a CompileUnavailableWarning says why not, in one line
