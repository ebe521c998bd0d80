"""``python -m wan_core vae encode|decode|roundtrip IN OUT --vae PATH``: try a video VAE on a video file (a WF-VAE,
docs/wfvae.md, or the Wan VAE). ``encode`` writes the raw latents to a ``.safetensors`` file (tensor ``latent``
[1, C, T', H', W'], the format's name, fps and source in its metadata); ``decode`` writes the video of such a
file; ``roundtrip`` encodes and decodes a video and prints the PSNR of the result against the input.

Flags are added without torch (``--help`` answers at once); paths, frame counts and sizes are checked before a
model loads where they can be, and every refusal is one line with exit code 2 (``errors.describe_error``).
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .video_io import OUTPUT_KINDS, output_problem

if TYPE_CHECKING:
    import numpy as np
    import torch

ACTIONS = ("encode", "decode", "roundtrip")
LATENT_EXT = ".safetensors"
TENSOR = "latent"
FORMAT_KEY = "wancore_latent_format"  # wan_core.wfvae.latent_format.FORMAT_KEY (tested equal)
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
DEFAULT_FPS = 16  # when neither the input nor --fps gives a rate (a folder of PNG frames)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=ACTIONS, help="encode: video -> latent file; decode: latent file -> video; "
                   "roundtrip: video -> video, printing the PSNR")
    p.add_argument("input", help=f"a video ({OUTPUT_KINDS}), or for decode a {LATENT_EXT} latent file")
    p.add_argument("output", help=f"a {LATENT_EXT} latent file (encode) or a video ({OUTPUT_KINDS})")
    p.add_argument("--vae", required=True, help="the VAE file or folder (a WF-VAE .ckpt/.safetensors/folder, or the "
                                                "Wan VAE)")
    p.add_argument("--frames", type=int, default=None,
                   help="encode/roundtrip: use the first N frames (1 + k t: t = 4, or 8 for the 8x8x8 WF-VAE)")
    p.add_argument("--tiling", choices=("auto", "on", "off"), default="auto", help="spatial tiling")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="fp32", help="the VAE's weights and compute")
    p.add_argument("--fps", type=int, default=None, help="frames per second of a written video (default: the "
                                                          f"input's, else {DEFAULT_FPS})")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")


def _check_paths(args) -> None:
    """Everything about the paths that can be refused before a model loads."""
    if not Path(args.vae).expanduser().exists():
        raise UsageError(f"--vae {args.vae}: no such file or folder")
    if args.frames is not None and args.frames < 1:
        raise UsageError(f"--frames {args.frames}: must be >= 1")
    if args.fps is not None and args.fps < 1:
        raise UsageError(f"--fps {args.fps}: must be >= 1")
    out = Path(args.output).expanduser()
    if args.action == "encode":
        if out.suffix.lower() != LATENT_EXT:
            raise UsageError(f"{out}: encode writes a {LATENT_EXT} latent file; give a name ending in {LATENT_EXT}")
        if out.exists() and not args.overwrite:
            raise UsageError(f"{out}: exists; give a new file name (or --overwrite to replace it)")
        if not out.parent.is_dir():
            raise UsageError(f"{out.parent}: the output folder does not exist; create it first")
    else:
        problem = output_problem(out, args.overwrite)
        if problem:
            raise UsageError(problem)
    if args.action == "decode":
        read_latent_header(args.input)
    else:
        from .video_read import probe_video

        probe_video(args.input)


def read_latent_header(path: str | Path) -> dict[str, str]:
    """The metadata of a latent file written by ``encode``; one-line ValueError for anything else."""
    from safetensors import safe_open

    p = Path(path).expanduser()
    if p.suffix.lower() != LATENT_EXT or not p.is_file():
        raise UsageError(f"{p}: decode reads a {LATENT_EXT} latent file written by 'vae encode'")
    try:
        with safe_open(str(p), "pt") as f:
            keys, meta = list(f.keys()), f.metadata() or {}
    except Exception as e:  # safetensors' own error: not such a file
        raise UsageError(f"{p}: not a readable {LATENT_EXT} file ({type(e).__name__})") from None
    if keys != [TENSOR] or FORMAT_KEY not in meta:
        raise UsageError(f"{p}: not a latent file of 'vae encode' (expected one tensor {TENSOR!r} and its format)")
    return meta


def format_name(vae) -> str:
    """The latent format a VAE reads and writes: a WF-VAE's own, else the Wan VAE's by channels."""
    own = getattr(vae, "latent_format", None)
    return own.name if own is not None else f"wan-vae-{vae.config.z_dim}ch"


def _load(args):
    import torch

    import wan_core

    from .placement import device_of

    device = device_of(args.device)
    return wan_core.load_vae(Path(args.vae).expanduser(), dtype=getattr(torch, DTYPES[args.dtype]), device=device)


def _read_frames(args, vae) -> tuple[np.ndarray, float | None]:
    """The input's frames [T, H, W, 3] uint8 (the first --frames) and fps, checked against the VAE."""
    from .video_read import probe_video, read_video

    info = probe_video(args.input)
    tf, sf = vae.config.temporal_factor, vae.config.spatial_factor
    n = info.frames if args.frames is None else args.frames
    if n > info.frames:
        raise UsageError(f"--frames {n}: {args.input} has only {info.frames} frames")
    if (n - 1) % tf:
        lo = n - (n - 1) % tf
        raise UsageError(f"{args.input}: {n} frames; this VAE encodes 1 + {tf}k frames: pass --frames {lo}"
                         + (f" (or {lo + tf})" if lo + tf <= info.frames else ""))
    if info.width % sf or info.height % sf:
        raise UsageError(f"{args.input}: {info.width}x{info.height}; this VAE needs width and height multiples of {sf}")
    frames, info = read_video(args.input)
    return frames[:n], info.fps


def _to_video(frames: np.ndarray) -> torch.Tensor:
    """[T, H, W, 3] uint8 -> [1, 3, T, H, W] float32 in [-1, 1]."""
    import torch

    return torch.from_numpy(frames).permute(3, 0, 1, 2)[None].float().div(127.5).sub(1.0)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB of two uint8 arrays of one shape (inf when equal)."""
    import numpy as np

    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def _encode(args, vae) -> tuple[torch.Tensor, np.ndarray, float | None]:
    from .progress import tqdm_progress

    frames, fps = _read_frames(args, vae)
    video = _to_video(frames).to(vae.device, vae.dtype)
    z = vae.encode(video, tiling=args.tiling, progress=tqdm_progress("encoding", "latent frame"))
    return z, frames, fps


def _decode(args, vae, z: torch.Tensor) -> torch.Tensor:
    from .progress import tqdm_progress

    return vae.decode(z.to(vae.device, vae.dtype), tiling=args.tiling,
                      progress=tqdm_progress("decoding", "latent frame"))[0]


def _write(args, video: torch.Tensor, fps: float | None, extra: dict[str, Any]) -> None:
    from .video_io import write_video

    rate = args.fps or (round(fps) if fps else DEFAULT_FPS)
    write_video(video, Path(args.output).expanduser(), fps=rate, overwrite=args.overwrite,
                metadata={"vae": Path(args.vae).name, **extra})


def run(args) -> int:
    """The ``vae`` command; returns the exit code."""
    _check_paths(args)
    vae = _load(args)
    name = format_name(vae)
    if args.action == "decode":
        meta = read_latent_header(args.input)
        if meta[FORMAT_KEY] != name:
            raise UsageError(f"{args.input}: latents of {meta[FORMAT_KEY]}, but --vae {args.vae} is {name}; decode "
                             f"them with the VAE that encoded them")
        from safetensors.torch import load_file

        z = load_file(str(Path(args.input).expanduser()))[TENSOR]
        fps = float(meta["fps"]) if meta.get("fps") else None
        _write(args, _decode(args, vae, z), fps, {"latent": Path(args.input).name})
        return 0
    z, frames, fps = _encode(args, vae)
    if args.action == "encode":
        from safetensors.torch import save_file

        meta = {FORMAT_KEY: name, "vae": Path(args.vae).name, "frames": str(frames.shape[0])}
        if fps:
            meta["fps"] = repr(fps)
        save_file({TENSOR: z.float().cpu().contiguous()}, str(Path(args.output).expanduser()), metadata=meta)
        print(f"encoded {frames.shape[0]} frames of {frames.shape[2]}x{frames.shape[1]} to latents "
              f"{list(z.shape)} ({name}, {frames.size / z.numel():.0f}x fewer values)")
        return 0
    from .video_io import to_uint8_frames

    video = _decode(args, vae, z)
    _write(args, video, fps, {"roundtrip": Path(args.input).name})
    score = psnr(to_uint8_frames(video), frames)
    print(f"roundtrip PSNR {score:.2f} dB ({frames.shape[0]} frames of {frames.shape[2]}x{frames.shape[1]}, "
          f"latents {list(z.shape)}, {name})")
    return 0
