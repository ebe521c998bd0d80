"""FSDP weight sharding of the DiT for inference (docs/parallel.md section 8).

``shard_dit(dit)`` applies torch's FSDP2 (``torch.distributed.fsdp.fully_shard``) to every transformer block
over all ranks of the default group: each rank keeps 1/world of every block's parameters and all-gathers a
block's weights just before running it (freed again after), so the 14B DiT fits on GPUs that cannot hold it
whole. Embeddings, time projection and head (about 1% of the weights) stay replicated. It composes with
context parallelism as in the Wan report: the same ranks shard the weights and split the tokens, and every
rank runs every block in the same order, so the weight all-gathers line up. Results equal the unsharded model
(the all-gather is a copy).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def shard_dit(dit: Any, group: dist.ProcessGroup | None = None) -> Any:
    """Shard ``dit``'s blocks in place over ``group`` (default: the whole world) and return it. Call it on
    every rank with the same model (e.g. each rank loads the file on CPU, then shards; FSDP moves the shards
    to the mesh's device: ``cuda:<LOCAL_RANK>`` on GPUs)."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    if not dist.is_initialized():
        raise RuntimeError("shard_dit needs a torch.distributed process group (run under torchrun)")
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
    device_type = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
    mesh = DeviceMesh(device_type, torch.tensor(ranks))
    for block in dit.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=True)
    return dit


def local_parameter_bytes(module: torch.nn.Module) -> int:
    """Bytes of parameters held by this rank (the local shards of sharded ones)."""
    total = 0
    for p in module.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        total += local.numel() * local.element_size()
    return total
