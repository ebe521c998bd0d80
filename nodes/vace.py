"""VACE node (docs/vace.md section 3): control video, masks and reference images -> the VACE inputs the WanCore
Sampler gives a Wan 2.1 VACE / Wan 2.2 VACE-Fun model, carried by the embeds, and the latent to sample (reference
frames in front; the sampler trims them). Chained nodes add inputs with their own strengths."""
from __future__ import annotations

import torch

from wan_core.numerics import check_finite
from wan_core.vace import VaceRequest, vace_context
from wan_core.vace.fit import fit_video
from wan_core.vace.native import from_native_conditioning
from wan_core.variants import WAN21

from . import host
from .declare import Input, NodeSpec, Output
from .latent import EMPTY_LATENT, size_problems

STRENGTH_MAX = 10.0


def _video(images: torch.Tensor | None, name: str) -> torch.Tensor | None:
    """IMAGE ``[T, H, W, C]`` in [0, 1] -> ``[1, 3, T, H, W]`` in [-1, 1]."""
    if images is None:
        return None
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or images.shape[-1] < 3:
        raise ValueError(f"{name}: expected an IMAGE batch [T, H, W, 3], got "
                         f"{list(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__}")
    check_finite(images, name, "the image is corrupt")
    return images[..., :3].float().permute(3, 0, 1, 2)[None] * 2 - 1


def _masks(masks: torch.Tensor | None) -> torch.Tensor | None:
    """MASK ``[T, H, W]`` (or ``[H, W]``) in [0, 1] -> ``[1, 1, T, H, W]``."""
    if masks is None:
        return None
    if not isinstance(masks, torch.Tensor) or masks.dim() not in (2, 3):
        raise ValueError(f"control_masks: expected a MASK [T, H, W], got "
                         f"{list(masks.shape) if isinstance(masks, torch.Tensor) else type(masks).__name__}")
    masks = masks[None] if masks.dim() == 2 else masks
    return masks.float()[None, None]


def vace(embeds: dict, vae, width: int = WAN21.width, height: int = WAN21.height, length: int = WAN21.frames,
         batch_size: int = 1, strength: float = 1.0, control_video: torch.Tensor | None = None,
         control_masks: torch.Tensor | None = None, reference_image: torch.Tensor | None = None):
    problem = validate_vace(width, height, length, batch_size)
    if problem is not True:
        raise ValueError(problem)
    if not 0 <= strength < float("inf"):
        raise ValueError(f"strength: expected a finite number >= 0, got {strength}")
    frames, masks, notes = fit_video(_video(control_video, "control_video"), _masks(control_masks), length, height,
                                     width)
    refs = _video(reference_image, "reference_image")
    ref_list = [[refs[0, :, i] for i in range(refs.shape[2])]] if refs is not None else None
    previous = embeds.get("vace")
    with host.on_device(vae) as v, torch.inference_mode():
        given = frames is not None or masks is not None  # then they set the size and batch
        ctx = vace_context(v, frames, masks, ref_list, size=None if given else (length, height, width),
                           batch=None if given else 1, interrupt=host.check_interrupt)
    request = previous.add(ctx, strength) if isinstance(previous, VaceRequest) else VaceRequest.of((ctx, strength))
    f, h, w = request.latent_shape
    latent = torch.zeros(batch_size, 16, f, h, w, device=host.intermediate_device())
    if notes:
        host.show_text("\n".join(notes))
    return {**embeds, "vace": request}, {"samples": latent, "downscale_ratio_spacial": 8}, request.ref_frames


def native_request(conditioning) -> VaceRequest | None:
    """The VACE entries of native CONDITIONING (``WanVaceToVideo``'s positive output) as a request, None without.
    Native graphs trim the reference frames with ``TrimVideoLatent`` (the count is not in the conditioning), so
    the request has no reference frames of its own."""
    if conditioning is None:
        return None
    if not isinstance(conditioning, list) or not conditioning or not isinstance(conditioning[0], (list, tuple)) \
            or len(conditioning[0]) < 2 or not isinstance(conditioning[0][1], dict):
        raise ValueError("vace_conditioning: expected native CONDITIONING (the positive output of WanVaceToVideo)")
    pairs = from_native_conditioning(conditioning[0][1])
    if not pairs:
        raise ValueError("vace_conditioning: this CONDITIONING has no VACE entries; connect the positive output of "
                         "WanVaceToVideo")
    return VaceRequest(tuple(pairs), 0)


def validate_vace(width: int | None = WAN21.width, height: int | None = WAN21.height,
                  length: int | None = WAN21.frames, batch_size: int | None = 1) -> bool | str:
    # the messages name the input as this node calls it (``length``, as WanVaceToVideo), so ComfyUI and the
    # canvas mark that input
    problems = [p.replace("frames=", "length=", 1) if p.startswith("frames=") else p
                for p in size_problems(width, height, length, batch_size)]
    return "; ".join(problems) if problems else True


VACE = NodeSpec(
    node_id="WanCoreVace", display_name="WanCore VACE", category="WanCore/conditioning",
    description="VACE (Wan 2.1 VACE 1.3B / 14B, Wan 2.2 VACE-Fun): a control video (depth, pose, edges, a video "
                "with grey holes), its masks (1 = generate) and reference images -> embeds carrying the VACE "
                "inputs, and the latent to sample (reference frames in front: the WanCore Sampler trims them). "
                "Chain two nodes to give a reference and a control video their own strengths (their effects add). "
                "A control video or masks of another size or length are fitted as WanVaceToVideo does (centre "
                "crop, bilinear, cut or padded grey), and said.",
    inputs=(
        Input("embeds", "WANCORE_EMBEDS"),
        Input("vae", "WANCORE_VAE"),
        Input("width", "INT", default=WAN21.width, min=EMPTY_LATENT.inputs[0].min, max=EMPTY_LATENT.inputs[0].max,
              step=16, tooltip="multiple of 16 (every chained VACE node: the same)"),
        Input("height", "INT", default=WAN21.height, min=EMPTY_LATENT.inputs[1].min, max=EMPTY_LATENT.inputs[1].max,
              step=16, tooltip="multiple of 16"),
        Input("length", "INT", default=WAN21.frames, min=EMPTY_LATENT.inputs[2].min, max=EMPTY_LATENT.inputs[2].max,
              step=4, tooltip="frames, 4n+1"),
        Input("batch_size", "INT", default=1, min=EMPTY_LATENT.inputs[3].min, max=EMPTY_LATENT.inputs[3].max),
        Input("strength", "FLOAT", default=1.0, min=0.0, max=STRENGTH_MAX, step=0.01,
              tooltip="scale of this input's VACE hints (official: 1; 0 = the plain text-to-video model)"),
        Input("control_video", "IMAGE", optional=True,
              tooltip="frames to follow or keep; with masks, the kept frames / areas (mask 0) and the rest (mask 1)"),
        Input("control_masks", "MASK", optional=True,
              tooltip="1 = generate, 0 = keep the control video's pixels; unconnected = all 1"),
        Input("reference_image", "IMAGE", optional=True,
              tooltip="each image of the batch is one reference (a subject or object to show), placed in front"),
    ),
    outputs=(Output("WANCORE_EMBEDS", "embeds"), Output("LATENT", "latent"), Output("INT", "trim_latent")),
    fn=vace,
    validate=validate_vace,
    search_aliases=("vace", "reference to video", "control video", "inpaint", "outpaint"),
)

NODES = (VACE,)
