"""Clip extension nodes (wan_core.extension; docs/long_video.md section 3): continue a video, given as frames
(IMAGE) or as the previous clip's LATENT, with a new clip that the WanCore Sampler draws from the prepared head.

WanCore Extend Video prepares the head (and the empty latent of the new clip) for the sampler's ``extend`` input;
WanCore Join Frames puts the decoded clip after the frames it continues, colour-matched to the overlap;
WanCore Join Latents appends the clip to the latent it continues (decode the joined latent once: no VAE round
trip, and a further Extend Video can continue it).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from wan_core.extension import (COLOUR_MATCHES, CONDITIONINGS, DEFAULT_OVERLAP, Continuation, Extension, from_latent,
                                from_pixels, join_latents, join_pixels)
from wan_core.extension.request import MAX_OVERLAP
from wan_core.latent_format import latent_geometry
from wan_core.numerics import check_finite
from wan_core.vae.image import image_to_video, video_to_image
from wan_core.variants import WAN21
from wan_core.wfvae.latent_format import refuse_wfvae, refuse_wfvae_latent

from . import host
from .declare import Input, NodeSpec, Output
from .i2v import native_tokens
from .latent import EMPTY_LATENT

CATEGORY = "WanCore/long video"


@dataclass(frozen=True)
class PreparedExtension:
    """What flows from Extend Video to the sampler and the join nodes: the core's ``Continuation`` and what it
    continues (IMAGE ``[T, H, W, 3]`` for frames, raw latents ``[1, C, F, h, w]`` for a latent)."""

    continuation: Continuation
    previous: torch.Tensor


def validate_extend(frames: int | None = WAN21.frames, overlap: int | None = DEFAULT_OVERLAP,
                    conditioning: str | None = "auto", color_match: str | None = "mean-std") -> bool | str:
    problems = EXTEND.range_problems(frames=frames, overlap=overlap)
    if problems:
        return "; ".join(problems)
    try:
        if None not in (overlap, conditioning, color_match):
            ext = Extension(overlap, color_match, conditioning)  # type: ignore[arg-type]
            if frames is not None:
                ext.check_clip(frames)
    except ValueError as e:
        return str(e)
    return True


def _clip_tokens(clip_vision, clip_vision_output, first_frame: torch.Tensor | None):
    """CLIP tokens of the clip's first frame for Wan 2.1 I2V (our encoder) or ComfyUI's CLIP Vision Encode."""
    if clip_vision_output is not None:
        return native_tokens(clip_vision_output, "clip_vision_output")
    if clip_vision is None or first_frame is None:
        return None
    with host.on_device(clip_vision) as encoder:
        return encoder.encode(first_frame[None]).float().cpu()


def extend_video(model, vae, frames: int = WAN21.frames, overlap: int = DEFAULT_OVERLAP, conditioning: str = "auto",
                 color_match: str = "mean-std", images: torch.Tensor | None = None, latent: dict | None = None,
                 clip_vision=None, clip_vision_output=None):
    problem = validate_extend(frames, overlap, conditioning, color_match)
    if problem is not True:
        raise ValueError(problem)
    if (images is None) == (latent is None):
        raise ValueError("extend: connect either images (the frames to continue) or latent (the previous clip's "
                         "LATENT), not both and not neither")
    refuse_wfvae(vae, "vae")
    refuse_wfvae_latent(latent, "latent")
    ext = Extension(overlap, color_match, conditioning)  # type: ignore[arg-type]
    with contextlib.ExitStack() as stack, torch.inference_mode():
        if images is not None:
            video = image_to_video(images)
            check_finite(video, "images", "the frames are corrupt")
            tokens = _clip_tokens(clip_vision, clip_vision_output, images[max(images.shape[0] - overlap, 0)])
            v = stack.enter_context(host.on_device(vae))
            cont = from_pixels(v, model, video, frames, ext, clip_tokens=tokens, interrupt=host.check_interrupt)
            previous = images
        else:
            z = latent.get("samples") if isinstance(latent, dict) else None
            if not isinstance(z, torch.Tensor) or z.dim() != 5:
                raise ValueError("latent: expected a video LATENT {'samples': [1, C, F, h, w]} (the previous clip's)")
            check_finite(z, "latent", "the latent is corrupt")
            cont = from_latent(model, z.float().cpu(), frames, ext,
                               clip_tokens=_clip_tokens(None, clip_vision_output, None))
            previous = z
    channels, _, sf = latent_geometry(model)
    h, w = cont.head.shape[3], cont.head.shape[4]
    empty = torch.zeros(1, channels, (frames - 1) // 4 + 1, h, w, device=host.intermediate_device())
    return PreparedExtension(cont, previous), {"samples": empty, "downscale_ratio_spacial": sf}


def join_frames(extension: PreparedExtension, images: torch.Tensor):
    _check_prepared(extension)
    prev = extension.previous
    if extension.continuation.source != "pixels":
        raise ValueError("extension: it continues a latent; use WanCore Join Latents, then decode once")
    with torch.inference_mode():
        joined = join_pixels(image_to_video(prev), image_to_video(images), extension.continuation)
        new = video_to_image(joined[:, :, prev.shape[0]:])
    return (torch.cat([prev.to(new), new]).to(host.intermediate_device()),)  # the previous frames as given


def join_latent(extension: PreparedExtension, latent: dict):
    _check_prepared(extension)
    if extension.continuation.source != "latent":
        raise ValueError("extension: it continues frames; decode the clip and use WanCore Join Frames")
    refuse_wfvae_latent(latent, "latent")
    z = latent.get("samples") if isinstance(latent, dict) else None
    if not isinstance(z, torch.Tensor):
        raise ValueError("latent: expected the new clip's LATENT from the WanCore Sampler")
    joined = join_latents(extension.previous, z.cpu(), extension.continuation)
    return ({**latent, "samples": joined.to(host.intermediate_device())},)


def _check_prepared(extension) -> None:
    if not isinstance(extension, PreparedExtension):
        raise ValueError("extension: connect the output of WanCore Extend Video")


EXTEND = NodeSpec(
    node_id="WanCoreExtendVideo", display_name="WanCore Extend Video", category=CATEGORY,
    description="Continue a video with a new clip: connect the frames to continue (IMAGE) or the previous "
                "clip's LATENT (continues in latent space, no VAE round trip). Its outputs go to the WanCore "
                "Sampler's 'extend' and 'latent' inputs; then WanCore Join Frames (after decoding) or WanCore Join "
                "Latents (before decoding) attach the clip. Text-to-video models get the overlap as clean latents "
                "at timestep 0, image-to-video models through their image conditioning.",
    inputs=(
        Input("model", "WANCORE_MODEL"),
        Input("vae", "WANCORE_VAE"),
        Input("frames", "INT", default=WAN21.frames, min=EMPTY_LATENT.inputs[2].min, max=EMPTY_LATENT.inputs[2].max,
              step=4, tooltip="length of the new clip (4n+1), overlap included"),
        Input("overlap", "INT", default=DEFAULT_OVERLAP, min=1, max=MAX_OVERLAP, step=4,
              tooltip="frames the new clip starts from (4n+1): the last ones of the images; from a latent, its first "
                      "latent frame (the anchor) and its last (overlap-1)/4"),
        Input("conditioning", "COMBO", default="auto", options=CONDITIONINGS,
              tooltip="auto: image conditioning (I2V), else clean; clean: the overlap's latents held clean at "
                      "timestep 0 (T2V, TI2V-5B); replace: re-noised to every step (also what clean does under "
                      "context windows); svi: SVI 2.0 Pro's anchor + motion latents (Wan 2.2 I2V with its LoRAs; "
                      "from a latent)"),
        Input("color_match", "COMBO", default="mean-std", options=COLOUR_MATCHES,
              tooltip="match the new frames' colour to the overlap (WanCore Join Frames): joins do not drift"),
        Input("images", "IMAGE", optional=True, tooltip="the frames to continue (a decoded video)"),
        Input("latent", "LATENT", optional=True, tooltip="or: the previous clip's (or joined chain's) LATENT"),
        Input("clip_vision", "WANCORE_CLIP_VISION", optional=True,
              tooltip="Wan 2.1 I2V from images: encodes the clip's first frame"),
        Input("clip_vision_output", "CLIP_VISION_OUTPUT", optional=True,
              tooltip="Wan 2.1 I2V: ComfyUI's CLIP Vision Encode of the image to keep (e.g. the first clip's start)"),
    ),
    outputs=(Output("WANCORE_EXTENSION", "extension"), Output("LATENT", "latent")),
    fn=extend_video,
    validate=validate_extend,
    search_aliases=("extend video", "continue video", "chain clips", "svi", "long video"),
)

JOIN_FRAMES = NodeSpec(
    node_id="WanCoreJoinFrames", display_name="WanCore Join Frames", category=CATEGORY,
    description="The frames WanCore Extend Video continued, unchanged, then the decoded new clip's frames after "
                "the overlap, colour-matched to the overlap as the extension asks.",
    inputs=(Input("extension", "WANCORE_EXTENSION"), Input("images", "IMAGE", tooltip="the decoded new clip")),
    outputs=(Output("IMAGE", "images"),),
    fn=join_frames,
)

JOIN_LATENTS = NodeSpec(
    node_id="WanCoreJoinLatents", display_name="WanCore Join Latents", category=CATEGORY,
    description="The latent WanCore Extend Video continued, then the new clip's latent frames after its head: "
                "decode the result once for the whole chain, or extend it again.",
    inputs=(Input("extension", "WANCORE_EXTENSION"), Input("latent", "LATENT", tooltip="the new clip's latent")),
    outputs=(Output("LATENT", "latent"),),
    fn=join_latent,
)

NODES = (EXTEND, JOIN_FRAMES, JOIN_LATENTS)
