"""One ``generate`` run as a frozen ``GenerateRequest``, built once from the parsed flags: every default resolved
here (the preset's, Wan 2.1's, or the Wan 2.2 A14B / TI2V-5B row of ``wan_core.variants`` the model files call
for) and every check that needs no model run here (``wan_core.cli.checks``); the rest of the command only reads
it. What the request chose on the user's behalf (the demo model, an image's size) is said on stderr."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from .. import variants
from .errors import UsageError

if TYPE_CHECKING:  # Literal types only: the request stays torch-free
    from ..memory.offload import DitOffload, TextEncoderOffload, VaeOffload
    from ..sampling.schedule import Convention
    from ..sampling.solver import Solver

# Settings a flag left unset takes, in this order (the names of the flags)
SAMPLING = ("width", "height", "frames", "steps", "guidance", "shift", "fps")


@dataclass(frozen=True)
class GenerateRequest:
    """The flags of ``generate`` with their defaults resolved. ``dit``, ``vae``, ``image`` are as given (after the
    TI2V claim of the image); ``dit_file`` / ``vae_file`` are what model resolution reads (the high-noise
    expert stands for the DiT; a TI2V-5B DiT takes the Wan 2.2 VAE of --models-dir); ``boundary`` and
    ``guidance_low`` are the official A14B values unless given."""

    prompt: str
    negative_prompt: str | None
    out: str
    preset: str | None
    models_dir: str | None
    dit: str | None
    vae: str | None
    text_encoder: str | None
    dit_high: str | None
    dit_low: str | None
    boundary: float | None
    guidance_low: float | None
    lora_high: tuple[str, ...]
    lora_low: tuple[str, ...]
    tokenizer: str | None
    image: str | None
    last_image: str | None
    clip_vision: str | None
    dtype: str
    device: str
    lora: tuple[str, ...]
    lora_mode: str
    attention: str
    skiparse: str
    skiparse_k: int
    weights: str | None
    gemm: str
    width: int
    height: int
    frames: int
    steps: int
    guidance: float
    shift: float
    solver: Solver
    convention: str
    seed: int
    nag_scale: float
    nag_tau: float
    nag_alpha: float
    cfg_batched: bool
    cache: str
    context_frames: int | None
    context_overlap: int | None
    context_schedule: str
    context_stride: int
    context_fuse: str
    context_anchor: str
    freenoise: bool
    riflex: str
    extend: str | None
    extend_overlap: int | None
    clips: int
    color_match: str | None
    extend_conditioning: str
    ulysses: int
    ring: int
    cfg_parallel: bool
    fsdp: bool
    blocks_to_swap: int
    prefetch: int
    compile_blocks: bool
    text_encoder_offload: TextEncoderOffload
    vae_offload: VaeOffload
    dit_offload: DitOffload
    fps: int
    tiling: str
    ti2v_image: str | None = None  # --image of a TI2V-5B DiT: its first frame, not Wan 2.1 I2V conditioning
    dit_file: str | None = None
    vae_file: str | None = None
    window_parallel: int = 1  # --window-parallel: context windows of a step spread over this many model replicas
    overwrite: bool = False  # --out may replace a file WanCore did not write
    vace_video: str | None = None  # --vace-video / --vace-mask / --ref-image: VACE inputs (wan_core.cli.vace)
    vace_mask: str | None = None
    ref_image: tuple[str, ...] = ()
    vace_scale: float | None = None
    ref_scale: float | None = None

    @property
    def experts(self) -> bool:
        """--dit-high/--dit-low: a Wan 2.2 A14B pair."""
        return bool(self.dit_high or self.dit_low)

    @property
    def uses_negative(self) -> bool:
        """The negative prompt is encoded for CFG (guidance != 1) or for NAG."""
        return self.guidance != 1.0 or self.nag_scale != 1.0

    def context_windows(self):
        """--context-* as a ``wan_core.sampling.context_windows.ContextWindows`` (None without --context-frames;
        ValueError when a value is bad)."""
        if self.context_frames is None:
            return None
        from ..sampling.context_windows import ContextWindows

        overlap = self.context_overlap
        if overlap is None:  # half the window, in whole latent frames
            overlap = (self.context_frames - 1) // 2 // 4 * 4
        anchor = None if self.context_anchor == "auto" else self.context_anchor == "on"
        return ContextWindows.from_frames(self.context_frames, overlap, schedule=self.context_schedule,
                                          stride=self.context_stride, fuse=self.context_fuse,
                                          freenoise=self.freenoise, anchor=anchor)

    @property
    def chained(self) -> bool:
        """--extend or --clips > 1: the run makes clips that continue a video (wan_core.extension)."""
        return bool(self.extend) or self.clips > 1

    def extension(self):
        """--extend-overlap/--color-match/--extend-conditioning as a ``wan_core.extension.Extension`` (ValueError
        when a value is bad)."""
        from ..extension import DEFAULT_OVERLAP, Extension

        return Extension(overlap=DEFAULT_OVERLAP if self.extend_overlap is None else self.extend_overlap,
                         colour=self.color_match or "mean-std", conditioning=self.extend_conditioning)

    def nag_config(self):
        """--nag-scale/--nag-tau/--nag-alpha as a ``wan_core.sampling.nag.NAGConfig`` (ValueError when bad)."""
        from ..sampling.nag import NAGConfig

        return NAGConfig(self.nag_scale, self.nag_tau, self.nag_alpha)

    def replace(self, **changes) -> "GenerateRequest":
        return dataclasses.replace(self, **changes)


def build_request(args: argparse.Namespace) -> GenerateRequest:
    """The request of the parsed ``generate`` flags, or ``UsageError`` with every problem on one line."""
    from .checks import problems

    request = resolve(args)
    found = problems(request)
    if found:
        raise UsageError("; ".join(found))
    return request


def resolve(args: argparse.Namespace) -> GenerateRequest:
    """The flags with every default filled in, unchecked (``build_request`` checks them)."""
    flags = {f.name: value for f in dataclasses.fields(GenerateRequest)
             if (value := vars(args).get(f.name, f.default)) is not dataclasses.MISSING}
    flags.update(lora=tuple(flags["lora"]), lora_high=tuple(flags["lora_high"]), lora_low=tuple(flags["lora_low"]),
                 ref_image=tuple(flags["ref_image"]))
    experts = bool(flags["dit_high"] or flags["dit_low"])
    if flags["preset"] is None and not (flags["dit"] or flags["vae"] or flags["text_encoder"] or flags["models_dir"]):
        flags["preset"] = "demo"
        print("wan_core: no model files given: using the built-in demo model (wancore-demo: coloured shapes "
              "moving in four directions, docs/demo_model.md); pass --models-dir or --dit/--vae/--text-encoder "
              "for Wan 2.1", file=sys.stderr)
    channels = dit_channels(flags["dit"])
    if flags["image"] and not flags["last_image"] and channels == 48:  # TI2V-5B: the image is its first frame
        flags["ti2v_image"], flags["image"] = flags["image"], None
    if flags["image"] and flags["width"] is None and flags["height"] is None:
        flags["width"], flags["height"] = _image_size(flags["image"])
    if flags["extend"]:
        _video_defaults(flags)
    row = variants.for_files(experts=experts, image=bool(flags["image"]), latent_channels=channels)
    defaults = sampling_defaults(flags["preset"], row)
    if (flags["vace_video"] or flags["vace_mask"] or flags["ref_image"]) and not experts and not flags["preset"]:
        defaults["shift"] = variants.WAN21_VACE.shift  # official VACE (Wan2.1 generate.py: shift 16 for vace)
    for key, value in defaults.items():
        if flags[key] is None:
            flags[key] = value
    if experts:  # the official A14B values of the row (I2V-A14B with --image, else T2V-A14B)
        if flags["boundary"] is None:
            flags["boundary"] = row.sampling.boundary
        if flags["guidance_low"] is None:
            flags["guidance_low"] = row.sampling.guidance_low
    flags["dit_file"] = flags["dit_high"] if experts else flags["dit"]
    flags["vae_file"] = _vae_file(flags["vae"], flags["models_dir"], None if experts else channels)
    return GenerateRequest(**flags)


def sampling_defaults(preset: str | None, row: variants.Variant) -> dict[str, object]:
    """What unset flags take: the preset's row (``variants.PRESET_VARIANTS``) or Wan 2.1's, with the official
    steps, shift, guidance and fps of two A14B experts (the size stays) or every setting of a TI2V-5B DiT."""
    base = variants.VARIANTS[variants.PRESET_VARIANTS[preset]].sampling if preset else variants.WAN21
    values = base.generation()
    if row.experts:
        values.update({k: v for k, v in row.sampling.generation().items() if k in ("steps", "shift", "guidance",
                                                                                     "fps")})
    elif row.task == "ti2v":
        values.update(row.sampling.generation())
    return values


def dit_channels(path: str | None) -> int | None:
    """The latent channels of the DiT file at ``path`` (16, or 48 for TI2V-5B), None when unknown."""
    if not path or not Path(path).expanduser().exists():
        return None
    from .model_files import identify

    f = identify(Path(path).expanduser(), "dit")
    return f.channels if f.ok else None


def _image_size(path: str) -> tuple[int | None, int | None]:
    """--image without --width and --height: the size the official I2V code picks for that image (its aspect
    ratio at about 832x480 pixels, ``wan_core.i2v.official_size``), said on stderr; (None, None) for an image
    that cannot be read (``checks.image_problems`` names the problem)."""
    from ..i2v import load_image, official_size

    try:
        image = load_image(path)
    except ValueError:
        return None, None
    width, height = official_size(image.shape[1], image.shape[2])
    print(f"wan_core: --image {image.shape[2]}x{image.shape[1]}: video size {width}x{height} (its "
          f"aspect ratio at about 832x480, as the official I2V code picks; --width/--height to choose)",
          file=sys.stderr)
    return width, height


def _video_defaults(flags: dict) -> None:
    """--extend: the video's size and fps where --width/--height/--fps are unset (checks.extend_problems refuses
    given values that differ); nothing for a video that cannot be read (the checks name the problem)."""
    from .video_read import probe_video

    try:
        info = probe_video(flags["extend"])
    except ValueError:
        return
    for key, value in (("width", info.width), ("height", info.height),
                       ("fps", round(info.fps) if info.fps else None)):
        if flags[key] is None and value is not None:
            flags[key] = value


def _vae_file(vae: str | None, models_dir: str | None, dit_channels: int | None) -> str | None:
    """--vae, or for a TI2V-5B DiT (48 channels) the one 48-channel VAE of --models-dir (None:
    ``models.resolve_models`` looks for a Wan 2.1 VAE there and names what is missing)."""
    if vae is not None or not models_dir or dit_channels != 48:
        return vae
    from .model_files import find_model

    try:
        return str(find_model(models_dir, "vae", channels=48).path)
    except ValueError:
        return None


def generation_config(request: GenerateRequest):
    """The request's sampling settings as a validated ``wan_core.pipeline.GenerationConfig`` (lightx2v_distill:
    the step-distilled LoRAs' sigmas as a custom schedule); UsageError (one line) when the pipeline refuses."""
    from ..pipeline import GenerationConfig
    from ..sampling import distill_sigmas

    cfg = GenerationConfig(
        prompt=request.prompt, negative_prompt=request.negative_prompt, width=request.width, height=request.height,
        frames=request.frames, steps=request.steps, guidance=request.guidance, shift=request.shift,
        solver=request.solver, seed=request.seed, convention=cast("Convention", request.convention),
        batched_cfg=request.cfg_batched,  # lightx2v_distill: replaced by "custom" below
        context=request.context_windows(),
        riflex=request.riflex,
    )
    try:
        if request.convention == "lightx2v_distill":
            cfg = cfg.replace(convention="custom", sigmas=tuple(distill_sigmas(request.steps, request.shift)))
        cfg.validate()
    except ValueError as e:
        raise UsageError(str(e)) from None
    if cfg.context is not None and cfg.context.covers(cfg.latent_shape[2]):
        print(f"wan_core: --context-frames {request.context_frames} holds the whole video ({request.frames} frames): "
              f"it runs as one window, the plain sampler", file=sys.stderr)
    if cfg.travel is not None and not request.chained:  # chained clips: a segment per clip (cli/extend.py)
        print(f"wan_core: {travel_line(cfg)}", file=sys.stderr)
    return cfg


def travel_line(cfg) -> str:
    """The note on which context windows each prompt travel segment guides (or that one window holds the video)."""
    from ..sampling.prompt_travel import one_window_note, travel_note

    frames = cfg.latent_shape[2]
    if cfg.context.covers(frames):
        return one_window_note(cfg.travel)
    return travel_note(cfg.context.windows(frames, 0), cfg.travel, frames, bool(cfg.context.anchor),
                       moving=cfg.context.schedule != "static")
