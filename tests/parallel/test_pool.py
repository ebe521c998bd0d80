"""The ComfyUI worker pool on CPU: rank 0 is this process, one spawned worker loads the checkpoint itself.

Two prompts through the pool equal the single-process runs; a worker killed mid-run gives a WorkerError within
30 s, leaves no process behind and a new pool works afterwards."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import save_file

import wan_core
from wan_core.cache import CacheConfig
from wan_core.parallel import ParallelConfig
from wan_core.parallel.pool import LoadSpec, WorkerError, WorkerPool, get_pool, shutdown_pools
from wan_core.pipeline import GenerationConfig, WanPipeline

CHECKS = Path(__file__).with_name("checks.py")


def _checks():
    import importlib.util

    spec = importlib.util.spec_from_file_location("parallel_checks", CHECKS)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cp") / "tiny_dit.safetensors"
    save_file({k: v.contiguous() for k, v in _checks().tiny_dit().state_dict().items()}, str(path))
    return path


def _run(dit, seed: int, callback=None):
    ctx = _checks().dit_inputs(2)[2]
    cfg = GenerationConfig(width=48, height=32, frames=9, steps=3, guidance=5.0, seed=seed)
    with torch.inference_mode():
        return WanPipeline(dit=dit).sample_latents([ctx[0]], [ctx[1]], cfg, callback=callback)


def test_pool_two_prompts_kill_and_restart(model_file):
    dit = wan_core.load_dit(str(model_file))
    refs = {seed: _run(dit, seed) for seed in (1, 2)}
    from nodes import parallel as parallel_node
    from nodes import sampler as sampler_node

    assert parallel_node.validate_parallel(devices=2, ulysses=2) is True
    (node_model,) = parallel_node.apply(dit, devices=2, ulysses=2, ring=1, cfg_parallel=False)  # starts the pool
    try:
        pool = get_pool(dit, ParallelConfig(ulysses=2), ["cpu", "cpu"])
        assert pool.model is node_model  # reused across prompts
        ctx = _checks().dit_inputs(2)[2]
        embeds = {"cond": [ctx[0]], "uncond": [ctx[1]]}
        latent = {"samples": torch.zeros(1, 16, 3, 4, 6)}
        args = dict(embeds=embeds, latent=latent, seed=4, steps=3, guidance=5.0)
        (node_out,) = sampler_node.sample(node_model, **args)  # through the nodes
        (node_ref,) = sampler_node.sample(dit, **args)
        assert (node_out["samples"] - node_ref["samples"]).abs().max().item() <= 1e-4
        for seed, ref in refs.items():  # two more prompts on the same pool
            assert (_run(pool.model, seed) - ref).abs().max().item() <= 1e-4
        with pytest.raises(WorkerError, match="cannot mirror the attention cache"):  # refused, pool kept
            sampler_node.sample(node_model, **args, cache=CacheConfig("wan", start=0.0))
        assert not pool.closed
        worker = pool.procs[0]
        killed_at = []

        def kill(step, total, x, x0):
            if step == 1 and not killed_at:
                os.kill(worker.pid, signal.SIGKILL)
                killed_at.append(time.monotonic())

        with pytest.raises(WorkerError, match=r"worker .*rank 1.*pool was shut down"):
            _run(pool.model, 1, callback=kill)
        assert time.monotonic() - killed_at[0] < 30
        assert pool.closed and not worker.is_alive() and not dist.is_initialized()
        assert not [p for p in __import__("multiprocessing").active_children() if p.name.startswith("wancore-cp")]
        with pytest.raises(WorkerError, match="shut down"):
            _run(pool.model, 1)
        # a fresh pool (here Ring instead of Ulysses: a resize) works afterwards; its worker's model ends its
        # process inside block 1 of the 7th block-stack run (3 steps x cond + uncond: the second prompt's first),
        # while rank 0 waits in a collective
        spec = LoadSpec(f"{CHECKS}:load_dying_dit", (str(model_file),), {"after": 7, "config": dit.config})
        pool2 = get_pool(dit, ParallelConfig(ring=2), ["cpu", "cpu"], spec=spec)
        assert pool2 is not pool
        assert (_run(pool2.model, 2) - refs[2]).abs().max().item() <= 1e-4
        procs = pool2.procs
        start = time.monotonic()
        with pytest.raises(WorkerError, match=r"rank 1.*exit code 17.*pool was shut down"):
            _run(pool2.model, 2)
        assert time.monotonic() - start < 30
        assert pool2.closed and not dist.is_initialized()
    finally:
        shutdown_pools()
    assert not any(p.is_alive() for p in procs) and not dist.is_initialized()


def test_pool_refuses_bad_layouts(model_file):
    dit = wan_core.load_dit(str(model_file))
    heads = dit.config.num_heads
    with pytest.raises(ValueError, match=f"ulysses=3 does not divide the model's {heads} attention heads"):
        WorkerPool(dit, ParallelConfig(ulysses=3), ["cpu"] * 3)
    with pytest.raises(ValueError, match="2 processes but 3 devices"):
        WorkerPool(dit, ParallelConfig(ulysses=2), ["cpu"] * 3)
    from nodes import parallel as parallel_node

    assert "divides no Wan head count" in str(parallel_node.validate_parallel(devices=7, ulysses=7))
    assert "4 processes but 2 devices" in str(parallel_node.validate_parallel(devices=2, ulysses=2, ring=2))
    assert "2 processes but 1 devices" in str(parallel_node.validate_parallel(devices=1, ulysses=2))
    with pytest.raises(ValueError, match="loaded from a file"):
        WorkerPool(_checks().tiny_dit(), ParallelConfig(ulysses=2), ["cpu"] * 2)
