"""Run a function on N local processes joined in a torch.distributed group (tests, benchmarks, scripts).

``run_local("path/to/file.py:fn", 4, *args)`` spawns 4 processes (``torch.multiprocessing``, start method
"spawn"), each joins a gloo (CPU) or NCCL (CUDA) group on 127.0.0.1 with its rank, loads ``fn`` from the file (so
test files that are not importable modules work) and calls ``fn(rank, world, *args)``. Returns the list of the
return values by rank; an exception in any rank is raised in the caller with that rank's traceback.
"""
from __future__ import annotations

import datetime
import importlib.util
import os
import queue as queue_mod
import socket
import time
import traceback
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def import_isolated(root: str, dotted: str):
    """Import module ``dotted`` (``a.b.c``) from the folder ``root`` under a private name, without running the
    ``__init__`` of its parent packages (``a``, ``a.b``): a worker needs one module of a node pack, whose
    package name inside ComfyUI is not importable elsewhere (and whose ``nodes`` package is shadowed by
    ComfyUI's ``nodes`` module). Relative imports inside resolve to sibling files, run as they are imported."""
    import sys
    import types

    parts = dotted.split(".")
    alias = f"_wancore_isolated_{abs(hash(os.path.abspath(root)))}"
    path = os.path.abspath(root)
    for i in range(len(parts)):  # the packages: bare modules with a search path, no __init__ run
        name = ".".join([alias, *parts[:i]])
        if name not in sys.modules:
            pkg = types.ModuleType(name)
            pkg.__path__ = [path]
            sys.modules[name] = pkg
        path = os.path.join(path, parts[i])
    return importlib.import_module(".".join([alias, *parts]))


def load_function(ref: str):
    """``"path/file.py:name"``, ``"package.module:name"`` or ``"root::package.module:name"`` (the module
    imported from the folder ``root`` with :func:`import_isolated`) -> the function."""
    where, _, name = ref.rpartition(":")
    if "::" in where:
        root, _, dotted = where.partition("::")
        return getattr(import_isolated(root, dotted), name)
    if where.endswith(".py"):
        spec = importlib.util.spec_from_file_location(f"_wancore_launch_{abs(hash(where))}", where)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


def init_group(rank: int, world: int, port: int, backend: str = "gloo", timeout_s: float = 60.0) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend, rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}",
                            timeout=datetime.timedelta(seconds=timeout_s))


def _child(rank: int, ref: str, world: int, port: int, backend: str, threads: int, results, args) -> None:
    import torch

    torch.set_num_threads(threads)
    try:
        init_group(rank, world, port, backend)
        out = load_function(ref)(rank, world, *args)
        results.put((rank, True, out))
    except BaseException:  # report everything, the parent re-raises
        results.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_local(ref: str, world: int, *args: Any, backend: str = "gloo", threads: int = 1,
              timeout_s: float = 300.0) -> list[Any]:
    """Run ``fn(rank, world, *args)`` on ``world`` spawned processes; returns the results by rank."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_child, args=(r, ref, world, port, backend, threads, results, args), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    got: dict[int, Any] = {}
    errors = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < world:
            try:
                rank, ok, out = results.get(timeout=1.0)
            except queue_mod.Empty:
                dead = [i for i, p in enumerate(procs) if not p.is_alive() and i not in got]
                if dead:  # a result may still be in flight: one more short wait, then give up
                    try:
                        rank, ok, out = results.get(timeout=2.0)
                    except queue_mod.Empty:
                        codes = ", ".join(f"rank {i} exit code {procs[i].exitcode}" for i in dead)
                        raise RuntimeError(f"run_local: process died without a result ({codes})") from None
                elif time.monotonic() > deadline:
                    raise RuntimeError(f"run_local: no result after {timeout_s:.0f} s from ranks "
                                       f"{sorted(set(range(world)) - set(got))}") from None
                else:
                    continue
            if ok:
                got[rank] = out
            else:
                errors.append((rank, out))
                break
    finally:
        for p in procs:
            p.join(timeout=5 if not errors else 0.5)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        rank, tb = errors[0]
        raise RuntimeError(f"rank {rank} failed:\n{tb}")
    return [got[r] for r in range(world)]
