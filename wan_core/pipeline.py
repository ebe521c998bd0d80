"""Text-to-video: prompt(s) -> umT5 embeddings (cached) -> noise -> flow sampling with CFG -> VAE decode.

Used by the ComfyUI nodes and the command line (docs/wan_spec.md section 6; docs/design.md sections 3-4). Latents
outside the sampler are raw VAE latents (ComfyUI's LATENT convention); the DiT sees normalised ones.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from . import latent_format
from .estimate import nearest_valid
from .cache import start_session
from .sampling import (DEFAULT_NEGATIVE_PROMPT, SOLVER_NAMES, ClassifierFreeGuidance, ScheduleConfig,
                       build_schedule, initial_latent, make_noise, sample)

SolverProgress = Callable[[int, int, torch.Tensor, torch.Tensor], None]
InterruptFn = Callable[[], Any]


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
    solver: str = "unipc"
    seed: int = 0
    convention: str = "official"  # "official" (integer timesteps) | "comfyui" (float) | "dpm" | "custom"
    sigmas: tuple[float, ...] | None = None
    denoise: float = 1.0
    integer_timesteps: bool | None = None  # None = the convention's own (official: int, comfyui/custom: float)
    batched_cfg: bool = False  # one forward of batch 2 instead of two of batch 1 (faster, more memory)

    def replace(self, **changes) -> "GenerationConfig":
        return replace(self, **changes)

    @property
    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)

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
        if self.solver not in SOLVER_NAMES:
            raise ValueError(f"solver={self.solver!r}: valid solvers are {', '.join(SOLVER_NAMES)}")
        if not self.prompts:
            raise ValueError("no prompt given")
        self.schedule_config().validate()


def video_size_problems(width: int, height: int, frames: int) -> list[str]:
    """Every problem with a requested video size, each naming the setting and the nearest valid values."""
    problems = []
    for name, value in (("width", width), ("height", height), ("frames", frames)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{name}={value!r}: must be a positive integer")
    if problems:
        return problems
    for name, value in (("width", width), ("height", height)):
        if value % 16:
            lo, hi = nearest_valid(value, 16)
            problems.append(f"{name}={value}: must be a multiple of 16; nearest valid: {lo} or {hi}")
    if (frames - 1) % 4:
        lo, hi = nearest_valid(frames, 4, 1)
        problems.append(f"frames={frames}: the frame count must be 4n+1 (Wan's VAE compresses time 4x "
                        f"after the first frame); nearest valid: {lo} or {hi}")
    return problems


def check_video_size(width: int, height: int, frames: int) -> None:
    """Frames must be 4n+1 and width/height multiples of 16 (the DiT's 2x2 patches on the 8x latents)."""
    problems = video_size_problems(width, height, frames)
    if problems:
        raise ValueError("; ".join(problems))


class WanPipeline:
    """The three models plus the glue. Any model may be None when its stage is not used.

    ``dit`` is a ``WanDiT`` (or any ``(x, t, context) -> v`` module with ``.dtype``/``.device``),
    ``vae`` a ``WanVAE``, ``text_encoder`` a ``TextEncoder``.
    """

    def __init__(self, dit=None, vae=None, text_encoder=None):
        self.dit = dit
        self.vae = vae
        self.text_encoder = text_encoder
        self.cache_report = None  # wan_core.cache.CacheReport of the last sample_latents call

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

    def velocity_model(self) -> Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]:
        dit = self.dit
        if dit is None:
            raise ValueError("this pipeline has no DiT")

        def model_fn(x: torch.Tensor, timestep: torch.Tensor, context) -> torch.Tensor:
            return dit(x.to(dit.device), timestep.to(dit.device), context).to(x.device, torch.float32)

        return model_fn

    def sample_latents(
        self,
        cond: list[torch.Tensor],
        uncond: list[torch.Tensor] | None,
        cfg: GenerationConfig,
        latent: torch.Tensor | None = None,
        callback: SolverProgress | None = None,
        interrupt: InterruptFn | None = None,
        step_hooks: Sequence[Any] = (),
        cache: Any = None,
    ) -> torch.Tensor:
        """Sample raw VAE latents ``[B, 16, F, H/8, W/8]``.

        ``latent``: raw latents to start from when ``cfg.denoise < 1`` (video-to-video), else None.
        ``callback(step, total, x, x0_hat)`` with normalised latents (for previews).
        ``cache``: diffusion cache (``wan_core.cache``): None = "exact" (text K/V once per prompt, same output),
        a preset name ("off", "wan", "teacache", "magcache", "easycache") or a ``CacheConfig``; afterwards
        ``self.cache_report`` says what it computed and skipped.
        """
        schedule = build_schedule(cfg.schedule_config())
        session = start_session(cache, self.dit, schedule.num_steps, cfg.guidance)  # cache errors before any work
        shape = (len(cond),) + cfg.latent_shape[1:]
        device = self.dit.device if self.dit is not None else torch.device("cpu")
        noise = make_noise(cfg.seed, shape, device=device)
        start = None
        if latent is not None:
            if tuple(latent.shape) != shape:
                raise ValueError(f"start latent has shape {list(latent.shape)}, expected {list(shape)}")
            start = latent_format.to_model(latent.to(device, torch.float32))
        elif cfg.denoise < 1.0:
            raise ValueError(f"denoise={cfg.denoise} needs a start latent (encode a video first); "
                             f"use denoise=1 for text-to-video")
        x = initial_latent(noise, schedule, start)
        guide = ClassifierFreeGuidance(self.velocity_model(), cond, uncond, cfg.guidance, batched=cfg.batched_cfg,
                                       cfg_cache=session.cfg_cache, branch_cache=session)
        hooks = list(step_hooks)
        attention = getattr(self.dit, "attention", None)
        if attention is not None and hasattr(attention, "begin_step"):
            hooks.append(attention)
        with session.attached(self.dit):
            x = sample(guide, x, schedule, cfg.solver, callback=callback, interrupt=interrupt, step_hooks=hooks)
        self.cache_report = session.report
        return latent_format.from_model(x)

    def decode(self, latents: torch.Tensor, tiling: str = "auto", tile=None, overlap=None,
               progress: Callable[[int, int], None] | None = None,
               interrupt: InterruptFn | None = None) -> torch.Tensor:
        """Raw latents -> video ``[B, 3, T, H, W]`` in [-1, 1]."""
        if self.vae is None:
            raise ValueError("this pipeline has no VAE")
        z = latents.to(self.vae.device, self.vae.dtype)
        return self.vae.decode(z, tiling=tiling, tile=tile, overlap=overlap, progress=progress,
                               interrupt=interrupt)

    # ------------------------------------------------------------------ all together
    def __call__(self, cfg: GenerationConfig, callback: SolverProgress | None = None,
                 decode_progress: Callable[[int, int], None] | None = None,
                 interrupt: InterruptFn | None = None, tiling: str = "auto") -> "GenerationResult":
        """Generate: returns latents and the decoded video ``[B, 3, T, H, W]`` in [-1, 1]."""
        cfg.validate()
        cond, uncond = self.encode_prompts(cfg.prompts, cfg.negative_prompt, need_negative=cfg.guidance != 1.0)
        latents = self.sample_latents(cond, uncond, cfg, callback=callback, interrupt=interrupt)
        video = self.decode(latents, tiling=tiling, progress=decode_progress, interrupt=interrupt)
        return GenerationResult(latents=latents, video=video, config=cfg)


@dataclass
class GenerationResult:
    latents: torch.Tensor  # raw VAE latents [B, 16, F, H/8, W/8]
    video: torch.Tensor  # [B, 3, T, H, W] in [-1, 1]
    config: GenerationConfig
    extra: dict = field(default_factory=dict)
