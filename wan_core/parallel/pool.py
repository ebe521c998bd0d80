"""Worker pool for context parallelism inside one driving process (ComfyUI): rank 0 drives, workers mirror.

The driving process is rank 0 and keeps sampling as usual; one worker per extra device is started with
``torch.multiprocessing`` (spawn), joins the group, loads the same checkpoint from disk itself (``LoadSpec``:
nothing is pickled but the file name and options) and waits for work. Every time rank 0's parallel model runs
its block stack, rank 0 tells the workers (a small message on a queue) and broadcasts the stack's inputs; all
ranks then run their shard with the collectives of ``wan_core.parallel.dit``. Caches and step hooks stay on
rank 0 (they only decide whether the block stack runs).

Failure handling: a worker that dies makes rank 0's next collective fail (its sockets close) or time out after
``timeout_s``; rank 0 then raises :class:`WorkerError` naming the worker, tears the pool down (workers stopped,
killed after a grace period, the process group destroyed) and the next :func:`get_pool` starts a fresh one.
Workers exit by themselves when the driving process disappears (no orphans).
"""
from __future__ import annotations

import atexit
import datetime
import os
import queue as queue_mod
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .groups import ParallelConfig, build_groups, check_degrees
from .launch import free_port, load_function

STARTUP_TIMEOUT_S = 600.0  # process start + checkpoint load per worker


class WorkerError(RuntimeError):
    """A context-parallel worker died, failed or stopped answering; the pool has been shut down."""


@dataclass(frozen=True)
class LoadSpec:
    """How a worker loads the model itself: ``fn`` ("module:function" or "file.py:function") called with
    ``args`` / ``kwargs`` and ``device=<its device>``; it returns the DiT."""

    fn: str = "wan_core.dit.loader:load_dit"
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def key(self) -> str:
        return repr((self.fn, self.args, sorted(self.kwargs.items())))

    @classmethod
    def of(cls, dit: Any) -> "LoadSpec":
        """The spec that reloads ``dit`` as ``load_dit`` made it (its file, dtype and acceleration options)."""
        source = getattr(dit, "source", None)
        opts = getattr(dit, "load_options", None)
        if not source or source == "<model>" or opts is None:
            raise ValueError("context parallelism needs a model loaded from a file (workers load the same file "
                             "themselves); this model was built in memory")
        import dataclasses

        kwargs = {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)}
        kwargs["dtype"] = dit.dtype  # the compute dtype (embeddings and head are never fp8)
        kwargs["config"] = dit.config  # exactly the rank-0 model's (the head count is not in the file)
        return cls("wan_core.dit.loader:load_dit", (str(source),), kwargs)


def _pack(text: Any) -> tuple[list[torch.Tensor], Any]:
    if isinstance(text, torch.Tensor):
        return [text], "tensor"
    return [t for kv in text for t in kv], ("kv", len(text), len(text[0]))


def _unpack(tensors: list[torch.Tensor], spec: Any) -> Any:
    if spec == "tensor":
        return tensors[0]
    _, n, per = spec
    return [tuple(tensors[i * per:(i + 1) * per]) for i in range(n)]


def _meta(t: torch.Tensor) -> tuple[tuple[int, ...], str]:
    return tuple(t.shape), str(t.dtype).removeprefix("torch.")


def _wire(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t).contiguous() if t.is_complex() else t.contiguous()


class _Driver:
    """Rank 0's side: announces each block-stack run and broadcasts its inputs (used by the parallel model)."""

    def __init__(self, pool: "WorkerPool"):
        self.pool = pool

    def publish(self, model, h, e0, text, freqs, attention_cache, args, kwargs) -> None:
        kwargs = dict(kwargs)
        vace = kwargs.pop("vace", None) or []  # a VACE model's embedded VACE inputs travel with the other tensors
        if attention_cache is not None or args or kwargs:
            raise WorkerError("the context-parallel worker pool cannot mirror the attention cache (rank 0 alone "
                              "would skip attention): use cache exact, teacache, magcache, easycache or wan with "
                              "attention off, or run under torchrun")
        text_tensors, text_spec = _pack(text)
        tensors = [h, e0, freqs] + [tokens for tokens, _ in vace] + text_tensors
        step = getattr(model.attention, "step", None), getattr(model.attention, "total", None)
        self.pool.send({"op": "run_blocks", "meta": [_meta(t) for t in tensors], "text": text_spec, "step": step,
                        "loras": lora_stack(model), "vace": [scale for _, scale in vace]})
        self.pool.guard(lambda: [dist.broadcast(_wire(t), 0, group=self.pool.world_group) for t in tensors])


def lora_stack(model: Any) -> tuple:
    """``((file, strength, merge), ...)`` of the LoRAs ``model`` wants (``wan_core.lora``): the workers apply the
    same files at the same strengths, so their weights match rank 0's."""
    from ..lora.stack import wanted_loras

    out = []
    for applied in wanted_loras(model):
        source = applied.lora.source
        if not isinstance(source, str) or not os.path.isfile(source):
            raise WorkerError(f"LoRA {applied.name}: the context-parallel workers load LoRAs from files, this one "
                              f"was given in memory ({source!r})")
        out.append((source, applied.strength, applied.merge))
    return tuple(out)


def _set_loras(dit: Any, stack: tuple) -> None:
    from ..lora.stack import apply_lora, remove_loras

    remove_loras(dit)
    for source, strength, merge in stack:
        apply_lora(dit, source, strength, merge)


def _importable_in_children() -> None:
    """Spawned workers unpickle references into ``wan_core``. Inside ComfyUI the pack loads ``wan_core`` from its
    file location, not from ``sys.path``, so the pack's folder is appended (after ComfyUI's own folders, whose
    ``nodes`` module must stay first); the children start with the parent's ``sys.path``."""
    import sys
    from pathlib import Path

    folder = str(Path(__file__).resolve().parents[2])
    if folder not in sys.path:
        sys.path.append(folder)


def serve_dit(spec: LoadSpec, device: str, groups, world_group):
    """The worker side of WanCore's own DiT: loads the checkpoint itself (``spec``) and returns the handler of
    ``run_blocks`` messages (receive the block stack's inputs, run this rank's shard, apply rank 0's LoRAs)."""
    dit = load_function(spec.fn)(*spec.args, **spec.kwargs, device=device)
    from .dit import context_parallel

    model = context_parallel(dit, groups)
    loras: list[tuple] = [()]

    def handle(cmd: dict) -> None:
        if cmd["op"] != "run_blocks":
            raise ValueError(f"unknown worker message {cmd['op']!r}")
        tensors = receive(cmd["meta"], device, world_group)
        h, e0, freqs, *text = tensors
        scales = cmd["vace"]  # a VACE model's embedded inputs come first, then the text tensors
        vace = [(tokens, scale) for tokens, scale in zip(text[:len(scales)], scales)] or None
        text = text[len(scales):]
        model.attention.step, model.attention.total = cmd["step"]
        if cmd["loras"] != loras[0]:  # rank 0's model now wants other LoRAs (or strengths)
            _set_loras(dit, cmd["loras"])
            loras[0] = cmd["loras"]
        with torch.inference_mode():
            model.run_blocks(h, e0, _unpack(text, cmd["text"]), freqs, **({"vace": vace} if vace else {}))

    return handle


def receive(meta: list, device: str, group) -> list[torch.Tensor]:
    """The tensors rank 0 broadcasts after a message (``meta``: shape and dtype of each, ``_meta``)."""
    tensors = []
    for shape, dtype in meta:
        dt = getattr(torch, dtype)
        wire = torch.empty(tuple(shape) + ((2,) if dt.is_complex else ()),
                           dtype=torch.float32 if dt == torch.complex64 else
                           torch.float64 if dt == torch.complex128 else dt, device=device)
        dist.broadcast(wire, 0, group=group)
        tensors.append(torch.view_as_complex(wire) if dt.is_complex else wire)
    return tensors


SERVE_DIT = "wan_core.parallel.pool:serve_dit"


def _worker(rank: int, world: int, port: int, device: str, spec: LoadSpec, config: ParallelConfig,
            timeout_s: float, commands, results, serve: str = SERVE_DIT) -> None:
    """Worker main loop (spawned): join the group, build the handler (``serve``), run messages until stopped."""
    results.put(("started", rank, None))  # rank 0 waits for this before the rendezvous, watching for deaths
    try:
        torch.set_num_threads(max(1, torch.get_num_threads() // world))
        if device.startswith("cuda"):
            torch.cuda.set_device(torch.device(device))
        backend = "nccl" if device.startswith("cuda") else "gloo"
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=STARTUP_TIMEOUT_S))
        world_group = dist.new_group(list(range(world)), timeout=datetime.timedelta(seconds=timeout_s))
        groups = build_groups(config, timeout_s=timeout_s)
        handle = load_function(serve)(spec, device, groups, world_group)
        results.put(("ready", rank, None))
        parent = mp.parent_process()
        while True:
            try:
                cmd = commands.get(timeout=1.0)
            except queue_mod.Empty:
                if parent is not None and not parent.is_alive():
                    return  # the driving process is gone: exit, never linger
                continue
            if cmd["op"] == "stop":
                return
            reply = handle(cmd)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            if reply is not None:
                results.put((cmd["op"], rank, reply))
    except BaseException:
        results.put(("error", rank, traceback.format_exc()))
    finally:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass


class WorkerPool:
    """Rank 0 plus ``world - 1`` spawned workers running one context-parallel model (see module doc).

    ``devices``: one per rank, rank 0's first ("cuda:0", "cuda:1", ... or "cpu" for tests). ``model`` is rank
    0's parallel model: give it to the sampler as the DiT. ``close()`` (also at exit) stops everything."""

    def __init__(self, dit: Any, config: ParallelConfig, devices: list[str], spec: LoadSpec | None = None,
                 timeout_s: float = 25.0, serve: str = SERVE_DIT, heads: int | None = None):
        check_degrees(config, len(devices), int(dit.config.num_heads) if heads is None else heads)
        if dist.is_initialized():
            raise RuntimeError("a torch.distributed process group already exists in this process; the "
                               "context-parallel pool needs to own it (under torchrun use the CLI's --ulysses "
                               "/ --ring instead of the pool)")
        self.config, self.devices, self.timeout_s = config, list(devices), timeout_s
        self.spec = spec if spec is not None else LoadSpec.of(dit)
        self.serve = serve
        self.world = len(devices)
        self.closed = False
        ctx = mp.get_context("spawn")
        self.results = ctx.Queue()
        self.commands = [ctx.Queue() for _ in range(self.world - 1)]
        port = free_port()
        _importable_in_children()
        self.procs = [ctx.Process(target=_worker, daemon=True, name=f"wancore-cp-rank{r}",
                                  args=(r, self.world, port, devices[r], self.spec, config, timeout_s,
                                        self.commands[r - 1], self.results, serve))
                      for r in range(1, self.world)]
        for p in self.procs:
            p.start()
        try:
            self._wait_started()  # a worker that dies on start must not leave rank 0 in the rendezvous
            backend = "nccl" if str(devices[0]).startswith("cuda") else "gloo"
            dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=self.world,
                                    timeout=datetime.timedelta(seconds=STARTUP_TIMEOUT_S))
            self.world_group = dist.new_group(list(range(self.world)), timeout=datetime.timedelta(seconds=timeout_s))
            groups = build_groups(config, timeout_s=timeout_s)
            self._wait_ready()
        except BaseException:
            self.close()
            raise
        self.groups = groups
        self.model = self.view(dit) if serve == SERVE_DIT else None
        _POOLS.append(self)

    def view(self, dit: Any) -> Any:
        """Rank 0's parallel model for ``dit`` (the pool's model file, possibly a LoRA view of it): each node run
        gets its own view, so its LoRA stack is the one the sampler activates and the workers mirror."""
        from .dit import context_parallel

        model = context_parallel(dit, self.groups)
        model.parallel_driver = _Driver(self)
        return model

    # ---- health
    def _dead(self) -> list[str]:
        return [f"rank {r} (pid {p.pid}, {self.devices[r]}, exit code {p.exitcode})"
                for r, p in enumerate(self.procs, start=1) if not p.is_alive()]

    def _worker_errors(self) -> list[str]:
        out: list[str] = []
        while True:
            try:
                kind, rank, msg = self.results.get_nowait()
            except queue_mod.Empty:
                return out
            if kind == "error":
                out.append(f"rank {rank}: {msg.strip().splitlines()[-1]}")

    def _wait_started(self) -> None:
        started: set[int] = set()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while len(started) < self.world - 1:
            try:
                kind, rank, msg = self.results.get(timeout=1.0)
            except queue_mod.Empty:
                dead = self._dead()
                if dead or time.monotonic() > deadline:
                    raise WorkerError("context-parallel worker failed to start (it could not import the pack or "
                                      f"its arguments): {'; '.join(dead) or 'timeout'}") from None
                continue
            if kind == "started":
                started.add(rank)

    def _wait_ready(self) -> None:
        self.collect("ready", STARTUP_TIMEOUT_S, "failed to start")

    def collect(self, kind: str, timeout_s: float, what: str) -> dict[int, Any]:
        """Every worker's ``(kind, rank, reply)`` result; a dead or failing worker (or the timeout) raises a
        WorkerError naming it (``what`` says what it was doing)."""
        replies: dict[int, Any] = {}
        deadline = time.monotonic() + timeout_s
        while len(replies) < self.world - 1:
            try:
                got, rank, msg = self.results.get(timeout=1.0)
            except queue_mod.Empty:
                dead = self._dead()
                if dead or time.monotonic() > deadline:
                    raise WorkerError(f"context-parallel worker {what}: {'; '.join(dead) or 'timeout'}") from None
                continue
            if got == "error":
                raise WorkerError(f"context-parallel worker rank {rank} ({self.devices[rank]}) {what}: "
                                  f"{msg.strip().splitlines()[-1]}")
            if got == kind:
                replies[rank] = msg
        return replies

    def send(self, cmd: dict) -> None:
        if self.closed:
            raise WorkerError("the context-parallel pool was shut down; run again to start a new one")
        dead = self._dead()
        if dead:
            self._fail(f"context-parallel worker {dead[0]} died")
        for q in self.commands:
            q.put(cmd)

    def guard(self, fn):
        """Run a collective on rank 0; any failure becomes a WorkerError naming the worker, pool torn down."""
        try:
            return fn()
        except WorkerError:
            raise
        except Exception as exc:  # gloo/NCCL errors when a peer dies or times out, or rank 0's own error
            time.sleep(0.5)  # let a dying worker's exit code / error message arrive
            why = self._worker_errors() or self._dead()
            if why:
                self._fail(f"context-parallel worker failed: {why[0]}")
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if "timeout" in text.lower() or "timed out" in text.lower():
                self._fail(f"context-parallel worker failed: no answer within {self.timeout_s:.0f} s ({text})")
            # rank 0 itself failed mid-run (the workers wait in a collective): stop them, keep the error's type
            self.close()
            message = (f"{text} (on rank 0 of the context-parallel pool; the worker pool was shut down, the next "
                       f"run starts a new one)")
            try:
                err = type(exc)(message)
            except Exception:  # noqa: BLE001 - an exception type with another constructor
                err = RuntimeError(message)
            raise err from exc

    def _fail(self, message: str):
        self.close()
        raise WorkerError(f"{message}; the worker pool was shut down (the next run starts a new one)")

    def close(self) -> None:
        """Stop the workers (kill those that do not exit within 5 s) and destroy the process group."""
        if self.closed:
            return
        self.closed = True
        for q in self.commands:
            try:
                q.put({"op": "stop"})
            except Exception:  # noqa: BLE001
                pass
        deadline = time.monotonic() + 5.0
        for p in self.procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5.0)
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - a group with a dead peer may not shut down cleanly
            pass
        if self in _POOLS:
            _POOLS.remove(self)

    def key(self) -> tuple:
        return (self.serve, self.spec.key(), self.config, tuple(self.devices))


_POOLS: list[WorkerPool] = []


def get_pool(dit: Any, config: ParallelConfig, devices: list[str], spec: LoadSpec | None = None,
             timeout_s: float = 25.0, serve: str = SERVE_DIT, heads: int | None = None) -> WorkerPool:
    """The running pool for this model, layout and devices, or a new one (any other pool is shut down first:
    a process has one group). ``serve``: the workers' handler factory (``serve_dit`` for WanCore's DiT; the
    native ComfyUI model has its own), ``heads``: the head count when ``dit`` is None."""
    spec = spec if spec is not None else LoadSpec.of(dit)
    for pool in list(_POOLS):
        if not pool.closed and pool.key() == (serve, spec.key(), config, tuple(devices)) and not pool._dead():
            return pool
        pool.close()
    return WorkerPool(dit, config, devices, spec, timeout_s, serve, heads)


def shutdown_pools() -> None:
    for pool in list(_POOLS):
        pool.close()


atexit.register(shutdown_pools)
