"""``generate --vace-video / --vace-mask / --ref-image / --vace-scale / --ref-scale``: VACE inputs for a Wan 2.1
VACE or Wan 2.2 VACE-Fun DiT (docs/vace.md section 3). Refused before loading: VACE inputs for a DiT without VACE
blocks, a control video or mask video shorter than the run, more reference images than the video's latent frames,
unreadable files. A video of another size is resized to the run's (said); a longer one is cut (said)."""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .request import GenerateRequest

FLAGS = ("--vace-video", "--vace-mask", "--ref-image")


def add_arguments(group) -> None:
    group.add_argument("--vace-video", default=None, metavar="FILE|DIR",
                       help="VACE control video (depth, pose, edges, a video with grey holes; a video file or a "
                            "folder of frame_00000.png ...): frames to follow or keep")
    group.add_argument("--vace-mask", default=None, metavar="FILE|DIR",
                       help="VACE mask video (white = generate, black = keep --vace-video's pixels; one frame = "
                            "every frame)")
    group.add_argument("--ref-image", action="append", default=[], metavar="FILE",
                       help="VACE reference image (a subject or object to show; repeatable), put in front of the "
                            "video and trimmed from the output")
    group.add_argument("--vace-scale", type=float, default=None, metavar="S",
                       help="strength of the VACE inputs (official 1.0)")
    group.add_argument("--ref-scale", type=float, default=None, metavar="S",
                       help="a separate strength for the reference images (their hints then come from an input of "
                            "their own, added to the control video's; the official code has one input)")


def uses_vace(request: "GenerateRequest") -> bool:
    return bool(request.vace_video or request.vace_mask or request.ref_image)


def _dit_configs(request: "GenerateRequest") -> list[tuple[str, object]]:
    """(file name, DiTConfig from the header) of the DiT(s) the run loads; unreadable ones left out."""
    from ..checkpoint import is_quant_aux_key
    from ..config import detect_dit_config
    from ..dit.loader import official_state_dict

    out: list[tuple[str, object]] = []
    for path in (request.dit_high, request.dit_low) if request.experts else (request.dit_file,):
        if not path or not Path(path).expanduser().exists():
            continue
        try:
            sd = official_state_dict(Path(path).expanduser())
            out.append((Path(path).name, detect_dit_config({k: sd.shape(k) for k in sd if not is_quant_aux_key(k)})))
        except Exception:  # noqa: BLE001 - unreadable or not a DiT: loading names the problem in its own words
            continue
    return out


def problems(request: "GenerateRequest") -> list[str]:
    out = []
    for flag, value in (("--vace-scale", request.vace_scale), ("--ref-scale", request.ref_scale)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            out.append(f"{flag} {value}: must be a finite number >= 0")
    if request.ref_scale is not None and not request.ref_image:
        out.append("--ref-scale is the strength of --ref-image: give reference images too")
    if not uses_vace(request):
        return out
    if request.preset is not None:
        return out + [f"{'/'.join(FLAGS)} need a Wan VACE model; --preset {request.preset} is text-to-video: pass "
                      f"--dit (Wan 2.1 VACE) or --dit-high/--dit-low (Wan 2.2 VACE-Fun)"]
    for name, cfg in _dit_configs(request):
        if not getattr(cfg, "vace_layers", ()):
            out.append(f"{'/'.join(FLAGS)}: the DiT {name} has no VACE blocks; use a Wan 2.1 VACE model "
                       f"(wan2.1_vace_1.3B / 14B) or Wan 2.2 VACE-Fun, or leave the VACE flags out")
    for flag, given in (("--image", request.image or request.ti2v_image), ("--extend", request.extend),
                        ("--clips", request.clips > 1)):
        if given:
            out.append(f"{flag} does not combine with VACE inputs (a VACE model is text-to-video; extend a clip "
                       f"with --vace-video and a --vace-mask that keeps its first frames)")
    out += _video_problems(request)
    return out + _reference_problems(request)


def _video_problems(request: "GenerateRequest") -> list[str]:
    from .video_read import probe_video

    out = []
    for flag, path in (("--vace-video", request.vace_video), ("--vace-mask", request.vace_mask)):
        if not path:
            continue
        try:
            info = probe_video(path)
        except ValueError as e:
            out.append(f"{flag}: {e}")
            continue
        if info.frames < request.frames and not (flag == "--vace-mask" and info.frames == 1):
            out.append(f"{flag} {Path(path).name} has {info.frames} frames but the run makes {request.frames}: "
                       f"give --frames {max(1, (info.frames - 1) // 4 * 4 + 1)} or a longer video")
    return out


def _reference_problems(request: "GenerateRequest") -> list[str]:
    from ..i2v import load_image
    from ..vace import max_reference_images

    out = []
    allowed = max_reference_images((request.frames - 1) // 4 + 1)
    if len(request.ref_image) > allowed:
        out.append(f"--ref-image: {len(request.ref_image)} reference images, at most {allowed} for {request.frames} "
                   f"frames (one per latent frame of the video)")
    for path in request.ref_image:
        try:
            load_image(path)
        except ValueError as e:
            out.append(f"--ref-image: {e}")
    return out


def _frames(path: str, channels: int):
    """A video file or frame folder -> ``[1, C, T, H, W]`` float32: RGB in [-1, 1] (C 3) or grey in [0, 1] (C 1)."""
    import torch

    from .video_read import read_video

    frames, _ = read_video(path)
    x = torch.from_numpy(frames).float().permute(3, 0, 1, 2)[None] / 255.0  # [1, 3, T, H, W] in [0, 1]
    return x * 2 - 1 if channels == 3 else x.mean(dim=1, keepdim=True)


def encode(request: "GenerateRequest", cfg, dit, vae, device):
    """The run's ``VaceRequest`` (None for a DiT without VACE blocks and no VACE flags): the videos read and fitted
    to ``cfg``'s size (each change said on stderr), the references read, everything VAE-encoded on ``device``."""
    import torch

    from ..memory.offload import move
    from ..pipeline import WanPipeline
    from ..vace import has_vace
    from ..vace.fit import fit_video
    from .progress import tqdm_progress

    if not uses_vace(request) and not has_vace(dit):
        return None
    frames = _frames(request.vace_video, 3) if request.vace_video else None
    masks = _frames(request.vace_mask, 1) if request.vace_mask else None
    frames, masks, notes = fit_video(frames, masks, cfg.frames, cfg.height, cfg.width)
    for note in notes:
        print(f"wan_core: {note}", file=sys.stderr)
    if masks is not None and frames is None:
        frames = torch.zeros(1, 3, cfg.frames, cfg.height, cfg.width)
    refs = [[_image(p) for p in request.ref_image]] if request.ref_image else None
    rest = vae.device
    move(vae, device)
    scale = 1.0 if request.vace_scale is None else request.vace_scale
    with torch.inference_mode():
        vace = WanPipeline(None, vae).vace_request(cfg, frames, masks, refs, scale=scale, ref_scale=request.ref_scale,
                                                   tiling=request.tiling,
                                                   progress=tqdm_progress("encoding VACE inputs", "frame"))
    move(vae, rest)
    return vace


def _image(path: str):
    """A reference image file -> ``[3, H, W]`` in [-1, 1] (fitted onto the canvas by the conditioning)."""
    from ..i2v import load_image

    return load_image(path)[0].permute(2, 0, 1) * 2 - 1
