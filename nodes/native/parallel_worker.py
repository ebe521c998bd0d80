"""The worker side of the native context-parallel node: ComfyUI's own Wan model in a worker process.

Runs in a process spawned by ``wan_core.parallel.pool`` in ComfyUI's Python environment, imported on its own
(``wan_core.parallel.launch.import_isolated``: neither ComfyUI's ``nodes`` module nor the pack's node
registration runs). It builds the same ``comfy.ldm.wan.model`` class as rank 0 from the ``unet_config`` (empty
weights), takes the patched weights rank 0 sends through shared memory, and mirrors rank 0's block stack
(``parallel_patch.run_stack``). This is the one module besides ``host`` that imports ``comfy``: it is the
worker's host.
"""
from __future__ import annotations

import sys
from typing import Any

import torch

from wan_core.parallel.pool import LoadSpec, receive
from wan_core.parallel.tokens import TokenShard

from .parallel_patch import OVERRIDE, ContextParallelAttention, build_override, run_stack


def build_native_model(spec: dict, device: str) -> torch.nn.Module:
    """ComfyUI's Wan model of class ``spec["class_name"]`` with ``spec["unet_config"]`` on ``device`` (weights
    uninitialised; ComfyUI's ``disable_weight_init`` / ``manual_cast`` operations, as its loader picks)."""
    import comfy.options

    if "comfy.cli_args" not in sys.modules:  # a fresh worker: ComfyUI's device logic must see --cpu on CPU
        argv = sys.argv
        sys.argv = [argv[0]] + (["--cpu"] if device == "cpu" else [])
        try:
            comfy.options.enable_args_parsing()
            import comfy.cli_args  # noqa: F401
        finally:
            sys.argv = argv
    import comfy.ldm.wan.model
    import comfy.ops

    ops = comfy.ops.manual_cast if spec["manual_cast_dtype"] is not None else comfy.ops.disable_weight_init
    cls = getattr(comfy.ldm.wan.model, spec["class_name"])
    config = dict(spec["unet_config"], dtype=spec["dtype"])
    with torch.inference_mode(False):
        model = cls(**config, device=device, operations=ops)
    return model.eval().requires_grad_(False)


def serve_native(spec: LoadSpec, device: str, groups, world_group):
    """The handler of a native worker: ``weights`` (copy rank 0's shared tensors in; reply bytes and memory)
    and ``run_blocks`` (receive the block stack's inputs, run this rank's share)."""
    model = build_native_model(spec.kwargs, device)
    params = dict(model.state_dict(keep_vars=True))

    def handle(cmd: dict) -> Any:
        if cmd["op"] == "weights":
            unknown = sorted(set(cmd["tensors"]) - set(params))
            if unknown:
                raise ValueError(f"weights the worker's model does not have: {', '.join(unknown[:3])}")
            with torch.no_grad():
                for name, t in cmd["tensors"].items():
                    params[name].data.copy_(t)
            used = torch.cuda.memory_allocated(device) if device.startswith("cuda") else 0
            return {"bytes": sum(t.numel() * t.element_size() for t in cmd["tensors"].values()), "memory": used}
        if cmd["op"] != "run_blocks":
            raise ValueError(f"unknown worker message {cmd['op']!r}")
        x, e, freqs, context, *c_all = receive(cmd["meta"], device, world_group)
        to = {OVERRIDE: ContextParallelAttention(build_override(cmd["attn"]), groups), "grid_sizes": cmd["grid"]}
        shard = TokenShard.of(groups, x.shape[0], x.shape[1])
        vace = None
        if cmd.get("vace_strength") is not None:  # VaceWanModel: its VACE tokens, all inputs along the batch
            vace = (model.vace_blocks, model.vace_layers_mapping, list(c_all[0].split(x.shape[0])),
                    cmd["vace_strength"])
        with torch.inference_mode():
            run_stack(model.blocks, x, e, freqs, context, cmd["img_len"], to, shard, vace)
        return None

    return handle
