"""``wan_core generate`` under torchrun: ``--ulysses U --ring R [--cfg-parallel] [--window-parallel W]``
(docs/parallel.md sections 7 and 11).

Every rank runs the same command (text encoding, sampling, decoding) with the same seed; the DiT's block stack
is split over the ranks, so every rank ends with the same latents. Only rank 0 prints progress and writes the
video. Rendezvous (single or multi-node) is torchrun's own: ``torchrun --nproc-per-node N [--nnodes ...
--rdzv-endpoint ...] -m wan_core generate ...``.
"""
from __future__ import annotations

import datetime
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported when the command runs, not when the parser is built
    import torch

    from ..parallel.groups import ParallelConfig
    from .request import GenerateRequest


def add_arguments(parser: Any) -> None:
    """The multi-GPU flags of ``generate`` (an argparse parser or argument group)."""
    group = parser.add_argument_group("multi-GPU (run under torchrun; docs/parallel.md)")
    group.add_argument("--ulysses", type=int, default=1,
                       help="Ulysses degree: all-to-all over heads; must divide the head count (12: 1.3B, 40: 14B)")
    group.add_argument("--ring", type=int, default=1, help="Ring attention degree (K/V passed around the ring)")
    group.add_argument("--cfg-parallel", action="store_true",
                       help="cond and uncond on different ranks (ulysses x ring x 2 processes)")
    group.add_argument("--window-parallel", type=int, default=1, metavar="W",
                       help="with --context-frames: the windows of each step spread over W model replicas of "
                            "ulysses x ring x cfg processes each (W x ulysses x ring x cfg processes)")
    group.add_argument("--fsdp", action="store_true",
                       help="shard the DiT blocks' weights over the ranks (FSDP2; each rank holds 1/N)")


def config_of(request: "GenerateRequest") -> "ParallelConfig":
    from ..parallel.groups import ParallelConfig

    return ParallelConfig(request.ulysses, request.ring, 2 if request.cfg_parallel else 1, request.window_parallel)


def problems(request: "GenerateRequest") -> list[str]:
    """Usage problems found before anything loads (degrees vs torchrun's WORLD_SIZE)."""
    from ..parallel.groups import check_degrees

    try:
        config = config_of(request)
    except ValueError as e:
        return [str(e).replace("windows degree", "--window-parallel")]
    if config.windows > 1:
        found = window_problems(request, config.windows)
        if found:
            return found
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1 and request.fsdp:
        return ["--fsdp shards the DiT over torchrun's processes: run torchrun --nproc-per-node N -m wan_core ..."]
    if world == 1 and config.world_size > 1:
        return [f"--ulysses/--ring/--cfg-parallel/--window-parallel ({config.describe()}) need {config.world_size} "
                f"processes: run torchrun --nproc-per-node {config.world_size} -m wan_core generate ..."]
    if world > 1 and not (request.fsdp and config.world_size == 1):  # --fsdp alone: any N
        try:
            check_degrees(config, world, 120)  # the head count is checked once the DiT is loaded
        except ValueError as e:
            return [str(e).replace("devices", "torchrun processes")]
    return []


def window_problems(request: "GenerateRequest", degree: int) -> list[str]:
    """--window-parallel W: needs context windows (--context-frames), at least W of them in a step, no --fsdp
    (window ranks run different numbers of windows, FSDP's collectives need every rank in every block)."""
    if request.context_frames is None:
        return [f"--window-parallel {degree} spreads context windows over ranks: it needs --context-frames"]
    if request.fsdp:
        return ["--window-parallel and --fsdp do not combine (window ranks run different windows); drop --fsdp"]
    try:
        windows = request.context_windows()
    except ValueError:
        return []  # named by the --context-* checks
    from ..sampling.context_windows import latent_length

    if windows is None or not isinstance(request.frames, int):
        return []
    count = len(windows.windows(latent_length(request.frames), 0))
    if count < degree:
        return [f"--window-parallel {degree}: the video has {count} context window{'s' if count > 1 else ''} per "
                f"step ({request.frames} frames, --context-frames {request.context_frames}); use at most {count}"]
    return []


def setup(device: "torch.device") -> tuple[int, "torch.device"]:
    """Join torchrun's group when WORLD_SIZE > 1: (rank, this rank's device: cuda:LOCAL_RANK on GPUs)."""
    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                timeout=datetime.timedelta(minutes=10))
    rank = dist.get_rank()
    if rank > 0:
        os.environ["TQDM_DISABLE"] = "1"  # progress bars from rank 0 only
    return rank, device


def wrap(dit: Any, request: "GenerateRequest") -> Any:
    """The context-parallel view of ``dit`` for this torchrun group (the DiT unchanged for one process)."""
    import torch.distributed as dist

    from ..parallel.groups import build_groups, check_degrees

    if not dist.is_initialized():
        return dit
    config = config_of(request)
    if request.fsdp:
        from ..parallel.fsdp import shard_dit

        dit = shard_dit(dit)
        if config.world_size == 1:
            return dit  # weights sharded, every rank computes the whole sequence
    check_degrees(config, dist.get_world_size(), int(dit.config.num_heads))
    from ..parallel.dit import context_parallel

    return context_parallel(dit, build_groups(config))


def decode(pipe: Any, latents: Any, tiling: str, progress=None) -> Any:
    """VAE decode under torchrun: the spatial tiles split over the ranks (``distributed_decode``, tile 32 / overlap
    8 latents), the video on rank 0 and None elsewhere; one process, or ``--tiling off``: ``pipe.decode``."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1 or tiling == "off" or pipe.vae is None:
        return pipe.decode(latents, tiling=tiling, progress=progress)
    from ..parallel.vae import distributed_decode

    vae = pipe.vae
    video = distributed_decode(vae, latents.to(vae.device), tile=32, overlap=8,
                               progress=progress if dist.get_rank() == 0 else None)
    if video is not None and hasattr(vae, "_check_output"):
        vae._check_output(video, "decode")  # NaN/Inf named as in the single-process decode
    return video


def is_writer() -> bool:
    """Rank 0 (or no group): the process that prints and writes files."""
    import torch.distributed as dist

    return not dist.is_initialized() or dist.get_rank() == 0


def finish() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
