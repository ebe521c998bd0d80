"""One rank of the 2-process gloo checks (run by test_grad_clip.py, not collected by pytest).

usage: python dist_worker.py RANK WORLD INIT_FILE OUT_JSON MARKER_PATH CKPT_DIR
Clipping cases A-D: reference = the full (unsharded, single-process) gradients in float64.
Case E: the training loop under DDP (data split by the bucket sampler, rank-0 checkpoint).
"""
import copy
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
from wan_core.train.grad_clip import AdaptiveGradClipper, GradientSpikeError, global_grad_norm  # noqa: E402


def model_and_inputs(world):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 3))
    xs = [torch.randn(4, 6, generator=torch.Generator().manual_seed(100 + r)) for r in range(world)]
    return model, xs


def reference_grads(model, xs):
    """Average over ranks of each rank's gradients, as DDP/FSDP produce: list of float64 tensors."""
    acc = None
    for x in xs:
        m = copy.deepcopy(model)
        m(x).pow(2).sum().backward()
        g = [p.grad.double() for p in m.parameters()]
        acc = g if acc is None else [a + b for a, b in zip(acc, g)]
    return [a / len(xs) for a in acc]


def norm64(tensors):
    return float(torch.sqrt(sum((t.double() ** 2).sum() for t in tensors)))


def main():
    rank, world, init_file, out_path, marker, ckpt_dir = sys.argv[1:7]
    rank, world = int(rank), int(world)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    out = {}

    # A. manual sharding of plain tensors: rank r holds every world-th gradient
    g = torch.Generator().manual_seed(7)
    full = [torch.randn(n, generator=g) for n in (5, 17, 3, 11, 8)]
    shard = [torch.nn.Parameter(torch.zeros_like(t)) for t in full[rank::world]]
    for p, t in zip(shard, full[rank::world]):
        p.grad = t.clone()
    out["manual_norm"] = float(global_grad_norm(shard, sharded=True))
    out["manual_ref"] = norm64(full)
    out["manual_local"] = float(global_grad_norm(shard))

    model, xs = model_and_inputs(world)
    ref = reference_grads(model, xs)
    out["ddp_ref"] = norm64(ref)

    # B. DDP: gradients averaged and replicated, the local norm is the global one
    ddp = nn.parallel.DistributedDataParallel(copy.deepcopy(model))
    ddp(xs[rank]).pow(2).sum().backward()
    out["ddp_norm"] = float(global_grad_norm(ddp))

    # C. FSDP2 (DTensor gradient shards): global norm, then a clip to mean + 3 std across shards
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    fsdp = copy.deepcopy(model)
    fully_shard(fsdp, mesh=init_device_mesh("cpu", (world,)))
    fsdp(xs[rank]).pow(2).sum().backward()
    out["fsdp_norm"] = float(global_grad_norm(fsdp))
    clipper = AdaptiveGradClipper()
    clipper.mean, clipper.var = 0.5 * out["ddp_ref"], (0.05 * out["ddp_ref"]) ** 2   # norm = mean + 10 std
    clipper.extreme_floor = 100.0
    res = clipper.clip_(fsdp, step=0)
    out["fsdp_status"] = res.status
    out["fsdp_threshold"] = res.threshold
    out["fsdp_after"] = float(global_grad_norm(fsdp))
    got = [p.grad.full_tensor().double() for p in fsdp.parameters()]
    out["fsdp_grad_err"] = max(float((a - b * res.scale).abs().max()) for a, b in zip(got, ref))

    # D. NaN on one rank only: the all-reduced norm is NaN everywhere, every rank raises, rank 0 marks
    bad = [torch.nn.Parameter(torch.zeros(3))]
    bad[0].grad = torch.tensor([1.0, float("nan") if rank == 1 else 0.0, 2.0])
    clipper = AdaptiveGradClipper(marker_path=marker, sharded=True)
    try:
        clipper.clip_(bad, step=41)
        out["nan_raised"] = False
    except GradientSpikeError as e:
        out["nan_raised"] = True
        out["nan_step"] = e.step
    dist.barrier()

    # E. the loop under DDP
    from wan_core.config import dit_preset
    from wan_core.dit.model import WanDiT
    from wan_core.train.loop import TrainConfig, train

    class Items(torch.utils.data.Dataset):
        def __init__(self):
            g = torch.Generator().manual_seed(0)
            self.shapes = [(1, 4, 4)] * 4 + [(2, 4, 4)] * 4
            self.items = [(torch.randn(16, *s, generator=g), torch.randn(3, 8, generator=g)) for s in self.shapes]
            self.served = []

        def __len__(self):
            return len(self.items)

        def __getitem__(self, i):
            self.served.append(i)
            return self.items[i]

    torch.manual_seed(0)
    dit = WanDiT(dit_preset("tiny").replace(num_layers=2, text_dim=8, text_len=8))
    ds = Items()
    res = train(nn.parallel.DistributedDataParallel(dit), ds,
                TrainConfig(max_steps=3, batch_size=2, grad_accum=2, checkpoint_dir=ckpt_dir, progress=False))
    out["loop_params"] = [float(p.double().sum()) for p in dit.parameters()]
    out["loop_served"] = ds.served
    out["loop_losses"] = res.losses
    out["loop_checkpoint"] = res.checkpoint
    dist.destroy_process_group()
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
