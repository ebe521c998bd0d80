"""``generate --extend VIDEO`` / ``--clips N`` (docs/long_video.md section 3): the checks before any model loads
and the run of a chain of clips (``wan_core.extension.run_chain``), each clip continuing the last."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .request import GenerateRequest

_FPS_TOLERANCE = 0.1  # animated WebP/GIF store frame durations in 1-10 ms steps: 16 fps reads back as 15.9


def problems(request: "GenerateRequest") -> list[str]:
    """One line each: the extension flags without --extend/--clips, bad values, a video that cannot be read or
    whose size or fps differ from the asked ones, --out onto the video itself, combinations not supported."""
    from ..extension import MAX_CLIPS

    if not 1 <= request.clips <= MAX_CLIPS:
        return [f"--clips {request.clips}: must be an integer from 1 to {MAX_CLIPS}"]
    if not request.chained:
        given = [flag for flag, value in (("--extend-overlap", request.extend_overlap),
                                          ("--color-match", request.color_match),
                                          ("--extend-conditioning", None if request.extend_conditioning == "auto"
                                           else request.extend_conditioning)) if value is not None]
        return [f"{' / '.join(given)} {'needs' if len(given) == 1 else 'need'} --extend VIDEO or --clips N"] \
            if given else []
    out = []
    try:
        extension = request.extension()
        extension.check_clip(request.frames)
    except ValueError as e:
        out.append(str(e).replace("extend overlap=", "--extend-overlap ").replace("extend: ", "--extend: "))
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 or request.ulysses > 1 or request.ring > 1 or request.cfg_parallel:
        out.append("--extend/--clips run on one process; drop torchrun and the multi-GPU flags")
    if request.extend:
        out += _video_problems(request)
    return out


def _video_problems(request: "GenerateRequest") -> list[str]:
    from .video_read import probe_video

    if request.image:
        return ["--image starts a video from one image; --extend continues the frames of --extend: drop one"]
    if request.extend_conditioning == "svi":
        return ["--extend-conditioning svi continues in latent space: use it with --clips N from text or an image, "
                "not with --extend (a video file)"]
    try:
        info = probe_video(str(request.extend))
    except ValueError as e:
        return [f"--extend {e}"]
    out = []
    if (request.width, request.height) != (info.width, info.height):
        out.append(f"--extend {request.extend} is {info.width}x{info.height} but --width/--height ask for "
                   f"{request.width}x{request.height}; leave them unset (the video's size) or resize the video")
    if info.fps and request.fps and abs(info.fps - request.fps) > _FPS_TOLERANCE * info.fps:
        out.append(f"--extend {request.extend} plays at {info.fps:g} fps but --fps asks for {request.fps}; leave "
                   f"--fps unset (the video's) or convert the video")
    overlap = request.extend_overlap or 5
    if info.frames < overlap:
        out.append(f"--extend {request.extend} has {info.frames} frames, fewer than the overlap of {overlap}")
    try:
        same = Path(request.out).expanduser().resolve() == Path(str(request.extend)).expanduser().resolve()
    except OSError:
        same = False
    if same:
        out.append(f"--out {request.out} is the video being continued; write the result to a new file")
    return out


def previous_video(request: "GenerateRequest"):
    """--extend's frames as ``[1, 3, T, H, W]`` float32 in [-1, 1], or None."""
    if not request.extend:
        return None
    import torch

    from .video_read import read_video

    frames, _ = read_video(request.extend)
    video = torch.from_numpy(frames).permute(3, 0, 1, 2).float().div(127.5).sub(1)  # [3, T, H, W]
    return video[None]


def render(request: "GenerateRequest", cfg, files: dict | None, device, swapped: int, load):
    """(video ``[1, 3, T, H, W]``, the memory lines): the chain of clips of ``request``. ``load(...)`` gives the
    (dit, vae, text_encoder) as ``generate._load``; ``swapped`` the blocks to swap (``placement.swap_blocks``);
    every prompt part is encoded once before sampling, then the text encoder goes (its offload policy); the DiT
    and the VAE both stay for the whole chain."""
    import torch
    from tqdm.auto import tqdm

    from ..extension import clip_prompts, run_chain
    from ..memory.accounting import MemoryMeter, model_bytes
    from ..memory.offload import move, release
    from ..pipeline import WanPipeline
    from . import conditioning, models, placement, wan22

    dit, vae, te = load()
    meter = MemoryMeter(device)
    pipe = WanPipeline(None, vae, te)
    first = {}
    if request.ti2v_image:
        first["first_frame"] = wan22.first_frame(request, cfg, vae, device)
    if request.image:
        first["image"] = conditioning.encode_image_condition(request, cfg, dit, vae, files, device)
    prompts = clip_prompts(_segments(cfg.prompt), request.clips)
    with torch.inference_mode():
        with meter.stage("text encoding", model_bytes(te, device)):
            embeds = {p: pipe.encode_prompts([p], cfg.negative_prompt, need_negative=request.uses_negative)
                      for p in dict.fromkeys(prompts)}
        nag = request.nag_config()
        if nag.active:  # the negative prompt inside the cross-attention, for every clip (as generate does)
            from ..sampling.nag import NAGAttention

            NAGAttention(dit, embeds[prompts[0]][1], nag).__enter__()
        if models.offload_policy(request).text_encoder == "release":
            release(te)
            pipe.text_encoder = te = None
        placement.place_dit(request, dit, device, swapped)
        move(vae, device)
        pipe.dit = dit
        previous = previous_video(request)
        bar = tqdm(total=cfg.steps * request.clips, desc="sampling", unit="step")

        def on_clip(i: int, clips: int) -> None:
            print(f"wan_core: clip {i + 1}/{clips}: {prompts[i]!r}", file=sys.stderr)

        with meter.stage("sampling and decoding", model_bytes(dit, device) + model_bytes(vae, device)), bar:
            result = run_chain(pipe, cfg.replace(prompt=prompts[0]), request.clips, request.extension(),
                               lambda i: embeds[prompts[i]], previous, on_clip=on_clip, tiling=request.tiling,
                               clip_tokens=getattr(first.get("image"), "clip_tokens", None), first_inputs=first,
                               callback=lambda i, n, x, x0: bar.update(1), cache=request.cache)
    added = "" if previous is None else f" after the {previous.shape[2]} frames of {request.extend}"
    print(f"wan_core: {request.clips} clip(s): {result.new_frames} new frames{added}", file=sys.stderr)
    return result.video.cpu(), meter.lines()


def _segments(prompt: str) -> list[str]:
    """Prompt travel across clips: the segments of ``a | b | c`` (one segment: the prompt itself)."""
    from ..sampling.prompt_travel import is_travel, split_segments

    return list(split_segments(prompt, "--prompt")) if is_travel(prompt) else [prompt]


def metadata(request: "GenerateRequest") -> dict:
    """What the output stores about the chain: the clips, the overlap, and the video it continues (with that
    video's own stored settings, so a chain of extensions keeps its history)."""
    ext = request.extension()
    meta: dict = {"clips": request.clips, "overlap": ext.overlap, "color_match": ext.colour,
                  "conditioning": ext.conditioning}
    if request.extend:
        from .video_io import read_metadata
        from .video_read import probe_video

        info = probe_video(request.extend)
        try:
            earlier = read_metadata(request.extend)
        except Exception:  # a file we can read frames from but whose tags we cannot parse: no history
            earlier = None
        meta["continues"] = {"file": Path(request.extend).name, "frames": info.frames,
                             "settings": earlier if isinstance(earlier, dict) else None}
    return meta
