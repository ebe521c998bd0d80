"""Sampler node: flow-matching sampling of a Wan 2.1 latent with CFG, per-step progress and latent preview.

Takes and returns raw VAE latents (ComfyUI's LATENT convention); the DiT sees normalised ones inside.
"""
from __future__ import annotations

import contextlib
from typing import cast

import torch

from wan_core import latent_format
from wan_core.lora import activate_loras
from wan_core.pipeline import GenerationConfig, WanPipeline, check_embeddings, check_latent, check_models
from wan_core.dit.moe import experts
from wan_core.estimate import MAX_STEPS
from wan_core.latent_format import latent_geometry
from wan_core.sampling import SOLVER_NAMES, Convention, Solver, distill_sigmas
from wan_core.sampling.context_windows import ContextWindows
from wan_core.sampling.prompt_travel import one_window_note, travel_note
from wan_core.sampling.nag import NAG_ALPHA, NAG_SCALE, NAG_TAU, NAGAttention, NAGConfig
from wan_core.vace import VaceRequest
from wan_core.variants import WAN21
from wan_core.wfvae.latent_format import refuse_wfvae_latent

from . import host
from .declare import Input, NodeSpec, Output
from .vace import native_request

SCHEDULES: dict[str, Convention] = {"official": "official", "comfyui": "comfyui"}
# Step-distilled LoRAs (lightx2v): their own timesteps, 1000/steps apart before the shift (wan_core.sampling.distill)
DISTILL = "lightx2v_distill"
# The widget's steps: a UI choice, not an official value (Wan 2.1's official 50 is WAN21.steps, named in the
# tooltip): 30 keeps a first try quick at little cost in quality.
STEPS = 30


def _preview(x0: torch.Tensor):
    """A PIL image of the middle latent frame of sample 0 (Wan 2.1 latent->RGB factors)."""
    from PIL import Image

    rgb = latent_format.preview_rgb(x0[:1, :, x0.shape[2] // 2: x0.shape[2] // 2 + 1])[0, 0]
    return Image.fromarray((rgb * 255).round().to(torch.uint8).cpu().numpy())


def sample(model, embeds: dict, latent: dict, seed: int = 0, steps: int = STEPS, guidance: float = WAN21.guidance,
           shift: float = WAN21.shift, solver: str = "unipc", schedule: str = "official", denoise: float = 1.0,
           cache=None, image_cond=None, context=None, extend=None, riflex: str = "off", vace_conditioning=None):
    check_models(model)
    refuse_wfvae_latent(latent, "latent")  # WF-VAE-L latents have 16 channels as Wan 2.1's: the mark tells
    vace = vace_of(embeds, vace_conditioning)
    first_frame = first_frame_of(latent)  # TI2V-5B image-to-video (WanCoreImageToVideoLatent22 / native)
    # Values matter only when sampling starts from the latent (denoise < 1); otherwise only its shape is used.
    z = check_latent(latent.get("samples") if isinstance(latent, dict) else None, "latent", dit=model,
                     values=denoise < 1.0 or first_frame is not None)
    b, _, t, h, w = z.shape
    t -= vace.ref_frames if vace is not None else 0  # the video's latent frames (the references are trimmed)
    if t < 1:
        raise ValueError(f"latent: {z.shape[2]} latent frames but the VACE inputs put {vace.ref_frames if vace else 0} "
                         f"reference frames in front: use the latent output of the last WanCore VACE node")
    sf = latent_geometry(model)[2]  # 8, or 16 for the Wan 2.2 VAE's 48-channel latents
    if schedule == DISTILL and denoise != 1.0:
        raise ValueError("schedule lightx2v_distill starts from pure noise: set denoise to 1")
    sigmas = tuple(distill_sigmas(steps, shift)) if schedule == DISTILL else None
    cfg = GenerationConfig(width=w * sf, height=h * sf, frames=(t - 1) * 4 + 1, steps=steps, guidance=guidance,
                           shift=shift, solver=cast(Solver, solver), seed=seed, sigmas=sigmas, denoise=denoise,
                           convention="custom" if sigmas else SCHEDULES[schedule], context=context,
                           riflex=_riflex_setting(riflex))
    cfg.validate()  # the solver name came from a client: refused here unless it is one of SOLVER_NAMES
    cond, travel, travel_lines = prompt_travel(embeds, context, b, t)
    cond = cond * b if len(cond) == 1 else cond
    uncond = embeds["uncond"] * b if len(embeds["uncond"]) == 1 else embeds["uncond"]
    if len(cond) != b:
        raise ValueError(f"embeds hold {len(cond)} prompts but the latent batch is {b}")
    check_embeddings(cond, "embeds (prompt)", model)
    check_embeddings(uncond, "embeds (negative prompt)", model)
    nag = embeds.get("nag")  # a NAGConfig from WanCore NAG: the negative prompt inside the cross-attention
    if nag is not None and nag.active and guidance != 1.0:
        raise ValueError(f"NAG applies the negative prompt at guidance 1, but guidance is {guidance:g}: set guidance "
                         f"to 1 or remove the WanCore NAG node")
    start = z if denoise < 1.0 else None
    if start is not None and not start.abs().sum() > 0:
        raise ValueError("denoise < 1 needs a latent to start from (e.g. from WanCore VAE Encode), not an empty one")
    if first_frame is not None:
        start = None
    head = _extension_inputs(extend, image_cond, first_frame, cfg)
    guidances = [model.guidance_for(name, guidance) if name else guidance for name, _ in experts(model)]
    callback, bar = host.progress_callback(steps, "sampling", preview=_preview)
    with host.on_device(model) as dit, torch.inference_mode(), bar:
        for _, expert in experts(dit):
            activate_loras(expert)  # the LoRA stack the model output carries (WanCoreLoRA), onto the shared weights
        pipe = WanPipeline(dit=dit)
        device = dit.device
        guide = NAGAttention(dit, [u.to(device) for u in uncond], nag) if nag else contextlib.nullcontext()
        with guide:
            out = pipe.sample_latents([c.to(device) for c in cond],
                                      [u.to(device) for u in uncond] if any(g != 1.0 for g in guidances) else None,
                                      cfg, latent=start, callback=callback, interrupt=_interrupt, cache=cache,
                                      travel=[e.to(device) for e in travel] if travel else None, vace=vace,
                                      **({"image": image_cond, "first_frame": first_frame} | head))
    # one progress text (a second would replace it): the context and travel notes, then "cache <method>: ..."
    host.show_text("\n".join([*context_note(context, t), *travel_lines, pipe.cache_report.text()]))
    return ({"samples": out.to(host.intermediate_device()), "downscale_ratio_spacial": sf},)


def vace_of(embeds: dict, conditioning) -> VaceRequest | None:
    """The run's VACE inputs: WanCore VACE's (in the embeds) or native ``WanVaceToVideo`` conditioning's."""
    ours = embeds.get("vace") if isinstance(embeds, dict) else None
    native = native_request(conditioning)
    if ours is not None and native is not None:
        raise ValueError("vace_conditioning: the embeds already carry VACE inputs (WanCore VACE); use one or the "
                         "other")
    return ours if ours is not None else native


RIFLEX_CHOICES = ("off", "auto", *(str(k) for k in range(1, 23)))  # K within head_dim 128's temporal RoPE


def _riflex_setting(value: str) -> str | int:
    """The widget's text as ``GenerationConfig.riflex`` ("off", "auto" or K)."""
    return int(value) if isinstance(value, str) and value.isdigit() else value


def _extension_inputs(extend, image_cond, first_frame, cfg: GenerationConfig) -> dict:
    """What a connected WanCore Extend Video gives ``sample_latents`` (its head, in the model's form)."""
    if extend is None:
        return {}
    continuation = getattr(extend, "continuation", None)
    if continuation is None:
        raise ValueError("extend: connect the 'extension' output of WanCore Extend Video")
    if image_cond is not None or first_frame is not None:
        raise ValueError("extend: the extension brings the clip's conditioning; disconnect image_cond (and use "
                         "Extend Video's latent output, not a first-frame latent)")
    frames = cfg.latent_shape[2]
    return continuation.sample_inputs(cfg.context is not None and not cfg.context.covers(frames))


def context_note(context: ContextWindows | None, latent_frames: int) -> list[str]:
    """The line saying a connected context window holds the whole video (then the plain sampler runs)."""
    if context is None or not context.covers(latent_frames):
        return []
    return [f"context window {context.length} latent frames >= the video's {latent_frames}: one window, the plain "
            f"sampler"]


def prompt_travel(embeds: dict, context: ContextWindows | None, batch: int, latent_frames: int) -> tuple[
        list[torch.Tensor], list[torch.Tensor] | None, list[str]]:
    """The prompt embeddings, the prompt travel segments' (WanCore Text Encode of a ' | ' prompt, under context
    windows; else None) and the note lines. Without windows the prompt runs as written; one window holding the
    video takes the first segment."""
    segments, texts = embeds.get("segments"), embeds.get("segment_texts") or []
    if not segments:
        return list(embeds["cond"]), None, []
    if context is None:
        return list(embeds["cond"]), None, [f"prompt travel: the positive prompt's {len(segments)} ' | ' segments "
                                            f"need a context input (WanCore Context Windows); it ran as one prompt"]
    if batch != 1:
        raise ValueError(f"embeds: prompt travel (' | ' segments) guides one video, but the latent batch is {batch}")
    if context.covers(latent_frames):
        return [segments[0]], None, [one_window_note(texts)]
    note = travel_note(context.windows(latent_frames, 0), texts, latent_frames, bool(context.anchor),
                       moving=context.schedule != "static")
    return [segments[0]], list(segments), [note]


def first_frame_of(latent) -> torch.Tensor | None:
    """The start image's raw latent ``[B, 48, 1, h, w]`` of a TI2V-5B first-frame LATENT: 48 channels and a
    ``noise_mask`` that is 0 on latent frame 0 and 1 elsewhere (docs/wan22.md section 6); None otherwise."""
    if not isinstance(latent, dict) or latent.get("noise_mask") is None:
        return None
    z, mask = latent.get("samples"), latent["noise_mask"]
    if not isinstance(z, torch.Tensor) or z.dim() != 5 or z.shape[1] != latent_format.WAN22_CHANNELS:
        raise ValueError("latent: a noise_mask is only understood on a Wan 2.2 TI2V-5B latent (48 channels, first "
                         "frame fixed: WanCore Image to Video Latent (Wan 2.2 TI2V-5B))")
    if mask.dim() < 3 or mask.shape[-3] != z.shape[2] or not (mask[..., :1, :, :] == 0).all() or \
            not (mask[..., 1:, :, :] == 1).all():
        raise ValueError("latent: noise_mask must be 0 on latent frame 0 and 1 elsewhere (a first-frame latent); "
                         "other masks are not supported")
    return z[:, :, :1]


def _interrupt() -> bool:
    host.check_interrupt()  # raises to stop (ComfyUI's exception inside ComfyUI, host.Interrupted outside)
    return False


SAMPLER = NodeSpec(
    node_id="WanCoreSampler", display_name="WanCore Sampler", category="WanCore/sampling",
    description="Samples a Wan 2.1 video latent: flow matching with classifier-free guidance (UniPC by "
                "default, as Wan's official sampler). Latent in and out are raw VAE latents, so ComfyUI's native "
                "VAE Decode and empty-latent nodes interoperate.",
    inputs=(
        Input("model", "WANCORE_MODEL"),
        Input("embeds", "WANCORE_EMBEDS"),
        Input("latent", "LATENT", tooltip="an empty latent (text-to-video) or an encoded video (denoise < 1)"),
        Input("seed", "INT", default=0, min=0, max=2**64 - 1, control_after_generate=True),
        Input("steps", "INT", default=STEPS, min=1, max=MAX_STEPS,
              tooltip=f"official: {WAN21.steps}; {STEPS} is a common choice"),
        Input("guidance", "FLOAT", default=WAN21.guidance, min=0.0, max=30.0, step=0.1,
              tooltip="classifier-free guidance scale; 1 = single pass (no negative prompt)"),
        Input("shift", "FLOAT", default=WAN21.shift, min=0.01, max=100.0, step=0.1,
              tooltip=f"time shift: official {WAN21.shift}; 1.3B users often 8-12"),
        Input("solver", "COMBO", default="unipc", options=tuple(SOLVER_NAMES)),
        Input("schedule", "COMBO", default="official", options=(*SCHEDULES, DISTILL),
              tooltip="official: Wan's grid with integer timesteps; comfyui: ComfyUI's simple schedule; "
                      "lightx2v_distill: the step-distilled LoRAs' timesteps (4 steps: 1000/750/500/250 before "
                      "the shift; use guidance 1, shift 5, euler)"),
        Input("denoise", "FLOAT", default=1.0, min=0.01, max=1.0, step=0.01),
        Input("cache", "WANCORE_CACHE", optional=True,
              tooltip="a WanCore Cache node (wan / teacache / magcache / easycache); unconnected = exact"),
        Input("image_cond", "WANCORE_IMAGE_COND", optional=True,
              tooltip="image-to-video: WanCore Image to Video (its latent output goes to latent)"),
        Input("context", "WANCORE_CONTEXT", optional=True,
              tooltip="long videos: a WanCore Context Windows node (overlapping windows, each cached on its own); "
                      "unconnected = the whole video at once"),
        Input("extend", "WANCORE_EXTENSION", optional=True,
              tooltip="continue a video: WanCore Extend Video (its latent output goes to latent)"),
        Input("riflex", "COMBO", default="off", options=RIFLEX_CHOICES, optional=True,
              tooltip="RIFLEx for videos longer than the model's training clips: auto lowers the temporal RoPE "
                      "component the model repeats on (K 6 for Wan) so one period covers the video; off = as "
                      "trained"),
        Input("vace_conditioning", "CONDITIONING", optional=True,
              tooltip="a VACE model with native conditioning: the positive output of WanVaceToVideo (its latent "
                      "goes to latent; trim the reference frames afterwards with TrimVideoLatent, as natively)"),
    ),
    outputs=(Output("LATENT", "latent"),),
    fn=sample,
)

def nag_embeds(embeds: dict, scale: float = NAG_SCALE, tau: float = NAG_TAU, alpha: float = NAG_ALPHA):
    return ({**embeds, "nag": NAGConfig(scale, tau, alpha)},)


NAG = NodeSpec(
    node_id="WanCoreNAG", display_name="WanCore NAG", category="WanCore/sampling",
    description="Normalized Attention Guidance: makes the embeds' negative prompt work at guidance 1 (distilled "
                "4-step LoRAs), inside the DiT's cross-attention instead of a second CFG pass. Connect its output "
                "to the sampler's embeds and set guidance to 1; scale 1 = off.",
    inputs=(
        Input("embeds", "WANCORE_EMBEDS"),
        Input("scale", "FLOAT", default=NAG_SCALE, min=1.0, max=50.0, step=0.1,
              tooltip="extrapolation away from the negative prompt (1 = off; Wan 4-step: 11, 25 steps: 9)"),
        Input("tau", "FLOAT", default=NAG_TAU, min=0.1, max=20.0, step=0.1,
              tooltip="largest allowed growth of the attention output (L1 norm ratio)"),
        Input("alpha", "FLOAT", default=NAG_ALPHA, min=0.0, max=1.0, step=0.01,
              tooltip="blend of the guided and the plain attention output"),
    ),
    outputs=(Output("WANCORE_EMBEDS", "embeds"),),
    fn=nag_embeds,
    search_aliases=("nag", "normalized attention guidance", "negative prompt"),
)

NODES = (SAMPLER, NAG)
