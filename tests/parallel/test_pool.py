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
from wan_core.lora.stack import prepare_lora, with_lora
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


def lora_file(model_file: Path, dit) -> Path:
    """A random LoRA (official names, lora_A / lora_B) for every linear layer of the tiny DiT's blocks."""
    path = model_file.with_name("tiny_lora.safetensors")
    if not path.exists():
        g = torch.Generator().manual_seed(9)
        sd = {}
        for name, module in dit.blocks.named_modules():
            if isinstance(module, torch.nn.Linear):
                o, i = module.weight.shape
                sd[f"diffusion_model.blocks.{name}.lora_A.weight"] = torch.randn(4, i, generator=g) * 0.3
                sd[f"diffusion_model.blocks.{name}.lora_B.weight"] = torch.randn(o, 4, generator=g) * 0.3
        save_file(sd, str(path))
    return path


def _run(dit, seed: int, callback=None):
    ctx = _checks().dit_inputs(2)[2]
    cfg = GenerationConfig(width=48, height=32, frames=9, steps=3, guidance=5.0, seed=seed)
    with torch.inference_mode():
        return WanPipeline(dit=dit).sample_latents([ctx[0]], [ctx[1]], cfg, callback=callback)


def test_pool_two_prompts_kill_and_restart(model_file, monkeypatch):
    monkeypatch.setenv("WANCORE_CPU_PROCESSES", "2")  # CPU workers for this test (off on a CPU-only server)
    dit = wan_core.load_dit(str(model_file))
    refs = {seed: _run(dit, seed) for seed in (1, 2)}
    from nodes import parallel as parallel_node
    from nodes import sampler as sampler_node

    assert parallel_node.validate_parallel(devices=2, ulysses=2) is True
    (node_model,) = parallel_node.apply(dit, devices=2, ulysses=2, ring=1, cfg_parallel=False)  # starts the pool
    try:
        pool = get_pool(dit, ParallelConfig(ulysses=2), ["cpu", "cpu"])
        assert node_model.parallel_driver.pool is pool  # one pool, reused across prompts and node runs
        ctx = _checks().dit_inputs(2)[2]
        embeds = {"cond": [ctx[0]], "uncond": [ctx[1]]}
        latent = {"samples": torch.zeros(1, 16, 3, 4, 6)}
        args = dict(embeds=embeds, latent=latent, seed=4, steps=3, guidance=5.0)
        (node_out,) = sampler_node.sample(node_model, **args)  # through the nodes
        (node_ref,) = sampler_node.sample(dit, **args)
        assert (node_out["samples"] - node_ref["samples"]).abs().max().item() <= 1e-4
        # a LoRA view (as WanCoreLoRA makes) through the node: the worker applies the same file and strength
        lora = with_lora(dit, prepare_lora(dit, str(lora_file(model_file, dit)), strength=0.7))
        (lora_model,) = parallel_node.apply(lora, devices=2, ulysses=2, ring=1, cfg_parallel=False)
        assert lora_model.parallel_driver.pool is pool
        (lora_out,) = sampler_node.sample(lora_model, **args)
        (lora_ref,) = sampler_node.sample(lora, **args)
        assert (lora_out["samples"] - lora_ref["samples"]).abs().max().item() <= 1e-4
        assert (lora_ref["samples"] - node_ref["samples"]).abs().max().item() > 1e-3  # the LoRA changes the video
        (again,) = sampler_node.sample(node_model, **args)  # back without it: the worker removes it too
        assert (again["samples"] - node_ref["samples"]).abs().max().item() <= 1e-4
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
        # a fresh pool (here CFG-parallel instead of Ulysses: a resize) works afterwards; its worker's model ends
        # its process inside block 1 of the 4th block-stack run (3 steps of one batched cond + uncond run: the
        # second prompt's first), while rank 0 waits in a collective
        spec = LoadSpec(f"{CHECKS}:load_dying_dit", (str(model_file),), {"after": 4, "config": dit.config})
        pool2 = get_pool(dit, ParallelConfig(cfg=2), ["cpu", "cpu"], spec=spec)
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


def test_pool_refuses_bad_layouts(model_file, monkeypatch):
    monkeypatch.setenv("WANCORE_CPU_PROCESSES", "2")
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


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.startswith("State:") and "Z" in line for line in f)  # a zombie has exited
    except FileNotFoundError:
        return True


@pytest.mark.slow
def test_workers_exit_when_the_driving_process_dies(model_file, tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    script = (
        "import os, sys, torch, wan_core\n"
        "from wan_core.parallel import ParallelConfig, get_pool\n"
        f"dit = wan_core.load_dit({str(model_file)!r})\n"
        "pool = get_pool(dit, ParallelConfig(ulysses=2), ['cpu', 'cpu'])\n"
        "print(pool.procs[0].pid, flush=True)\n"
        "os._exit(0)  # no atexit, no shutdown: the worker must notice on its own\n")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(root))
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    pid = int(run.stdout.split()[-1])
    deadline = time.monotonic() + 15
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _gone(pid), f"worker {pid} outlived its driving process"


@pytest.mark.slow
def test_rank0_failure_mid_run_stops_the_workers(model_file):
    dit = wan_core.load_dit(str(model_file))
    pool = WorkerPool(dit, ParallelConfig(ring=2), ["cpu", "cpu"])
    try:
        def fail(module, args):
            raise ValueError("boom inside block 1")

        handle = dit.blocks[1].register_forward_pre_hook(fail)  # rank 0 only: the worker waits in a collective
        start = time.monotonic()
        with pytest.raises(ValueError, match=r"boom inside block 1 \(on rank 0 .*pool was shut down"):
            _run(pool.model, 1)
        handle.remove()
        assert time.monotonic() - start < 30 and pool.closed and not dist.is_initialized()
        assert not any(p.is_alive() for p in pool.procs)
    finally:
        shutdown_pools()


@pytest.mark.parametrize("allowed", [None, "", "1", "x", "3"])
def test_cpu_only_server_starts_no_more_processes_than_allowed(model_file, monkeypatch, allowed):
    """An API client asking for many devices on a server without GPUs: refused before and when run, no process
    started (each would load the whole model); CPU workers only up to the server's WANCORE_CPU_PROCESSES."""
    import multiprocessing

    from nodes import parallel as parallel_node

    if allowed is None:
        monkeypatch.delenv("WANCORE_CPU_PROCESSES", raising=False)
    else:
        monkeypatch.setenv("WANCORE_CPU_PROCESSES", allowed)
    cap = min(3, os.cpu_count() or 1) if allowed == "3" else 1  # never more than the machine's CPUs
    monkeypatch.setattr(parallel_node.host, "torch_device", lambda: torch.device("cpu"))  # a CPU-only server
    verdict = parallel_node.validate_parallel(devices=4, ulysses=2, ring=2)
    assert isinstance(verdict, str) and "devices=4 but this server has no GPU" in verdict, verdict
    assert f"WANCORE_CPU_PROCESSES={cap}" in verdict
    before = set(multiprocessing.active_children())

    def no_pool(*args, **kwargs):
        raise AssertionError("a worker pool was started")

    monkeypatch.setattr(parallel_node, "get_pool", no_pool)
    dit = wan_core.load_dit(str(model_file))
    with pytest.raises(ValueError, match="devices=4 but this server has no GPU"):
        parallel_node.apply(dit, devices=4, ulysses=2, ring=2)
    if cap == 1:
        assert "no GPU" in str(parallel_node.validate_parallel(devices=2, ulysses=2))
    assert set(multiprocessing.active_children()) == before


SERVER_MAIN = '''
import sys
if __name__ != "__main__":  # what ComfyUI 0.33.0's main.py amounts to when a spawned worker re-runs it
    raise ImportError("the server's main.py was re-run in a worker ('utils' is not a package)")
import importlib.util
import os

root, model_file, shadow = sys.argv[1:4]
sys.path.insert(0, shadow)  # a folder of the server's own modules first on the path, as comfy/ was
spec = importlib.util.spec_from_file_location("custom_nodes_x_wancore", os.path.join(root, "__init__.py"),
                                              submodule_search_locations=[root])
pack = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = pack
spec.loader.exec_module(pack)
import wan_core
from wan_core.parallel import shutdown_pools

parallel = importlib.import_module("custom_nodes_x_wancore.nodes.parallel")
dit = wan_core.load_dit(model_file)
try:
    (model,) = parallel.apply(dit, devices=2, ulysses=2)
    print("workers started:", model.parallel_driver.pool.world)
finally:
    shutdown_pools()
'''


def test_workers_start_without_rerunning_the_servers_main(model_file, tmp_path):
    """The node inside a server whose main file cannot run again (ComfyUI 0.33.0 under spawn): the worker starts
    from wan_core alone, whatever the server's cwd and sys.path."""
    import subprocess
    import sys

    main = tmp_path / "server" / "main.py"
    shadow = tmp_path / "server" / "comfy"
    shadow.mkdir(parents=True)
    (shadow / "utils.py").write_text("")
    main.write_text(SERVER_MAIN)
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["WANCORE_CPU_PROCESSES"] = "2"
    env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU server: two CPU processes, also on a machine with GPUs
    res = subprocess.run([sys.executable, str(main), str(root), str(model_file), str(shadow)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=240, env=env, check=False)
    assert res.returncode == 0 and "workers started: 2" in res.stdout, res.stderr[-3000:]
