"""Two gloo processes on CPU (dist_worker.py): global grad norm under manual sharding, DDP and FSDP2, a NaN on
one rank, and the training loop under DDP with the bucket sampler. References: float64 single-process
gradients; the sampler's plan for which rank reads what.
"""
import json
import os
import subprocess
import sys

import pytest

from wan_core.train.bucket_sampler import BucketSampler
from wan_core.train.grad_clip import read_spike_marker

HERE = os.path.dirname(os.path.abspath(__file__))


def test_distributed_global_norm_ddp_fsdp_nan_and_loop(tmp_path):
    world = 2
    init = tmp_path / "init"
    marker = tmp_path / "spike_marker.json"
    outs = [tmp_path / f"out{r}.json" for r in range(world)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "dist_worker.py"), str(r), str(world),
                               str(init), str(outs[r]), str(marker), str(tmp_path / "ckpt")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(world)]
    logs = [p.communicate(timeout=120)[0].decode() for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log
    res = [json.loads(o.read_text()) for o in outs]
    for r in res:
        assert r["manual_norm"] == pytest.approx(r["manual_ref"], rel=1e-6)
        assert r["manual_local"] < r["manual_ref"] * 0.999       # a shard alone is not the global norm
        assert r["ddp_norm"] == pytest.approx(r["ddp_ref"], rel=1e-5)
        assert r["fsdp_norm"] == pytest.approx(r["ddp_ref"], rel=1e-5)
        assert r["fsdp_status"] == "clipped"
        assert r["fsdp_threshold"] == pytest.approx(0.65 * r["ddp_ref"], rel=1e-6)   # mean + 3 std
        assert r["fsdp_after"] == pytest.approx(r["fsdp_threshold"], rel=1e-5)
        assert r["fsdp_grad_err"] < 1e-5
        assert r["nan_raised"] and r["nan_step"] == 41
    assert res[0]["manual_local"] != res[1]["manual_local"]
    assert read_spike_marker(marker)["resume_data_step"] == 42

    # the loop under DDP: replicas stay identical, each rank reads its own share of every megabatch
    assert res[0]["loop_params"] == res[1]["loop_params"]
    assert res[0]["loop_losses"] != res[1]["loop_losses"]
    shapes = [(1, 4, 4)] * 4 + [(2, 4, 4)] * 4
    sampler = BucketSampler(shapes, 2, num_replicas=world, rank=0, seed=42)
    stream = [mb for epoch in range(3) for mb in sampler.plan(epoch).megabatches]   # 2 per epoch
    micro = 3 * 2                                        # 3 steps x grad_accum 2: three epochs
    expected = [[i for mb in stream[:micro] for i in mb[r]] for r in range(world)]
    assert [r["loop_served"] for r in res] == expected
    ckpt = res[0]["loop_checkpoint"]
    assert ckpt.endswith("step_00000003") and res[1]["loop_checkpoint"] == ckpt
    from safetensors.torch import load_file
    saved = load_file(os.path.join(ckpt, "model.safetensors"))
    assert sorted(float(v.double().sum()) for v in saved.values()) == sorted(res[0]["loop_params"])
