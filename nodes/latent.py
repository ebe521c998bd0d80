"""Empty latent node: the raw-latent canvas of a Wan 2.1 video (ComfyUI's native LATENT convention)."""
from __future__ import annotations

import torch

from wan_core import latent_format
from wan_core.pipeline import check_video_size

from . import host
from .declare import Input, NodeSpec, Output


def validate_size(width: int = 832, height: int = 480, frames: int = 81) -> bool | str:
    """Pre-queue check: a message naming the input and the nearest valid values, or True."""
    try:
        check_video_size(int(width), int(height), int(frames))
    except ValueError as e:
        return str(e)
    return True


def empty_latent(width: int, height: int, frames: int, batch_size: int = 1):
    check_video_size(width, height, frames)
    shape = (batch_size, latent_format.CHANNELS, (frames - 1) // 4 + 1, height // 8, width // 8)
    samples = torch.zeros(shape, device=host.intermediate_device())
    return ({"samples": samples, "downscale_ratio_spacial": 8},)


EMPTY_LATENT = NodeSpec(
    node_id="WanCoreEmptyLatent", display_name="WanCore Empty Video Latent", category="WanCore/latent",
    description="An empty Wan 2.1 video latent [B, 16, 1+(frames-1)/4, H/8, W/8] (raw VAE latents, "
                "interchangeable with ComfyUI's EmptyHunyuanLatentVideo).",
    inputs=(
        Input("width", "INT", default=832, min=16, max=8192, step=16, tooltip="multiple of 16"),
        Input("height", "INT", default=480, min=16, max=8192, step=16, tooltip="multiple of 16"),
        Input("frames", "INT", default=81, min=1, max=2001, step=4, tooltip="4n+1 (81 = 5 s at 16 fps)"),
        Input("batch_size", "INT", default=1, min=1, max=64),
    ),
    outputs=(Output("LATENT", "latent"),),
    fn=empty_latent,
    validate=validate_size,
)

NODES = (EMPTY_LATENT,)
