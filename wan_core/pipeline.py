"""Text-to-video: prompt(s) -> umT5 embeddings (cached) -> noise -> flow sampling with CFG -> VAE decode.

Used by the ComfyUI nodes and the command line (docs/wan_spec.md section 6; docs/design.md sections 3-4). Latents
outside the sampler are raw VAE latents (ComfyUI's LATENT convention); the DiT sees normalised ones.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
import contextlib
import dataclasses
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from . import latent_format
from .estimate import nearest_valid
from .numerics import check_finite
from .progress import InterruptFn, ProgressFn, StepCallback
from .cache import start_session
from .i2v import ImageCondition, check_image_model, check_image_request, image_condition
from .cache.moe import MoECacheReport
from .cache.report import WindowCacheReport
from .cache.moe import attached as moe_attached
from .dit.moe import experts, is_moe
from .latent_format import check_video_size, latent_geometry, pixel_multiple
from .sampling.first_frame import FirstFrameGuidance, check_first_frame
from .sampling.known_frames import KnownFramesGuidance
from .dit.riflex import parse_setting as parse_riflex, resolve_riflex, use_riflex
from .sampling.context_windows import ContextWindows, WindowedGuidance
from .sampling import prompt_travel
from .sampling.moe import MoEGuidance
from .vace.request import VaceRequest, build_request, has_vace
from .sampling import (DEFAULT_NEGATIVE_PROMPT, SOLVER_NAMES, ClassifierFreeGuidance, Convention, ScheduleConfig,
                       SamplingInterrupted, Solver, build_schedule, initial_latent, make_noise, sample)



@dataclass(frozen=True)
class GenerationConfig:
    """What to generate. Defaults are the official Wan 2.1 T2V ones (docs/wan_spec.md section 6.2)."""

    prompt: str | tuple[str, ...] = ""
    negative_prompt: str | None = None  # None = the official default negative prompt
    width: int = 832
    height: int = 480
    frames: int = 81
    steps: int = 50
    guidance: float = 5.0
    shift: float = 5.0
    solver: Solver = "unipc"
    seed: int = 0
    convention: Convention = "official"  # "official" (integer timesteps) | "comfyui" (float) | "dpm" | "custom"
    sigmas: tuple[float, ...] | None = None
    denoise: float = 1.0
    integer_timesteps: bool | None = None  # None = the convention's own (official: int, comfyui/custom: float)
    batched_cfg: bool = False  # one forward of batch 2 instead of two of batch 1 (faster, more memory)
    context: ContextWindows | None = None  # context windows over the latent frames (docs/long_video.md)
    riflex: str | int = "off"  # RIFLEx: "off", "auto" or the temporal RoPE component k (docs/long_video.md)

    def replace(self, **changes) -> "GenerationConfig":
        return replace(self, **changes)

    @property
    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)

    @property
    def travel(self) -> tuple[str, ...] | None:
        """Prompt travel: the `` | `` segments of the prompt when context windows are set and it has more than one
        (``wan_core.sampling.prompt_travel``); None otherwise (without windows the prompt is one prompt as written)."""
        if self.context is None or not prompt_travel.is_travel(self.prompt):
            return None
        return prompt_travel.split_segments(str(self.prompt))

    @property
    def latent_shape(self) -> tuple[int, int, int, int, int]:
        """``[B, 16, 1 + (frames-1)/4, height/8, width/8]``."""
        return (len(self.prompts), latent_format.CHANNELS, (self.frames - 1) // latent_format.TEMPORAL_FACTOR + 1,
                self.height // latent_format.SPATIAL_FACTOR, self.width // latent_format.SPATIAL_FACTOR)

    def schedule_config(self) -> ScheduleConfig:
        if self.sigmas is not None:
            return ScheduleConfig.from_sigmas(self.sigmas, integer_timesteps=bool(self.integer_timesteps))
        return ScheduleConfig(steps=self.steps, shift=self.shift, convention=self.convention,
                              denoise=self.denoise, integer_timesteps=self.integer_timesteps)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the bad setting and the nearest valid values."""
        check_video_size(self.width, self.height, self.frames)
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"steps={self.steps!r}: must be an integer >= 1 (official default 50)")
        if not 0 <= self.guidance < float("inf"):  # also refuses NaN
            raise ValueError(f"guidance={self.guidance!r}: must be a finite number >= 0 (1 disables guidance; "
                             f"official 5.0)")
        parse_riflex(self.riflex)
        if self.solver not in SOLVER_NAMES:
            raise ValueError(f"solver={self.solver!r}: valid solvers are {', '.join(SOLVER_NAMES)}")
        if not self.prompts:
            raise ValueError("no prompt given")
        if self.context is not None:
            prompt_travel.check_batch(self.prompts)
            _ = self.travel  # an empty segment is refused here
        self.schedule_config().validate()


def source_name(model, what: str) -> str:
    """How errors name a loaded model: "<what> '<file name>'" (the file it was loaded from, without the
    server's folders), or just ``what`` for a model built in memory."""
    source = getattr(model, "source", None)
    if not source or str(source).startswith("<"):
        return what
    return f"{what} '{Path(str(source)).name}'"


def dit_channels(dit) -> tuple[int, int] | None:
    """(input, output) latent channels of a DiT (its ``config.in_dim`` / ``out_dim``), None if unknown. The image
    conditioning channels of an image-to-video model (4 mask + the latent's, docs/i2v.md section 2) are not
    counted: Wan 2.1 I2V (36 in, 16 out) -> (16, 16)."""
    cfg = getattr(dit, "config", None)
    if cfg is None or not hasattr(cfg, "in_dim"):
        return None
    cin, cout = int(cfg.in_dim), int(getattr(cfg, "out_dim", cfg.in_dim))
    return (cout if cin == 2 * cout + 4 else cin), cout


def check_models(dit=None, vae=None, text_encoder=None) -> None:
    """Refuse models that cannot work together, before any work: the DiT's latent channels against the VAE's
    (and the 16 of Wan 2.1's latent format), the text encoder's width against the DiT's text input.
    Raises ``ValueError`` naming both files and their numbers."""
    chans = dit_channels(dit) if dit is not None else None
    dit_name = source_name(dit, "the diffusion model")
    if chans is not None:
        cin, cout = chans
        if cin != cout:
            raise ValueError(f"{dit_name} takes {cin}-channel latents and predicts {cout}-channel ones; only "
                             f"text-to-video models ({latent_format.CHANNELS} in, {latent_format.CHANNELS} out) "
                             f"are supported")
        if cin not in (latent_format.CHANNELS, latent_format.WAN22_CHANNELS):
            raise ValueError(f"{dit_name} works on {cin}-channel latents; Wan latents have "
                             f"{latent_format.CHANNELS} (Wan 2.1 VAE) or {latent_format.WAN22_CHANNELS} (Wan 2.2 VAE, "
                             f"TI2V-5B) channels")
    vae_cfg = getattr(vae, "config", None) if vae is not None else None
    if chans is not None and vae_cfg is not None and vae_cfg.z_dim != chans[0]:
        raise ValueError(f"{dit_name} works on {chans[0]}-channel latents but {source_name(vae, 'the VAE')} has "
                         f"{vae_cfg.z_dim} latent channels; use the VAE that belongs to the model (Wan 2.1 and "
                         f"Wan 2.2 A14B: wan_2.1_vae, {latent_format.CHANNELS} channels; Wan 2.2 TI2V-5B: "
                         f"wan2.2_vae, {latent_format.WAN22_CHANNELS} channels)")
    text_dim = getattr(getattr(dit, "config", None), "text_dim", None)
    te_dim = getattr(text_encoder, "text_dim", None) if text_encoder is not None else None
    if text_dim is not None and te_dim is not None and te_dim != text_dim:
        raise ValueError(f"{source_name(text_encoder, 'the text encoder')} produces {te_dim}-wide embeddings but "
                         f"{dit_name} expects {text_dim}; use the umT5-XXL encoder of Wan 2.1 (4096)")


def check_size_for_models(width: int, height: int, dit=None, vae=None) -> None:
    """Width and height must be multiples of the VAE's spatial factor times the DiT's 2x2 patch: 16 for Wan 2.1
    and A14B, 32 for TI2V-5B / the Wan 2.2 VAE (docs/wan22.md section 5). One-line ``ValueError`` otherwise."""
    multiple = pixel_multiple(dit, vae)
    bad = [(name, v) for name, v in (("width", width), ("height", height)) if v % multiple]
    if bad:
        what = source_name(dit, "the diffusion model") if dit is not None else source_name(vae, "the VAE")
        near = "; ".join(f"{name}={v}: nearest valid {' or '.join(str(n) for n in nearest_valid(v, multiple))}"
                         for name, v in bad)
        raise ValueError(f"{what} needs width and height in multiples of {multiple} (Wan 2.2 TI2V-5B: VAE 16x, "
                         f"patch 2x2); {near}")


def _latent_hint(channels: int) -> str:
    """Which empty-latent node makes latents for a DiT of ``channels`` latent channels (docs/wan22.md section 6)."""
    if channels == latent_format.WAN22_CHANNELS:
        return " (Wan 2.2 TI2V-5B: WanCore Empty Video Latent (Wan 2.2 TI2V-5B) or Wan22ImageToVideoLatent)"
    if channels == latent_format.CHANNELS:
        return " (Wan 2.1 / A14B: WanCore Empty Video Latent or EmptyHunyuanLatentVideo)"
    return ""


def check_latent(z, name: str, dit=None, vae=None, values: bool = True) -> torch.Tensor:
    """Validate a LATENT tensor before any work: a 5-D ``[B, C, T, H, W]`` tensor whose channels match the DiT
    (``dit``) and/or the VAE (``vae``), and (``values``) finite. ``name`` is how the error names the input.
    Returns ``z``."""
    if not isinstance(z, torch.Tensor):
        raise TypeError(f"{name}: expected a latent tensor [B, 16, T, H, W], got {type(z).__name__}")
    if z.dim() != 5:
        raise ValueError(f"{name}: expected a Wan video latent [B, 16, T, H, W] (5-D), got shape "
                         f"{list(z.shape)}")
    if min(z.shape) < 1:
        raise ValueError(f"{name}: the latent is empty (shape {list(z.shape)})")
    if not z.is_floating_point():
        raise ValueError(f"{name}: expected a floating-point latent, got dtype {z.dtype}")
    c = z.shape[1]
    chans = dit_channels(dit) if dit is not None else None
    if chans is not None and c != chans[0]:
        raise ValueError(f"{name}: {c} latent channels (shape {list(z.shape)}), but "
                         f"{source_name(dit, 'the diffusion model')} works on {chans[0]}-channel latents; the "
                         f"latent was made for another model or by another VAE{_latent_hint(chans[0])}")
    vae_cfg = getattr(vae, "config", None) if vae is not None else None
    if vae_cfg is not None and c != vae_cfg.z_dim:
        raise ValueError(f"{name}: {c} latent channels (shape {list(z.shape)}), but "
                         f"{source_name(vae, 'the VAE')} decodes {vae_cfg.z_dim}-channel latents; decode it "
                         f"with the VAE of the model that made it")
    if values:
        check_finite(z, name, "the latent is corrupt (e.g. a VAE or sampler upstream ran in float16 and "
                              "overflowed); make it again")
    return z


def check_embeddings(embeds: Sequence[torch.Tensor], name: str, dit=None) -> None:
    """Text embeddings ``[L, D]`` (or ``[B, L, D]``): width matching the DiT's text input, finite values."""
    text_dim = getattr(getattr(dit, "config", None), "text_dim", None)
    for i, e in enumerate(embeds):
        what = f"{name} {i + 1} of {len(embeds)}" if len(embeds) > 1 else name
        if text_dim is not None and e.shape[-1] != text_dim:
            raise ValueError(f"{what}: {e.shape[-1]}-wide text embeddings, but "
                             f"{source_name(dit, 'the diffusion model')} expects {text_dim}; encode the prompt "
                             f"with the text encoder of Wan 2.1 (umT5-XXL, 4096)")
        check_finite(e, what, "the text encoder produced NaN/Inf (umT5 overflows in float16: load it in "
                              "bfloat16 or float32)")


def _riflex_for(dit, cfg: GenerationConfig, length: int):
    """The run's RIFLEx (``cfg.riflex`` for ``length`` latent frames: the video's, or one window's) attached to
    the DiT for the run; a no-op context when off or for a model without a Wan config."""
    config = getattr(dit, "config", None)
    if cfg.riflex == "off" or config is None:
        return contextlib.nullcontext()
    return use_riflex(dit, resolve_riflex(cfg.riflex, config, length))


@contextlib.contextmanager
def _active(pairs):
    """Each ``(session, expert)``: the expert consults the session inside the block (state kept afterwards)."""
    with contextlib.ExitStack() as stack:
        for session, expert in pairs:
            stack.enter_context(session.active_on(expert))
        yield


def _guidance_of(dit, expert: str, guidance: float) -> float:
    """The guidance scale of ``dit``'s expert ``expert`` ("" = a plain DiT: ``guidance`` itself)."""
    return dit.guidance_for(expert, guidance) if expert else guidance


def _start_latents(cfg: GenerationConfig, schedule: Any, shape: tuple[int, ...], device: torch.device,
                   latent: torch.Tensor | None, first_frame: torch.Tensor | None, dit=None,
                   vae=None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The normalised latent the sampler starts from (seeded noise, mixed with ``latent`` when
    ``cfg.denoise < 1``) and the TI2V first frame's normalised latent (or None); ``shape`` ``[B, C, F, h, w]``."""
    if latent is not None:
        check_latent(latent, "start latent", dit=dit, vae=vae)
        if tuple(latent.shape) != shape:
            raise ValueError(f"start latent has shape {list(latent.shape)}, expected {list(shape)}")
    noise = make_noise(cfg.seed, shape, device=device)
    if cfg.context is not None:
        noise = cfg.context.reschedule_noise(noise, cfg.seed)  # FreeNoise (a no-op unless asked for)
    start = None
    if latent is not None:
        start = latent_format.to_model(latent.to(device, torch.float32))
    elif cfg.denoise < 1.0:
        raise ValueError(f"denoise={cfg.denoise} needs a start latent (encode a video first); "
                         f"use denoise=1 for text-to-video")
    x = initial_latent(noise, schedule, start)
    z0 = None
    if first_frame is not None:
        check_first_frame(first_frame, shape, "first_frame", max_frames=shape[2] - 1)
        if first_frame.shape[2] > 1 and cfg.context is not None and not cfg.context.covers(shape[2]):
            raise ValueError("a first-frame latent of several frames (a clip extension's clean head) does not "
                             "combine with context windows; continue with known frames instead (wan_core.extension)")
        z0 = latent_format.to_model(first_frame.to(device, torch.float32))
    return x, z0


def _known_head(known: torch.Tensor | None, cfg: GenerationConfig, shape: tuple[int, ...], x: torch.Tensor, dit=None,
                vae=None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The given head latents (normalised) and their fixed noise (the head of the starting noise) of a clip
    extension on a text-to-video model, or None; one line when they do not fit the clip."""
    if known is None:
        return None
    check_latent(known, "known frames", dit=dit, vae=vae)
    b, c, f, h, w = shape
    if known.shape[1] != c or not 1 <= known.shape[2] < f or tuple(known.shape[3:]) != (h, w) or \
            known.shape[0] not in (1, b):
        raise ValueError(f"known frames have shape {list(known.shape)}, expected [1, {c}, K, {h}, {w}] with K from 1 "
                         f"to {f - 1} (fewer than the clip's {f} latent frames)")
    if cfg.denoise != 1.0:
        raise ValueError(f"known frames (a clip extension) start from pure noise: set denoise to 1, not {cfg.denoise}")
    k = known.shape[2]
    return latent_format.to_model(known.to(x.device, torch.float32)), x[:, :, :k].clone()


def _check_vace(dit, vace: VaceRequest | None, shape: tuple[int, ...], head_given: bool) -> None:
    """A VACE model gets a VACE request and only a VACE model does; the request fits the latent ``shape``
    (reference frames included); a clip's given head (known / first frames) does not combine with it."""
    if dit is None or getattr(dit, "config", None) is None:
        return
    name = source_name(dit, "the diffusion model")
    if vace is None:
        if has_vace(dit):
            raise ValueError(f"{name} is a VACE model: give VACE inputs (a control video, masks or reference "
                             f"images; none = an empty context, wan_core.vace.build_request)")
        return
    if not has_vace(dit):
        raise ValueError(f"VACE inputs (control video, masks, reference images): {name} has no VACE blocks; load a "
                         f"Wan VACE model (wan2.1_vace_1.3B / 14B, Wan 2.2 VACE-Fun) or leave them out")
    vace.check(shape)
    if head_given:
        raise ValueError("VACE: known frames / a first-frame latent do not combine with VACE inputs; extend a clip "
                         "with VACE itself (wan_core.vace.extend_clip: the given frames kept by a mask of 0)")


class WanPipeline:
    """The three models plus the glue. Any model may be None when its stage is not used.

    ``dit`` is a ``WanDiT`` (or any ``(x, t, context) -> v`` module with ``.dtype``/``.device``),
    ``vae`` a ``WanVAE``, ``text_encoder`` a ``TextEncoder``.
    """

    def __init__(self, dit=None, vae=None, text_encoder=None, clip_vision=None):
        self.dit = dit
        self.vae = vae
        self.text_encoder = text_encoder
        self.clip_vision = clip_vision  # a CLIPVisionEncoder for Wan 2.1 image-to-video models, else None
        self.cache_report = None  # wan_core.cache.CacheReport of the last sample_latents call
        self.moe_steps: list[str] | None = None  # WanMoE: the expert of each step of the last run

    # ------------------------------------------------------------------ stages
    def encode_prompts(self, prompts: Sequence[str], negative_prompt: str | None = None,
                       need_negative: bool = True) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """Prompt embeddings ``[L_i, 4096]`` per prompt, and the negative prompt's (repeated) or None."""
        if self.text_encoder is None:
            raise ValueError("this pipeline has no text encoder; load one or pass embeddings")
        negative = DEFAULT_NEGATIVE_PROMPT if negative_prompt is None else negative_prompt
        texts = list(prompts) + ([negative] if need_negative else [])
        embs = self.text_encoder.encode(texts)
        cond = embs[: len(prompts)]
        uncond = [embs[-1]] * len(prompts) if need_negative else None
        return cond, uncond

    def encode_config(self, cfg: GenerationConfig, need_negative: bool = True) -> tuple[
            list[torch.Tensor], list[torch.Tensor] | None, list[torch.Tensor] | None]:
        """``cfg``'s prompts as ``encode_prompts`` gives them, plus the embeddings of its prompt travel segments
        (``cfg.travel``; each distinct segment and the negative prompt encoded once), else None. With travel the
        prompt embedding is the first segment's, and a video held by one window gets that alone (travel None)."""
        segments = cfg.travel
        if segments is None:
            return (*self.encode_prompts(cfg.prompts, cfg.negative_prompt, need_negative=need_negative), None)
        if cfg.context is not None and cfg.context.covers(cfg.latent_shape[2]):  # one window: a plain prompt
            return (*self.encode_prompts(segments[:1], cfg.negative_prompt, need_negative=need_negative), None)
        distinct, index = prompt_travel.unique_segments(segments)
        embs, uncond = self.encode_prompts(distinct, cfg.negative_prompt, need_negative=need_negative)
        travel = [embs[i] for i in index]
        return travel[:1], (uncond[:1] if uncond is not None else None), travel

    def velocity_model(self, image: ImageCondition | None = None, dit=None,
                       vace: VaceRequest | None = None) -> Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]:
        """``(x, timestep, context) -> v``; with ``image`` the conditioning goes into every call (docs/i2v.md
        section 4). ``dit``: one expert of a ``WanMoE`` (default: the pipeline's DiT). ``vace``: the VACE inputs of
        the frames ``x`` holds, given to every call (both guidance passes: docs/vace.md section 3)."""
        dit = dit if dit is not None else self.dit
        if dit is None:
            raise ValueError("this pipeline has no DiT")
        if vace is not None:
            kwargs = vace.dit_kwargs(dit.device)

            def vace_fn(x: torch.Tensor, timestep: torch.Tensor, context) -> torch.Tensor:
                return dit(x.to(dit.device), timestep.to(dit.device), context, **kwargs).to(x.device, torch.float32)

            return vace_fn
        if image is not None:
            y = image.image_latent.to(dit.device, torch.float32)
            clip = image.clip_tokens if getattr(dit.config, "image_dim", 0) else None
            clip = clip.to(dit.device) if clip is not None else None

            def image_fn(x: torch.Tensor, timestep: torch.Tensor, context) -> torch.Tensor:
                return dit(x.to(dit.device), timestep.to(dit.device), context, image_latent=y,
                           clip_tokens=clip).to(x.device, torch.float32)

            return image_fn

        def model_fn(x: torch.Tensor, timestep: torch.Tensor, context) -> torch.Tensor:
            return dit(x.to(dit.device), timestep.to(dit.device), context).to(x.device, torch.float32)

        return model_fn

    def sample_latents(
        self,
        cond: list[torch.Tensor],
        uncond: list[torch.Tensor] | None,
        cfg: GenerationConfig,
        latent: torch.Tensor | None = None,
        callback: StepCallback | None = None,
        interrupt: InterruptFn | None = None,
        step_hooks: Sequence[Any] = (),
        cache: Any = None,
        image: ImageCondition | None = None,
        first_frame: torch.Tensor | None = None, known: torch.Tensor | None = None,
        travel: Sequence[torch.Tensor] | None = None, vace: VaceRequest | None = None,
    ) -> torch.Tensor:
        """Sample raw VAE latents ``[B, 16, F, H/8, W/8]``.

        ``latent``: raw latents to start from when ``cfg.denoise < 1`` (video-to-video), else None.
        ``callback(step, total, x, x0_hat)`` with normalised latents (for previews).
        ``cache``: diffusion cache (``wan_core.cache``): None = "exact" (text K/V once per prompt, same output),
        a preset name ("off", "wan", "teacache", "magcache", "easycache") or a ``CacheConfig``; afterwards
        ``self.cache_report`` says what it computed and skipped.
        ``image``: an image-to-video model's conditioning (``wan_core.i2v.image_condition``); others refuse it.
        ``first_frame``: Wan 2.2 TI2V-5B image-to-video, the start image's raw latent ``[1 or B, 48, 1, h, w]``
        (``vae.encode`` of one frame): it replaces latent frame 0 at timestep 0 (docs/wan22.md section 2); a latent
        of K frames holds the first K so (a clip extension's clean head, any Wan DiT; not with context windows).
        ``known``: raw latents ``[1 or B, C, K, h, w]``, the given first K latent frames of a clip extension
        (``wan_core.extension``; text-to-video models), re-noised to every step's sigma.
        ``travel``: prompt travel, one embedding ``[L_i, D]`` per segment (``encode_config``), each context window
        guided by its segment's (``wan_core.sampling.prompt_travel``); ``cond``: the first segment's.
        ``vace``: a VACE model's inputs (``wan_core.vace.VaceRequest``); the latent has ``vace.ref_frames``
        reference frames in front of the video's, every context window holds them first, and the returned latents
        are the video's alone (reference frames trimmed; docs/vace.md section 3).
        """
        self._check_embeddings(cond, uncond, travel)
        schedule = build_schedule(cfg.schedule_config())
        check_size_for_models(cfg.width, cfg.height, self.dit, self.vae)
        # one cache session per expert (docs/wan22.md section 4); cache errors before any work
        sessions = {name: start_session(cache, expert, schedule.num_steps, _guidance_of(self.dit, name, cfg.guidance))
                    for name, expert in experts(self.dit)}
        shape, head, cfg = self._latent_plan(len(cond), cfg, image, vace, known is not None or first_frame is not None)
        device = self.dit.device if self.dit is not None else torch.device("cpu")
        x, z0 = _start_latents(cfg, schedule, shape, device, latent, first_frame, self.dit, self.vae)
        windowed = cfg.context is not None and not cfg.context.covers(shape[2])
        guide, attached, expert_guide, reports = self._velocity(cond, uncond, cfg, cache, sessions, schedule, image,
                                                                device, z0, shape[2], interrupt, travel, vace)
        given = _known_head(known, cfg, shape, x, self.dit, self.vae)
        if given is not None:
            guide = KnownFramesGuidance(guide, *given)
        hooks = list(step_hooks) + [a for _, e in experts(self.dit)
                                    if hasattr(a := getattr(e, "attention", None), "begin_step")]
        riflex = _riflex_for(self.dit, cfg, cfg.context.length + head if windowed and cfg.context else shape[2])
        with attached, riflex:
            x = sample(guide, x, schedule, cfg.solver, callback=callback, interrupt=interrupt, step_hooks=hooks)
        if z0 is not None:
            x = FirstFrameGuidance(None, z0, tuple(self.dit.config.patch_size)).conditioned(x)
        if isinstance(guide, KnownFramesGuidance):
            x = guide.finish(x)
        self.cache_report = self._cache_report(reports, sessions)
        self.moe_steps = list(expert_guide.steps) if is_moe(self.dit) else None  # expert per step ("high"/"low")
        return latent_format.from_model(x[:, :, head:])

    def _latent_plan(self, batch: int, cfg: GenerationConfig, image: ImageCondition | None, vace: VaceRequest | None,
                     extending: bool) -> tuple[tuple[int, int, int, int, int], int, GenerationConfig]:
        """The sampled latent's shape (a VACE request's reference frames in front), their count, and ``cfg`` with
        context windows that keep those frames at the head of every window; the image / VACE inputs checked."""
        channels, tf, sf = latent_geometry(self.dit, self.vae)
        head = vace.ref_frames if vace is not None else 0
        shape = (batch, channels, head + (cfg.frames - 1) // tf + 1, cfg.height // sf, cfg.width // sf)
        check_image_model(self.dit, image, shape, source_name(self.dit, "the diffusion model"))
        _check_vace(self.dit, vace, shape, extending)
        if head and cfg.context is not None:  # windows slide over the video; the references head each one
            cfg = cfg.replace(context=dataclasses.replace(cfg.context, head=head))
        return shape, head, cfg

    def _check_embeddings(self, cond, uncond, travel) -> None:
        """The models fit each other and every embedding fits the DiT (one line naming the embedding otherwise)."""
        check_models(self.dit, self.vae)
        check_embeddings(cond, "prompt embedding", self.dit)
        if travel is not None:
            check_embeddings(travel, "prompt travel segment embedding", self.dit)
            if len(cond) != 1:
                raise ValueError(f"prompt travel guides one video, but {len(cond)} prompt embeddings were given")
        if uncond is not None:
            check_embeddings(uncond, "negative prompt embedding", self.dit)

    def _cache_report(self, reports, sessions: dict[str, Any]):
        """What the run's caches computed and skipped: per window, per expert, or the one session's."""
        if reports is not None:
            return WindowCacheReport(reports())
        if is_moe(self.dit):
            return MoECacheReport({n: s.report for n, s in sessions.items()})
        return sessions[""].report

    def _velocity(self, cond, uncond, cfg: GenerationConfig, cache: Any, sessions: dict[str, Any], schedule: Any,
                  image: ImageCondition | None, device: torch.device, z0: torch.Tensor | None, frames: int,
                  interrupt: InterruptFn | None, travel=None,
                  vace: VaceRequest | None = None) -> tuple[Any, Any, Any, Any]:
        """The run's velocity function, the context its caches run in, the guide that knows the expert of each
        step, and (context windows) a function listing the windows' cache reports, else None."""
        if cfg.context is not None and not cfg.context.covers(frames):  # one guide per window
            guide, attached, reports = self._windowed_guide(cond, uncond, cfg, cache, schedule, image, device, z0,
                                                            frames, interrupt, travel, vace)
            return guide, attached, guide, reports
        guide, attached = self._guide(cond, uncond, cfg, sessions, schedule, image, device, vace)
        if z0 is None:
            return guide, attached, guide, None
        return FirstFrameGuidance(guide, z0, tuple(self.dit.config.patch_size)), attached, guide, None

    def _guide(self, cond: list[torch.Tensor], uncond: list[torch.Tensor] | None, cfg: GenerationConfig,
               sessions: dict[str, Any], schedule: Any, image: ImageCondition | None,
               device: torch.device, vace: VaceRequest | None = None) -> tuple[Any, Any]:
        """The velocity function of the run (classifier-free guidance per expert, switched by the timestep for a
        ``WanMoE``) and the context that attaches each expert's cache session."""
        batched = cfg.batched_cfg or bool(getattr(self.dit, "wants_batched_cfg", False))  # CFG-parallel models
        guides = {name: ClassifierFreeGuidance(
            self.velocity_model(image, expert, vace), cond, uncond, _guidance_of(self.dit, name, cfg.guidance),
            batched=batched, cfg_cache=sessions[name].cfg_cache, branch_cache=sessions[name])
            for name, expert in experts(self.dit)}
        if not is_moe(self.dit):
            return guides[""], sessions[""].attached(self.dit)
        return MoEGuidance(self.dit, guides, schedule.timesteps.tolist(), device), moe_attached(sessions, self.dit)

    def _windowed_guide(self, cond, uncond, cfg: GenerationConfig, cache: Any, schedule: Any,
                        image: ImageCondition | None, device: torch.device, z0: torch.Tensor | None, frames: int,
                        interrupt: InterruptFn | None, travel=None, vace: VaceRequest | None = None):
        """Context windows (``cfg.context``): one guide per window, each with its own cache sessions, the image
        conditioning of its frames, the TI2V first frame where the window starts at frame 0, and with ``travel``
        its prompt segment's embedding (``prompt_travel.segment_of_window``). Returns the
        velocity function, the context that finishes every window's cache sessions when the run ends (each window
        makes its own sessions active on the model around its forwards) and a function listing their reports."""
        context = cfg.context
        assert context is not None  # sample_latents calls this with windows only
        windows: dict[tuple[int, ...], Any] = {}
        started: list[Any] = []  # every window's sessions, finished once when the run ends
        text_kv: dict[str, Any] = {}  # per expert: the prompt's text K/V, one copy for all windows (not one each)

        @contextlib.contextmanager
        def finishing():
            try:
                yield
            finally:
                for session in started:
                    session.finish()

        def make_guide(window: tuple[int, ...]):
            sessions = {name: start_session(cache, expert, schedule.num_steps,
                                            _guidance_of(self.dit, name, cfg.guidance))
                        for name, expert in experts(self.dit)}
            for name, session in sessions.items():  # prompt-only state: shared, memory flat in the window count
                if session.text_kv is not None:
                    session.text_kv = text_kv.setdefault(name, session.text_kv)
            part = None if image is None else dataclasses.replace(
                image, image_latent=image.image_latent[:, :, list(window)])
            own = cond if travel is None else [  # prompt travel: the segment of the window's centre (after the head)
                travel[prompt_travel.segment_of_window([f - context.head for f in window[context.head:]],
                                                       frames - context.head, len(travel), bool(context.anchor))]]
            guide, _ = self._guide(own, uncond, cfg, sessions, schedule, part, device,
                                   vace.window(window) if vace is not None else None)
            if z0 is not None and window[0] == 0:
                guide = FirstFrameGuidance(guide, z0, tuple(self.dit.config.patch_size))
            windows[window] = MoECacheReport({n: s.report for n, s in sessions.items()}) if is_moe(self.dit) \
                else sessions[""].report
            started.extend(sessions.values())
            pairs = [(sessions[name], expert) for name, expert in experts(self.dit)]
            return guide, lambda: _active(pairs)

        def stop(step: int, total: int) -> None:
            if interrupt is not None and interrupt():
                raise SamplingInterrupted(step, total)

        guide = WindowedGuidance(context, frames, make_guide, interrupt=stop,
                                 spread=getattr(self.dit, "window_spread", None))  # windows across ranks
        return guide, finishing(), lambda: dict(windows)

    def decode(self, latents: torch.Tensor, tiling: str = "auto", tile=None, overlap=None,
               progress: ProgressFn | None = None,
               interrupt: InterruptFn | None = None) -> torch.Tensor:
        """Raw latents -> video ``[B, 3, T, H, W]`` in [-1, 1]."""
        if self.vae is None:
            raise ValueError("this pipeline has no VAE")
        check_latent(latents, "latents to decode", vae=self.vae)
        z = latents.to(self.vae.device, self.vae.dtype)
        return self.vae.decode(z, tiling=tiling, tile=tile, overlap=overlap, progress=progress,
                               interrupt=interrupt)

    def image_condition(self, image: torch.Tensor, cfg: GenerationConfig, last_image: torch.Tensor | None = None,
                        tiling: str = "auto", progress: ProgressFn | None = None,
                        interrupt: InterruptFn | None = None) -> ImageCondition:
        """IMAGE ``[1, H, W, 3]`` (and the FLF2V last one) -> the conditioning for ``cfg``'s size
        (docs/i2v.md section 4); the request is checked against the DiT before the VAE runs."""
        if self.dit is not None:
            check_image_request(self.dit, last_image is not None, self.clip_vision is not None,
                                source_name(self.dit, "the diffusion model"))
        if self.vae is None:
            raise ValueError("image-to-video needs the VAE to encode the start image; load one")
        use_clip = self.dit is None or bool(getattr(self.dit.config, "image_dim", 0))
        return image_condition(self.vae, image, cfg.width, cfg.height, cfg.frames, last_image,
                               self.clip_vision if use_clip else None, tiling=tiling, progress=progress,
                               interrupt=interrupt)

    def vace_request(self, cfg: GenerationConfig, frames: torch.Tensor | None = None,
                     masks: torch.Tensor | None = None, ref_images=None, scale: float = 1.0,
                     ref_scale: float | None = None, tiling: str = "auto", progress: ProgressFn | None = None,
                     interrupt: InterruptFn | None = None) -> VaceRequest:
        """The VACE inputs of ``cfg``'s video, encoded by the pipeline's VAE (``wan_core.vace.build_request``):
        ``frames`` ``[B, 3, T, H, W]`` in [-1, 1] and ``masks`` ``[B, 1, T, H, W]`` of ``cfg``'s size, reference
        images ``[3, H', W']`` per batch item; none of them = the empty context of a VACE model."""
        if self.vae is None:
            raise ValueError("VACE needs the VAE to encode its inputs; load one")
        if frames is not None and tuple(frames.shape[2:]) != (cfg.frames, cfg.height, cfg.width):
            raise ValueError(f"VACE frames: {list(frames.shape[2:])} (T, H, W) but the run is {cfg.frames} frames of "
                             f"{cfg.height}x{cfg.width}; resize or cut them to the run's size")
        given = frames is not None or masks is not None  # then they set the size and batch
        return build_request(self.vae, frames, masks, ref_images, scale=scale, ref_scale=ref_scale,
                             size=None if given else (cfg.frames, cfg.height, cfg.width),
                             batch=None if given or ref_images else len(cfg.prompts), tiling=tiling,
                             progress=progress, interrupt=interrupt)

    # ------------------------------------------------------------------ all together
    def __call__(self, cfg: GenerationConfig, callback: StepCallback | None = None,
                 decode_progress: ProgressFn | None = None,
                 interrupt: InterruptFn | None = None, tiling: str = "auto", image: torch.Tensor | None = None,
                 last_image: torch.Tensor | None = None, vace: VaceRequest | None = None) -> "GenerationResult":
        """Generate: returns latents and the decoded video ``[B, 3, T, H, W]`` in [-1, 1]. ``image`` /
        ``last_image``: IMAGE ``[1, H, W, 3]`` in [0, 1] for image-to-video models (docs/i2v.md). ``vace``: a VACE
        model's inputs (``vace_request``; a VACE model without them gets the empty context); the latents and the
        video are the video's frames (reference frames trimmed)."""
        cfg.validate()
        check_models(self.dit, self.vae, self.text_encoder)  # before the text encoder runs
        check_size_for_models(cfg.width, cfg.height, self.dit, self.vae)
        if vace is None and has_vace(self.dit):
            vace = self.vace_request(cfg, tiling=tiling, interrupt=interrupt)
        condition = None
        if image is not None:
            condition = self.image_condition(image, cfg, last_image, tiling=tiling, interrupt=interrupt)
        elif last_image is not None:
            raise ValueError("a last image needs a start image too")
        else:
            check_image_model(self.dit, None, name=source_name(self.dit, "the diffusion model"))
        guidances = [_guidance_of(self.dit, name, cfg.guidance) for name, _ in experts(self.dit)]
        cond, uncond, travel = self.encode_config(cfg, need_negative=any(g != 1.0 for g in guidances))
        latents = self.sample_latents(cond, uncond, cfg, callback=callback, interrupt=interrupt, image=condition,
                                      travel=travel, vace=vace)
        video = self.decode(latents, tiling=tiling, progress=decode_progress, interrupt=interrupt)
        return GenerationResult(latents=latents, video=video, config=cfg)


@dataclass
class GenerationResult:
    latents: torch.Tensor  # raw VAE latents [B, 16, F, H/8, W/8]
    video: torch.Tensor  # [B, 3, T, H, W] in [-1, 1]
    config: GenerationConfig
    extra: dict = field(default_factory=dict)
