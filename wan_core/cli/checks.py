"""Every problem with a ``generate`` request that can be seen without loading a model, each one line as
``name=value: what is expected`` (the pipeline's wording) or naming the flags. ``wan_core.cli.request`` joins
them into one ``UsageError``. Torch is imported only for the checks that read an image or a NAG setting."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..estimate import MAX_STEPS, SIZE_LIMITS
from . import extend, loras, parallel, vace, wan22

if TYPE_CHECKING:
    from .request import GenerateRequest

# Accepted ranges (inclusive) besides the sizes (wan_core.estimate.SIZE_LIMITS): seeds as ComfyUI's seed widgets
# and make_noise, steps as the sampler node, fps as ComfyUI's Create Video node.
INT_RANGES = {"seed": (0, 2**64 - 1), "steps": (1, MAX_STEPS), "fps": (1, 120), "skiparse_k": (1, 64),
              **{k: SIZE_LIMITS[k] for k in ("width", "height", "frames")}}


def problems(request: "GenerateRequest") -> list[str]:
    """All of them, in the order they are reported: values, prompts and output, NAG, LoRAs, multi-GPU, memory,
    images, fp8, model sources, then the Wan 2.2 flags."""
    return (value_problems(request) + text_problems(request) + nag_problems(request)
            + loras.problems(request) + parallel.problems(request) + swap_problems(request)
            + image_problems(request) + source_problems(request) + wan22.problems(request)
            + context_problems(request) + travel_problems(request) + riflex_problems(request)
            + extend.problems(request) + vace.problems(request))


def value_problems(request: "GenerateRequest") -> list[str]:
    out = []
    values = vars(request)
    for name, (lo, hi) in INT_RANGES.items():
        value = values[name]
        if value is not None and not lo <= value <= hi:
            out.append(f"{name}={value}: must be an integer from {lo} to {hi}")
    for name in ("guidance", "shift"):
        if not math.isfinite(values[name]):
            out.append(f"{name}={values[name]}: must be a finite number")
    return out


def text_problems(request: "GenerateRequest") -> list[str]:
    """--prompt, --negative-prompt and --out."""
    from ..text.prompt import prompt_problem
    from .video_io import output_problem

    out = [problem for problem in (
        prompt_problem(request.prompt, "--prompt"),
        None if request.negative_prompt is None else
        prompt_problem(request.negative_prompt, "--negative-prompt", allow_empty=True)) if problem]
    where = output_problem(request.out, request.overwrite)
    if where:
        out.append(f"--out {request.out!r}: {where}" if not str(request.out).strip() else f"--out {where}")
    return out


def nag_problems(request: "GenerateRequest") -> list[str]:
    if request.nag_scale == 1.0:
        return []
    out = []
    try:
        request.nag_config()
    except ValueError as e:
        out.append(str(e))
    if request.guidance is not None and request.guidance != 1.0:
        out.append(f"--nag-scale {request.nag_scale:g} applies the negative prompt at guidance 1, but "
                   f"guidance is {request.guidance:g}: add --guidance 1 or drop --nag-scale")
    return out


def swap_problems(request: "GenerateRequest") -> list[str]:
    """--blocks-to-swap / --prefetch as numbers; against the device and the DiT's blocks once those are known
    (``wan_core.cli.placement.swap_blocks``)."""
    out = []
    if request.blocks_to_swap < 0:
        out.append(f"--blocks-to-swap {request.blocks_to_swap}: must be an integer >= 0")
    if request.prefetch < 0:
        out.append(f"--prefetch {request.prefetch}: must be an integer >= 0 (blocks copied ahead; 1 is usual)")
    return out


def image_problems(request: "GenerateRequest") -> list[str]:
    """--image / --last-image / --clip-vision that can be refused before loading anything (docs/i2v.md)."""
    out = []
    image, last, clip = request.image, request.last_image, request.clip_vision
    if last and not image:
        out.append("--last-image needs --image (the first frame) too")
    if clip and not image:
        out.append("--clip-vision is used with --image only")
    if image and request.preset is not None:
        out.append(f"--image needs an image-to-video model; --preset {request.preset} is text-to-video: pass "
                   f"--models-dir or --dit/--vae/--text-encoder/--clip-vision")
    for flag, value in (("--image", image), ("--last-image", last), ("--clip-vision", clip)):
        if value and not Path(value).expanduser().exists():
            out.append(f"{flag} {value}: no such file or folder")
        elif value and flag != "--clip-vision":
            from ..i2v import load_image

            try:
                load_image(value)  # small next to the models: read now, so a bad file fails before loading
            except ValueError as e:
                out.append(f"{flag} {e}")
    return out


def source_problems(request: "GenerateRequest") -> list[str]:
    """--gemm without fp8 weights; a preset with model files; model paths that do not exist."""
    out = []
    if request.gemm == "scaled_mm" and not request.weights:
        out.append("--gemm scaled_mm needs fp8 weights: add --weights fp8_scaled (or fp8_e4m3fn)")
    paths = {"dit": request.dit, "vae": request.vae, "text_encoder": request.text_encoder,
             "tokenizer": request.tokenizer}
    given = [f"--{flag.replace('_', '-')}" for flag in ("dit", "vae", "text_encoder") if paths[flag]]
    if request.models_dir and request.models_dir != os.environ.get("WANCORE_MODELS_DIR"):  # the variable: a default
        given.append("--models-dir")
    if request.preset is not None and given:
        out.append(f"--preset {request.preset} brings its own models: drop {' / '.join(given)} or the preset")
    if request.preset is None:
        for flag, value in paths.items():
            if value and not Path(value).expanduser().exists():
                out.append(f"--{flag.replace('_', '-')} {value}: no such file or folder")
    return out


def context_problems(request: "GenerateRequest") -> list[str]:
    """--context-* (docs/long_video.md): the other flags need --context-frames; the values as the core checks
    them (window 4n+1, overlap below it, stride, looped without an anchor)."""
    if request.context_frames is None:
        given = [flag for flag, value, unset in (
            ("--context-overlap", request.context_overlap, None), ("--context-schedule", request.context_schedule,
                                                                    "static"),
            ("--context-stride", request.context_stride, 1), ("--context-fuse", request.context_fuse, "pyramid"),
            ("--context-anchor", request.context_anchor, "auto"), ("--freenoise", request.freenoise, False))
            if value != unset]
        verb = "needs" if len(given) == 1 else "need"
        return [f"{' / '.join(given)} {verb} --context-frames (the window length)"] if given else []
    try:
        request.context_windows()
    except ValueError as e:
        return [f"--{str(e).replace('context ', 'context-', 1).replace('use anchor off', 'use --context-anchor off')}"]
    return []


def travel_problems(request: "GenerateRequest") -> list[str]:
    """--prompt "a | b": prompt travel over context windows or over chained clips (--clips / --extend: clip i takes
    segment i; docs/long_video.md), so it needs one of them, and text in every segment."""
    from ..sampling.prompt_travel import is_travel, split_segments

    if not is_travel(request.prompt):
        return []
    try:
        count = len(split_segments(request.prompt, "--prompt"))
    except ValueError as e:
        return [str(e)]
    if request.context_frames is None and not request.chained:
        return [f"--prompt has {count} segments separated by ' | ' (prompt travel: one per stretch of context "
                f"windows or per chained clip), which needs --context-frames or --clips; for one prompt write it "
                f"without ' | '"]
    return []


def riflex_problems(request: "GenerateRequest") -> list[str]:
    """--riflex: off, auto or K within the temporal RoPE of head_dim 128 (every released Wan DiT and the demo
    model; another model's range is checked once it is loaded)."""
    from ..dit.riflex import parse_setting

    try:
        setting = parse_setting(request.riflex)
    except ValueError as e:
        return [f"--riflex {request.riflex}: {e}"]
    if isinstance(setting, int) and request.preset != "tiny-random" and not 1 <= setting <= 22:
        return [f"--riflex {setting}: outside the temporal RoPE's range 1..22 (head_dim 128); Wan's usual K is 6"]
    return []
