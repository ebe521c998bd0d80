"""Wan 2.2 nodes: the A14B two-expert model, the TI2V-5B empty latent and its first-frame latent (docs/wan22.md
section 6). LATENTs are ComfyUI's: raw Wan 2.2 VAE latents [B, 48, T, H/16, W/16]; the first-frame latent
carries a ``noise_mask`` that is 0 on latent frame 0, as ComfyUI's native ``Wan22ImageToVideoLatent`` makes it."""
from __future__ import annotations

import torch

from wan_core import latent_format
from wan_core.estimate import SIZE_LIMITS
from wan_core.i2v import resize_image
from wan_core.pipeline import check_models
from wan_core.dit.moe import WanMoE
from wan_core.variants import I2V_A14B, T2V_A14B, TI2V_5B

from . import host
from .declare import Input, NodeSpec, Output


def moe(high_noise_model, low_noise_model, boundary: float = T2V_A14B.boundary,
        guidance_high: float = T2V_A14B.guidance, guidance_low: float = T2V_A14B.guidance_low):
    check_models(high_noise_model)
    check_models(low_noise_model)
    return (WanMoE(high_noise_model, low_noise_model, boundary=boundary, guidance=(guidance_high, guidance_low)),)


MOE = NodeSpec(
    node_id="WanCoreMoE", display_name="WanCore Wan 2.2 MoE (A14B experts)", category="WanCore/model",
    description="Wan 2.2 A14B: the high-noise expert runs the steps with timestep >= boundary x 1000, the low-noise "
                "expert the rest, each with its own guidance (these replace the sampler's guidance); caches start "
                f"afresh for the second expert. Official T2V: boundary {T2V_A14B.boundary:g}, guidance "
                f"{T2V_A14B.guidance} / {T2V_A14B.guidance_low}, shift {T2V_A14B.shift:g}, {T2V_A14B.steps} steps; "
                f"I2V: {I2V_A14B.boundary:g}, {I2V_A14B.guidance} / {I2V_A14B.guidance_low}, shift {I2V_A14B.shift:g}.",
    inputs=(
        Input("high_noise_model", "WANCORE_MODEL", tooltip="the high_noise_model file of the pair"),
        Input("low_noise_model", "WANCORE_MODEL", tooltip="the low_noise_model file of the pair"),
        Input("boundary", "FLOAT", default=T2V_A14B.boundary, min=0.01, max=0.99, step=0.005,
              tooltip=f"switch when the timestep drops below boundary x 1000 (T2V {T2V_A14B.boundary:g}, "
                      f"I2V {I2V_A14B.boundary:g})"),
        Input("guidance_high", "FLOAT", default=T2V_A14B.guidance, min=0.0, max=30.0, step=0.1,
              tooltip=f"classifier-free guidance of the high-noise expert (T2V {T2V_A14B.guidance})"),
        Input("guidance_low", "FLOAT", default=T2V_A14B.guidance_low, min=0.0, max=30.0, step=0.1,
              tooltip=f"classifier-free guidance of the low-noise expert (T2V {T2V_A14B.guidance_low})"),
    ),
    outputs=(Output("WANCORE_MODEL", "model"),),
    fn=moe,
)


def size_problems(width: int | None, height: int | None, frames: int | None) -> list[str]:
    """Sizes of a TI2V-5B video: width and height multiples of 32 (VAE 16x, patch 2x2), frames 4n+1."""
    problems = []
    for name, value in (("width", width), ("height", height)):
        if value is not None and value % 32:
            lo = max(32, value // 32 * 32)
            problems.append(f"{name}={value}: must be a multiple of 32 for Wan 2.2 TI2V-5B; nearest valid: {lo} or "
                            f"{lo + 32}")
    if frames is not None and (frames - 1) % 4:
        lo = frames - (frames - 1) % 4
        problems.append(f"frames={frames}: must be 4n+1; nearest valid: {lo} or {lo + 4}")
    return problems


def validate_size(width: int | None = TI2V_5B.width, height: int | None = TI2V_5B.height,
                  frames: int | None = TI2V_5B.frames,
                  batch_size: int | None = 1) -> bool | str:
    problems = EMPTY_LATENT22.range_problems(width=width, height=height, frames=frames, batch_size=batch_size)
    problems = problems or size_problems(width, height, frames)
    return "; ".join(problems) if problems else True


def _zero_latent(width: int, height: int, frames: int, batch_size: int) -> torch.Tensor:
    shape = (batch_size, latent_format.WAN22_CHANNELS, (frames - 1) // 4 + 1, height // 16, width // 16)
    return torch.zeros(shape, device=host.intermediate_device())


def empty_latent22(width: int = TI2V_5B.width, height: int = TI2V_5B.height, frames: int = TI2V_5B.frames,
                   batch_size: int = 1):
    checked = validate_size(width, height, frames, batch_size)
    if checked is not True:
        raise ValueError(checked)
    return ({"samples": _zero_latent(width, height, frames, batch_size), "downscale_ratio_spacial": 16},)


_SIZE_INPUTS = (
    Input("width", "INT", default=TI2V_5B.width, min=32, max=SIZE_LIMITS["width"][1], step=32,
          tooltip=f"multiple of 32 (official {TI2V_5B.width})"),
    Input("height", "INT", default=TI2V_5B.height, min=32, max=SIZE_LIMITS["height"][1], step=32,
          tooltip=f"multiple of 32 (official {TI2V_5B.height})"),
    Input("frames", "INT", default=TI2V_5B.frames, min=1, max=SIZE_LIMITS["frames"][1], step=4,
          tooltip=f"4n+1 ({TI2V_5B.frames} = {(TI2V_5B.frames - 1) // TI2V_5B.fps} s at {TI2V_5B.fps} fps)"),
    Input("batch_size", "INT", default=1, min=SIZE_LIMITS["batch_size"][0], max=SIZE_LIMITS["batch_size"][1]),
)

EMPTY_LATENT22 = NodeSpec(
    node_id="WanCoreEmptyLatent22", display_name="WanCore Empty Video Latent (Wan 2.2 TI2V-5B)",
    category="WanCore/latent",
    description="An empty Wan 2.2 VAE latent [B, 48, 1+(frames-1)/4, H/16, W/16] for the TI2V-5B model "
                "(interchangeable with ComfyUI's Wan22ImageToVideoLatent without a start image).",
    inputs=_SIZE_INPUTS,
    outputs=(Output("LATENT", "latent"),),
    fn=empty_latent22,
    validate=validate_size,
)


def image_to_video_latent22(vae, start_image: torch.Tensor, width: int = TI2V_5B.width, height: int = TI2V_5B.height,
                            frames: int = TI2V_5B.frames, batch_size: int = 1):
    checked = validate_size(width, height, frames, batch_size)
    if checked is not True:
        raise ValueError(checked)
    z_dim = getattr(getattr(vae, "config", None), "z_dim", None)
    if z_dim != latent_format.WAN22_CHANNELS:
        raise ValueError(f"vae: {host_name(vae)} has {z_dim} latent channels; TI2V-5B needs the Wan 2.2 VAE "
                         f"(wan2.2_vae, 48 channels)")
    frame = resize_image(start_image[:1], width, height)  # [1, 3, H, W] in [-1, 1]
    with host.on_device(vae) as v, torch.inference_mode():
        z0 = v.encode(frame.unsqueeze(2).to(v.device, v.dtype)).float().to(host.intermediate_device())
    samples = _zero_latent(width, height, frames, 1)
    # raw latents everywhere: the mean (normalised 0) where the model starts from noise, the image at frame 0
    samples = latent_format.from_model(samples)
    samples[:, :, :1] = z0
    mask = torch.ones(1, 1, samples.shape[2], samples.shape[3], samples.shape[4], device=samples.device)
    mask[:, :, :1] = 0.0
    return ({"samples": samples.repeat(batch_size, 1, 1, 1, 1), "noise_mask": mask.repeat(batch_size, 1, 1, 1, 1),
             "downscale_ratio_spacial": 16},)


def host_name(model) -> str:
    from wan_core.pipeline import source_name

    return source_name(model, "the VAE")


IMAGE_TO_VIDEO22 = NodeSpec(
    node_id="WanCoreImageToVideoLatent22", display_name="WanCore Image to Video Latent (Wan 2.2 TI2V-5B)",
    category="WanCore/latent",
    description="TI2V-5B image-to-video: the start image, resized (bicubic, no crop) and encoded, becomes latent "
                "frame 0 and stays fixed while the sampler generates the rest (noise_mask 0 on frame 0, as "
                "ComfyUI's native Wan22ImageToVideoLatent).",
    inputs=(Input("vae", "WANCORE_VAE"), Input("start_image", "IMAGE"), *_SIZE_INPUTS),
    outputs=(Output("LATENT", "latent"),),
    fn=image_to_video_latent22,
)

NODES = (MOE, EMPTY_LATENT22, IMAGE_TO_VIDEO22)
