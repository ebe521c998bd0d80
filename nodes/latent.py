"""Empty latent node: the raw-latent canvas of a Wan 2.1 video (ComfyUI's native LATENT convention)."""
from __future__ import annotations

import torch

from wan_core import latent_format
from wan_core.estimate import SIZE_LIMITS, fit_problem, total_memory
from wan_core.latent_format import video_size_problems
from wan_core.variants import WAN21

from . import host
from .declare import Input, NodeSpec, Output


def size_problems(width: int | None, height: int | None, frames: int | None, batch_size: int | None = 1) -> list[str]:
    """Everything wrong with a requested latent, cheapest check first and nothing allocated: the declared
    ranges, frames 4n+1 and sizes multiple of 16 (with the nearest valid values), then whether the smallest
    Wan DiT could hold the size in the memory of this machine. None (a linked input) is checked when run."""
    problems = EMPTY_LATENT.range_problems(width=width, height=height, frames=frames, batch_size=batch_size)
    if problems:
        return problems
    # a linked value is unknown: a valid stand-in lets the others be checked now
    problems = video_size_problems(16 if width is None else width, 16 if height is None else height,
                                   1 if frames is None else frames)
    if problems or width is None or height is None or frames is None or batch_size is None:
        return problems
    ram = total_memory("cpu")
    compute = max(m for m in (total_memory(host.torch_device()), ram) if m is not None) if ram else None
    fit = fit_problem(width, height, frames, batch_size, compute_bytes=compute, host_bytes=ram)
    return [fit] if fit else []


def validate_size(width: int | None = WAN21.width, height: int | None = WAN21.height, frames: int | None = WAN21.frames,
                  batch_size: int | None = 1) -> bool | str:
    """Pre-queue check: one line naming the inputs and the valid values, or True."""
    problems = size_problems(width, height, frames, batch_size)
    return "; ".join(problems) if problems else True


def empty_latent(width: int, height: int, frames: int, batch_size: int = 1):
    problems = size_problems(width, height, frames, batch_size)
    if problems:
        raise ValueError("; ".join(problems))
    shape = (batch_size, latent_format.CHANNELS, (frames - 1) // 4 + 1, height // 8, width // 8)
    samples = torch.zeros(shape, device=host.intermediate_device())
    return ({"samples": samples, "downscale_ratio_spacial": 8},)


EMPTY_LATENT = NodeSpec(
    node_id="WanCoreEmptyLatent", display_name="WanCore Empty Video Latent", category="WanCore/latent",
    description="An empty Wan 2.1 video latent [B, 16, 1+(frames-1)/4, H/8, W/8] (raw VAE latents, "
                "interchangeable with ComfyUI's EmptyHunyuanLatentVideo).",
    inputs=(
        Input("width", "INT", default=WAN21.width, min=SIZE_LIMITS["width"][0], max=SIZE_LIMITS["width"][1], step=16,
              tooltip="multiple of 16"),
        Input("height", "INT", default=WAN21.height, min=SIZE_LIMITS["height"][0], max=SIZE_LIMITS["height"][1],
              step=16, tooltip="multiple of 16"),
        Input("frames", "INT", default=WAN21.frames, min=SIZE_LIMITS["frames"][0], max=SIZE_LIMITS["frames"][1], step=4,
              tooltip=f"4n+1 ({WAN21.frames} = {(WAN21.frames - 1) // WAN21.fps} s at {WAN21.fps} fps)"),
        Input("batch_size", "INT", default=1, min=SIZE_LIMITS["batch_size"][0], max=SIZE_LIMITS["batch_size"][1]),
    ),
    outputs=(Output("LATENT", "latent"),),
    fn=empty_latent,
    validate=validate_size,
)

NODES = (EMPTY_LATENT,)
