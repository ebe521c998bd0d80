"""Image-to-video nodes (docs/i2v.md section 7): the CLIP vision loader and the conditioning node whose output the
sampler takes beside the empty latent it makes."""
from __future__ import annotations

import contextlib

import torch

import wan_core
from wan_core.i2v import ImageCondition, image_condition
from wan_core.numerics import check_finite
from wan_core.variants import WAN21
from wan_core.wfvae.latent_format import refuse_wfvae

from . import host
from .declare import Input, NodeSpec, Output
from .latent import EMPTY_LATENT, empty_latent, size_problems
from .models import DTYPES, _check_file, _dtype_for

CLIP_FOLDER = "clip_vision"


def validate_clip_vision(clip_name: str) -> bool | str:
    from wan_core.i2v.clip_vision import _vision_state_dict  # reads the header only

    pickled = str(clip_name).lower().endswith((".pth", ".pt", ".ckpt", ".bin"))
    return _check_file(CLIP_FOLDER, "clip_name", clip_name, None if pickled else _vision_state_dict)


def load_clip_vision(clip_name: str, dtype: str = "auto"):
    path = host.model_path(CLIP_FOLDER, clip_name)  # only a listed name, even if validation was skipped
    device = host.torch_device()
    encoder = wan_core.load_clip_vision(path, dtype=_dtype_for(dtype, device), device="cpu")
    encoder.wancore_device = device
    return (encoder,)


def native_tokens(output, name: str) -> torch.Tensor:
    """``penultimate_hidden_states`` of ComfyUI's CLIP_VISION_OUTPUT (``CLIPVisionEncode``): ``[1, 257, 1280]``."""
    tokens = getattr(output, "penultimate_hidden_states", None)
    if tokens is None and isinstance(output, dict):
        tokens = output.get("penultimate_hidden_states")
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 3:
        raise ValueError(f"{name}: expected the output of ComfyUI's CLIP Vision Encode (penultimate hidden states "
                         f"[1, 257, 1280])")
    return tokens[:1].float().cpu()


def validate_image_to_video(width: int | None = WAN21.width, height: int | None = WAN21.height,
                            frames: int | None = WAN21.frames,
                            batch_size: int | None = 1) -> bool | str:
    problems = size_problems(width, height, frames, batch_size)
    return "; ".join(problems) if problems else True


def image_to_video(vae, start_image: torch.Tensor, width: int = WAN21.width, height: int = WAN21.height,
                   frames: int = WAN21.frames,
                   batch_size: int = 1, end_image: torch.Tensor | None = None, clip_vision=None,
                   clip_vision_output=None, clip_vision_end_output=None):
    refuse_wfvae(vae, "vae")
    problems = size_problems(width, height, frames, batch_size)
    if problems:
        raise ValueError("; ".join(problems))
    first = start_image[:1]
    last = end_image[-1:] if end_image is not None else None
    for name, image in (("start_image", first), ("end_image", last)):
        if image is not None:
            check_finite(image, name, "the image is corrupt")
    with contextlib.ExitStack() as stack, torch.inference_mode():
        v = stack.enter_context(host.on_device(vae))
        encoder = stack.enter_context(host.on_device(clip_vision)) if clip_vision is not None else None
        cond = image_condition(v, first, width, height, frames, last, encoder, interrupt=host.check_interrupt)
    if clip_vision is None and clip_vision_output is not None:  # ComfyUI's native CLIP Vision Encode output
        tokens = [native_tokens(clip_vision_output, "clip_vision_output")]
        if last is not None:
            if clip_vision_end_output is None:
                raise ValueError("clip_vision_end_output: a first-last-frame video needs the CLIP vision encoding "
                                 "of the end image too")
            tokens.append(native_tokens(clip_vision_end_output, "clip_vision_end_output"))
        clip = torch.cat(tokens, dim=1)
        cond = ImageCondition(cond.image_latent, clip, width, height, frames, last is not None)
    (latent,) = empty_latent(width, height, frames, batch_size)
    return cond, latent


CLIP_VISION_LOADER = NodeSpec(
    node_id="WanCoreCLIPVisionLoader", display_name="WanCore Load CLIP Vision", category="WanCore/loaders",
    description="Loads the CLIP vision encoder of Wan 2.1 image-to-video (clip_vision_h.safetensors, ViT-H/14, or "
                "a transformers CLIP folder) from models/clip_vision.",
    inputs=(
        Input("clip_name", "COMBO", options=lambda: host.list_models(CLIP_FOLDER),
              tooltip="e.g. clip_vision_h.safetensors"),
        Input("dtype", "COMBO", default="auto", options=tuple(DTYPES)),
    ),
    outputs=(Output("WANCORE_CLIP_VISION", "clip_vision"),),
    fn=load_clip_vision,
    validate=validate_clip_vision,
)

IMAGE_TO_VIDEO = NodeSpec(
    node_id="WanCoreImageToVideo", display_name="WanCore Image to Video", category="WanCore/conditioning",
    description="Start image (and optional end image) -> the image conditioning of a Wan 2.1 I2V / FLF2V model "
                "(VAE-encoded frames + mask, CLIP vision tokens) for the WanCore Sampler, and the empty latent "
                "to sample. The image is resized to width x height (bicubic, no crop, as the official code).",
    inputs=(
        Input("vae", "WANCORE_VAE"),
        Input("start_image", "IMAGE", tooltip="the first frame (the first image of a batch)"),
        Input("width", "INT", default=WAN21.width, min=EMPTY_LATENT.inputs[0].min, max=EMPTY_LATENT.inputs[0].max,
              step=16, tooltip="multiple of 16; keep the image's aspect ratio"),
        Input("height", "INT", default=WAN21.height, min=EMPTY_LATENT.inputs[1].min, max=EMPTY_LATENT.inputs[1].max,
              step=16, tooltip="multiple of 16"),
        Input("frames", "INT", default=WAN21.frames, min=EMPTY_LATENT.inputs[2].min, max=EMPTY_LATENT.inputs[2].max,
              step=4, tooltip="4n+1"),
        Input("batch_size", "INT", default=1, min=EMPTY_LATENT.inputs[3].min, max=EMPTY_LATENT.inputs[3].max),
        Input("end_image", "IMAGE", optional=True, tooltip="first-last-frame model (FLF2V): the last frame"),
        Input("clip_vision", "WANCORE_CLIP_VISION", optional=True,
              tooltip="WanCore Load CLIP Vision (Wan 2.1 I2V / FLF2V need it; Wan 2.2 I2V does not)"),
        Input("clip_vision_output", "CLIP_VISION_OUTPUT", optional=True,
              tooltip="instead of clip_vision: ComfyUI's CLIP Vision Encode of the start image (its crop "
                      "setting changes the picture the model sees)"),
        Input("clip_vision_end_output", "CLIP_VISION_OUTPUT", optional=True,
              tooltip="with clip_vision_output and an end image: CLIP Vision Encode of the end image"),
    ),
    outputs=(Output("WANCORE_IMAGE_COND", "image_cond"), Output("LATENT", "latent")),
    fn=image_to_video,
    validate=validate_image_to_video,
)

NODES = (CLIP_VISION_LOADER, IMAGE_TO_VIDEO)
