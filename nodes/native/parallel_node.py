"""WanCore Native Context Parallel: a native Wan MODEL -> MODEL running its block stack on several devices.

The node puts three wrappers on a clone of the ModelPatcher (docs/parallel.md section 12): OUTER_SAMPLE takes
the pool (``wan_core.parallel.pool``, started on first use, reused, replaced when the layout changes) and the
patcher being sampled; DIFFUSION_MODEL sends the workers the patched weights that changed since they last got
them (shared memory, ``wan_core.parallel.weights``), wraps the attention override in
:class:`~.parallel_patch.ContextParallelAttention` and hooks every block for the forward, so that block 0 tells
the workers to mirror the block stack and each block runs on this rank's share (``parallel_patch.run_block``).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from wan_core.parallel import ParallelConfig, check_degrees
from wan_core.parallel.pool import LoadSpec, WorkerPool, _meta, _wire, get_pool
from wan_core.parallel.tokens import TokenShard
from wan_core.parallel.weights import WeightVersions, nbytes, shared_copies

from .. import host
from ..declare import Input, NodeSpec, Output
from ..parallel import device_list, devices_problem, host_main_hidden, validate_parallel
from .attention_patch import transformer_options_of
from .parallel_patch import (
    OVERRIDE,
    ContextParallelAttention,
    check_ring_skiparse,
    describe_override,
    grid_of,
    run_block,
    run_vace_block,
)

WHAT = "WanCore Native Context Parallel"
LOG = logging.getLogger("WanCore")
_PACK = Path(__file__).resolve().parents[2]
SERVE_NATIVE = f"{_PACK}::nodes.native.parallel_worker:serve_native"
WEIGHTS_TIMEOUT_S = 600.0


class NativeParallel:
    """Rank 0's side for one node output: the layout, and the wrappers (see module doc)."""

    def __init__(self, config: ParallelConfig, devices: list[str], build: dict, heads: int, timeout_s: float = 25.0):
        self.config, self.devices, self.heads, self.timeout_s = config, devices, heads, timeout_s
        self.spec = LoadSpec(SERVE_NATIVE, (), build)
        self.pool: WorkerPool | None = None
        self.patcher: Any = None
        self.last_sent: dict = {}  # the last weight transfer: {"keys", "bytes"} (shown, measured by the tests)

    def get_pool(self) -> WorkerPool:
        with host_main_hidden():
            pool = get_pool(None, self.config, self.devices, spec=self.spec, timeout_s=self.timeout_s,
                            serve=SERVE_NATIVE, heads=self.heads)
        if not hasattr(pool, "native_weights"):
            pool.native_weights = WeightVersions()  # type: ignore[attr-defined]
        return pool

    def outer_sample(self, executor, *args, **kwargs):
        self.patcher = executor.class_obj.model_patcher
        self.pool = self.get_pool()
        return executor(*args, **kwargs)

    def sync_weights(self, pool: WorkerPool) -> None:
        """Send the workers the patched weights whose base model or patches changed since they got them."""
        versions: WeightVersions = pool.native_weights  # type: ignore[attr-defined]
        base = self.patcher.model.diffusion_model
        version, patches = host.native_weight_patches(self.patcher)
        token = (id(base), version)
        if versions.version == token:
            return
        names = list(base.state_dict(keep_vars=True))
        keys = versions.changed(base, patches, names)
        if keys:
            tensors = shared_copies(host.native_patched_weights(self.patcher, keys))
            pool.send({"op": "weights", "tensors": tensors})
            replies = pool.collect("weights", WEIGHTS_TIMEOUT_S, "could not take the weights")
            self.last_sent = {"keys": len(keys), "bytes": nbytes(tensors)}
            mem = ", ".join(f"rank {r} ({pool.devices[r]}) {m['memory'] / 2**30:.2f} GiB"
                            for r, m in sorted(replies.items()) if m["memory"])
            LOG.info("%s: sent %d weights (%.1f MB) to %d workers%s", WHAT, len(keys), nbytes(tensors) / 1e6,
                     pool.world - 1, f"; GPU memory {mem}" if mem else "")
        versions.commit(base, patches, keys, token)

    def diffusion_model(self, executor, *args, **kwargs):
        model = executor.class_obj
        pool = self.pool if self.pool is not None and not self.pool.closed else self.get_pool()
        self.pool = pool
        if self.patcher is None:
            raise ValueError(f"{WHAT}: sample through ComfyUI's sampler (KSampler / SamplerCustom)")
        to = transformer_options_of(args, kwargs)
        inner = to.get(OVERRIDE)
        desc = describe_override(inner)
        check_ring_skiparse(desc, self.config.ring)
        self.sync_weights(pool)
        x = args[0] if args else kwargs["x"]
        run = {"grid": grid_of(x, tuple(model.patch_size)), "attn": desc}
        to[OVERRIDE] = ContextParallelAttention(inner, pool.groups)
        hooked = self._hook_blocks(model, pool, to, run)
        try:
            return executor(*args, **kwargs)
        finally:
            for obj, name in hooked:
                delattr(obj, name)
            if inner is None:
                to.pop(OVERRIDE, None)
            else:
                to[OVERRIDE] = inner

    def _hook_blocks(self, model, pool: WorkerPool, to: dict, run: dict) -> list:
        """Each block's forward runs :func:`run_block` on this rank's share for this forward; block 0 first
        tells the workers to mirror the stack (only a stack that really runs: a cache may skip it). Returns the
        ``(object, attribute)`` pairs hooked."""
        total = len(model.blocks)
        state: dict[str, Any] = {}
        hooked = self._hook_vace(model, state, to, total) if hasattr(model, "vace_blocks") else []
        for i, block in enumerate(model.blocks):
            original = block.forward

            def forward(x, e, freqs, context, context_img_len=257, transformer_options=None, i=i,
                        original=original):
                opts = to if transformer_options is None else transformer_options
                if i == 0:
                    state["shard"] = TokenShard.of(pool.groups, x.shape[0], x.shape[1])
                    self._publish(pool, [x, e, freqs, context, *state.get("vace", ())], context_img_len,
                                  dict(run, vace_strength=state.get("strength")))

                def fn(x, e, freqs, context):
                    return original(x, e=e, freqs=freqs, context=context, context_img_len=context_img_len,
                                    transformer_options=opts)
                return pool.guard(lambda: run_block(i, total, fn, x, e, freqs, context, opts, state["shard"]))

            block.forward = forward
            hooked.append((block, "forward"))
        return hooked

    @staticmethod
    def _hook_vace(model, state: dict, to: dict, total: int) -> list:
        """ComfyUI's ``VaceWanModel``: its ``forward_orig`` tells the VACE strengths, its VACE patch embedding the
        VACE tokens (sent with the stack's inputs, all inputs along the batch); each VACE block runs
        :func:`run_vace_block` on this rank's share, or as is when the stack is not split (a cache reused it)."""
        main_of = {ii: i for i, ii in model.vace_layers_mapping.items()}
        forward_orig, embed = model.forward_orig, model.vace_patch_embedding.forward

        def hook_forward_orig(*args, **kwargs):
            state["strength"] = [float(s) for s in kwargs["vace_strength"]]
            state["dtype"] = kwargs["vace_context"].dtype
            return forward_orig(*args, **kwargs)

        def hook_embed(v):
            out = embed(v)  # as ComfyUI's forward_orig turns it into tokens:
            state["vace"] = [out.to(state["dtype"]).flatten(2).transpose(1, 2)]
            return out

        hooked = [(model, "forward_orig"), (model.vace_patch_embedding, "forward")]
        model.forward_orig, model.vace_patch_embedding.forward = hook_forward_orig, hook_embed
        for ii, block in enumerate(model.vace_blocks):
            original = block.forward

            def forward(c, x, e, freqs, context, context_img_len=257, transformer_options=None, ii=ii,
                        original=original):
                opts = to if transformer_options is None else transformer_options

                def fn(c, x, e, freqs, context):
                    return original(c, x, e=e, freqs=freqs, context=context, context_img_len=context_img_len,
                                    transformer_options=opts)
                if "shard" not in state:
                    return fn(c, x, e, freqs, context)
                return run_vace_block(fn, c, x, e, freqs, context, opts, state["shard"], ii == 0,
                                      main_of[ii] == total - 1)

            block.forward = forward
            hooked.append((block, "forward"))
        return hooked

    @staticmethod
    def _publish(pool: WorkerPool, tensors: list, img_len, run: dict) -> None:
        import torch.distributed as dist

        pool.send({"op": "run_blocks", "meta": [_meta(t) for t in tensors], "img_len": img_len, **run})
        pool.guard(lambda: [dist.broadcast(_wire(t), 0, group=pool.world_group) for t in tensors])


def native_model_of(model) -> Any:
    """The native WanModel (or VaceWanModel) inside a MODEL; camera, S2V and HuMo variants (other block loops)
    refused."""
    dm = host.native_wan_model(model, WHAT)
    if type(dm).__name__ not in ("WanModel", "VaceWanModel"):
        raise ValueError(f"{WHAT}: runs ComfyUI's WanModel (Wan 2.1/2.2 T2V, I2V, TI2V) and VaceWanModel; this "
                         f"MODEL is "
                         f"{type(dm).__module__}.{type(dm).__name__}")
    return dm


def patch_parallel(model, devices: int = 2, ulysses: int = 2, ring: int = 1, cfg_parallel: bool = False):
    dm = native_model_of(model)
    config = ParallelConfig(ulysses, ring, 2 if cfg_parallel else 1)
    try:
        check_degrees(config, devices, int(dm.num_heads))
    except ValueError as e:
        raise ValueError(f"{WHAT}: {e}") from None
    if devices == 1:
        return (model,)
    problem = devices_problem(devices)
    if problem:
        raise ValueError(f"{WHAT}: {problem}")
    run = NativeParallel(config, device_list(devices), host.native_build_spec(model), int(dm.num_heads))
    patched = model.clone()
    key = "wancore_context_parallel"
    patched.add_wrapper_with_key(host.wrappers_mp("OUTER_SAMPLE"), key, run.outer_sample)
    patched.add_wrapper_with_key(host.wrappers_mp("DIFFUSION_MODEL"), key, run.diffusion_model)
    host.show_text(f"native context parallel: {config.describe()} on {devices} processes")
    return (patched,)


def validate_native_parallel(devices: int = 2, ulysses: int = 2, ring: int = 1,
                             cfg_parallel: bool = False) -> bool | str:
    """Pre-queue, as WanCore Context Parallel: degrees, devices present (the heads when the model arrives)."""
    return validate_parallel(devices, ulysses, ring, cfg_parallel)


PARALLEL = NodeSpec(
    node_id="WanCoreNativeContextParallel", display_name="WanCore Native Context Parallel", category="WanCore/native",
    description="Runs a native Wan MODEL (LoRAs and patches applied) on several GPUs: the video tokens are split "
                "between them (Ulysses: heads all-to-all, Ring: K/V passed around, both: USP) and optionally "
                "cond/uncond on different GPUs (CFG-parallel). Same result as one GPU. Each extra GPU gets a worker "
                "holding a copy of the patched weights, sent once; put it after the LoRA and WanCore patch nodes.",
    inputs=(
        Input("model", "MODEL"),
        Input("devices", "INT", default=2, min=1, max=64, tooltip="GPUs to use (this one first)"),
        Input("ulysses", "INT", default=2, min=1, max=64,
              tooltip="all-to-all degree: must divide the head count (12 for 1.3B, 40 for 14B); fast links"),
        Input("ring", "INT", default=1, min=1, max=64, tooltip="ring degree: K/V rotation, covers the rest"),
        Input("cfg_parallel", "BOOLEAN", default=False,
              tooltip="cond and uncond on different GPUs (needs cfg != 1; doubles the processes)"),
    ),
    outputs=(Output("MODEL", "model"),),
    fn=patch_parallel,
    validate=validate_native_parallel,
    search_aliases=("multi gpu", "ulysses", "ring attention", "usp", "sequence parallel", "native"),
)
