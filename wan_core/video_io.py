"""Writing generated frames: mp4/mkv/webm through PyAV, animated webp/gif through Pillow, or a PNG folder."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

VIDEO_EXTS = (".mp4", ".mkv", ".mov", ".webm")
ANIMATED_EXTS = (".webp", ".gif")
OUTPUT_KINDS = "an .mp4/.mkv/.mov/.webm file, an animated .webp/.gif, or a folder (PNG frames)"


def to_uint8_frames(video: torch.Tensor) -> np.ndarray:
    """``[3, T, H, W]`` in [-1, 1] -> ``[T, H, W, 3]`` uint8."""
    if video.dim() != 4 or video.shape[0] != 3:
        raise ValueError(f"expected one video [3, T, H, W], got {list(video.shape)}")
    frames = ((video.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return frames.permute(1, 2, 3, 0).cpu().numpy()


def write_video(video: torch.Tensor, path: str | Path, fps: int = 16, crf: int = 18) -> Path:
    """Write one video ``[3, T, H, W]`` in [-1, 1] to ``path``; the format follows the extension."""
    path = Path(path)
    frames = to_uint8_frames(video)
    ext = path.suffix.lower()
    if ext in VIDEO_EXTS:
        _write_av(frames, path, fps, crf)
    elif ext in ANIMATED_EXTS:
        _write_animated(frames, path, fps)
    elif ext == "" or path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        from PIL import Image

        for i, f in enumerate(frames):
            Image.fromarray(f).save(path / f"frame_{i:05d}.png")
    elif ext == ".png":
        raise ValueError(f"{path}: a video has several frames; give a folder name for PNG frames")
    else:
        raise ValueError(f"{path}: unknown output extension {ext!r}; use {OUTPUT_KINDS}")
    return path


def _write_av(frames: np.ndarray, path: Path, fps: int, crf: int) -> None:
    try:
        import av
    except ImportError as e:
        raise RuntimeError("writing video files needs PyAV: pip install av (or the 'video' extra)") from e
    path.parent.mkdir(parents=True, exist_ok=True)
    codec = "libvpx-vp9" if path.suffix.lower() == ".webm" else "libx264"
    if codec not in av.codecs_available:
        codec = "libvpx-vp9" if codec != "libvpx-vp9" and "libvpx-vp9" in av.codecs_available else "mpeg4"
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        if codec == "libx264":
            stream.options = {"crf": str(crf)}
        for f in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _write_animated(frames: np.ndarray, path: Path, fps: int) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(f) for f in frames]
    extra = {"lossless": False, "quality": 90} if path.suffix.lower() == ".webp" else {}
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(round(1000 / fps)), loop=0,
                   **extra)
