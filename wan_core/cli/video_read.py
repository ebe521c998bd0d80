"""Reading a video to continue (``generate --extend``): a video file (PyAV), an animated WebP/GIF (Pillow) or a
folder of PNG frames, as ``write_video`` writes them. ``probe_video`` reads only the size, frame count and fps,
for the checks before any model loads; ``read_video`` reads the frames."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .video_io import _FRAME_RE, ANIMATED_FORMATS, VIDEO_FORMATS

MAX_BYTES = 8 << 30  # frames held in memory as uint8: a bound on what one --extend can make the tool read


class _Refused(ValueError):
    """Our own one-line refusal (PyAV's errors are ValueErrors too, with the codec's wording)."""


@dataclass(frozen=True)
class VideoInfo:
    frames: int
    width: int
    height: int
    fps: float | None  # None: a folder of frames (no rate stored)


def _frame_files(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if _FRAME_RE.fullmatch(p.name))


def probe_video(path: str | Path) -> VideoInfo:
    """Size, frame count and fps of ``path``; one-line ``ValueError`` naming it when it is not a readable video."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"{p}: no such video file or frame folder")
    try:
        info = _probe(p)
    except _Refused:
        raise
    except Exception as e:  # a codec's or Pillow's own error: the file is not a video we can read
        raise ValueError(f"{p}: not a readable video ({type(e).__name__}: {str(e)[:120]})") from None
    if info.frames < 1 or info.width < 1 or info.height < 1:
        raise ValueError(f"{p}: holds no frames")
    if info.frames * info.width * info.height * 3 > MAX_BYTES:
        raise ValueError(f"{p}: {info.frames} frames of {info.width}x{info.height} are more than "
                         f"{MAX_BYTES >> 30} GiB of frames; continue a shorter cut of it")
    return info


def _probe(p: Path) -> VideoInfo:
    if p.is_dir():
        files = _frame_files(p)
        if not files:
            raise _Refused(f"{p}: a folder without frame_00000.png ... files")
        from PIL import Image

        with Image.open(files[0]) as im:
            return VideoInfo(len(files), im.width, im.height, None)
    ext = p.suffix.lower()
    if ext in VIDEO_FORMATS:
        import av

        with av.open(str(p)) as container:
            stream = container.streams.video[0]
            frames = stream.frames or sum(1 for _ in container.decode(stream))
            rate = stream.average_rate or stream.guessed_rate
            return VideoInfo(int(frames), stream.codec_context.width, stream.codec_context.height,
                             float(rate) if rate else None)
    if ext in ANIMATED_FORMATS:
        from PIL import Image

        with Image.open(p) as im:
            duration = im.info.get("duration") or 0
            return VideoInfo(getattr(im, "n_frames", 1), im.width, im.height,
                             1000.0 / duration if duration else None)
    raise _Refused(f"{p}: unknown video extension {ext!r}; use {'/'.join(VIDEO_FORMATS + ANIMATED_FORMATS)} or a "
                     f"folder of PNG frames")


def read_video(path: str | Path) -> tuple[np.ndarray, VideoInfo]:
    """Frames ``[T, H, W, 3]`` uint8 and the video's info; one-line ``ValueError`` for a bad file."""
    info = probe_video(path)
    p = Path(path).expanduser()
    try:
        frames = _read(p)
    except Exception as e:
        raise ValueError(f"{p}: not a readable video ({type(e).__name__}: {str(e)[:120]})") from None
    if any(f.shape != frames[0].shape for f in frames):
        raise ValueError(f"{p}: its frames differ in size")
    return np.stack(frames), VideoInfo(len(frames), info.width, info.height, info.fps)


def _read(p: Path) -> list[np.ndarray]:
    if p.is_dir() or p.suffix.lower() in ANIMATED_FORMATS:
        from PIL import Image, ImageSequence

        out: list[np.ndarray] = []
        for file in (_frame_files(p) if p.is_dir() else [p]):
            with Image.open(file) as im:
                out.extend(np.asarray(frame.convert("RGB")) for frame in ImageSequence.Iterator(im))
        return out
    import av

    with av.open(str(p)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
