"""Writing generated frames: mp4/mkv/mov/webm through PyAV, animated webp/gif through Pillow, or a PNG folder,
with the prompt and settings stored in the file (as ComfyUI stores its prompt in the files it saves).

``OUTPUT_FORMATS`` is the one list of what can be written: the command line's help and checks use it.
``output_problem`` checks a destination before anything is generated, so a bad ``--out`` costs nothing.
torch and numpy are imported when frames are written, so the command line's ``--help`` stays fast.
"""
from __future__ import annotations

import importlib.util
import json
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import numpy as np
    import torch

VIDEO_FORMATS = (".mp4", ".mkv", ".mov", ".webm")  # PyAV (H.264; VP9 for .webm)
ANIMATED_FORMATS = (".webp", ".gif")  # Pillow
OUTPUT_FORMATS = VIDEO_FORMATS + ANIMATED_FORMATS  # or a path without extension: a folder of PNG frames
OUTPUT_KINDS = (f"a {'/'.join(VIDEO_FORMATS)} file, an animated {'/'.join(ANIMATED_FORMATS)}, "
                f"or a folder (PNG frames)")
FRAME_NAME = "frame_{:05d}.png"
_FRAME_RE = re.compile(r"frame_\d{5}\.png")
METADATA_KEY = "wancore"  # JSON of the prompt and settings, in every kind of output
# Where the JSON goes: container tag (video), EXIF ImageDescription (webp), comment (gif), text chunk (PNG).
_EXIF_DESCRIPTION, _EXIF_SOFTWARE = 0x010E, 0x0131
SOFTWARE = "ComfyUI-WanCore"


def is_frame_folder(path: str | Path) -> bool:
    """True when ``path`` names a folder of PNG frames: no extension, or an existing folder whose name does not
    end in an output format (``runs/v1.2``; an existing folder ``x.mp4`` is refused, not filled with PNGs)."""
    path = Path(path)
    return path.suffix == "" or (path.is_dir() and path.suffix.lower() not in OUTPUT_FORMATS)


def output_problem(path: str | Path, overwrite: bool = False) -> str | None:
    """One line saying why frames cannot be written to ``path``, or None; checked before generating.

    Refused: an empty path or one with a NUL byte, an unknown extension, a file whose folder is missing or not
    writable, a path that is an existing folder where a file is wanted (or a file where a folder is wanted), a
    folder that holds anything but earlier frames, an existing file (or link) that ``write_video`` did not
    write unless ``overwrite`` (nothing the user made is overwritten), a video format without PyAV.
    """
    if not str(path).strip():
        return "the output path is empty; give a file name (e.g. out.mp4) or a folder for PNG frames"
    if "\0" in str(path):
        return f"{str(path)!r}: the output path contains a NUL byte"
    path = Path(path)
    ext = path.suffix.lower()
    if is_frame_folder(path):
        if path.exists() and not path.is_dir():
            return f"{path}: exists and is a file; a path without extension is a folder of PNG frames"
        if path.is_dir():
            other = sorted(p.name for p in path.iterdir() if not _FRAME_RE.fullmatch(p.name))
            if other:
                return (f"{path}: the folder exists and holds other files ({', '.join(other[:3])}"
                        f"{', ...' if len(other) > 3 else ''}); give a new or empty folder (nothing is overwritten)")
            return _needs_pillow(path) or _unwritable(path)
        return _needs_pillow(path) or _missing_or_unwritable(path.parent)
    if ext not in OUTPUT_FORMATS:
        if ext in (".png", ".jpg", ".jpeg"):
            return f"{path}: a video has several frames; give a folder name (no extension) for PNG frames"
        return f"{path}: unknown output extension {ext!r}; use {OUTPUT_KINDS}"
    if path.is_dir():
        return f"{path}: is an existing folder; give a file name"
    if not overwrite and (path.is_symlink() or path.exists()) and not _written_here(path):
        return (f"{path}: exists and was not written by WanCore; give a new file name (or --overwrite to "
                f"replace it)")
    if ext in VIDEO_FORMATS and importlib.util.find_spec("av") is None:
        return f"{path}: writing {ext} files needs PyAV: pip install av (or the 'video' extra); .webp/.gif do not"
    return _needs_pillow(path) or _missing_or_unwritable(path.parent)


def _written_here(path: Path) -> bool:
    """True for a regular file (not a link) holding this tool's metadata: a rerun may replace its own output."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        return read_metadata(path) is not None
    except Exception:  # unreadable or another format behind the extension: not ours
        return False


def _needs_pillow(path: Path) -> str | None:
    if path.suffix.lower() in VIDEO_FORMATS or importlib.util.find_spec("PIL") is not None:
        return None
    return f"{path}: writing images needs Pillow: pip install Pillow (or the 'video' extra)"


def _missing_or_unwritable(folder: Path) -> str | None:
    if not folder.is_dir():
        return f"{folder}: the output folder does not exist; create it first"
    return _unwritable(folder)


def _unwritable(folder: Path) -> str | None:
    try:  # a real write: permission bits say nothing for root, read-only mounts or full disks
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        return f"{folder}: cannot write into this folder ({e.strerror or e})"
    return None


def to_uint8_frames(video: torch.Tensor) -> np.ndarray:
    """``[3, T, H, W]`` in [-1, 1] -> ``[T, H, W, 3]`` uint8."""
    import torch

    if video.dim() != 4 or video.shape[0] != 3:
        raise ValueError(f"expected one video [3, T, H, W], got {list(video.shape)}")
    frames = ((video.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return frames.permute(1, 2, 3, 0).cpu().numpy()


def write_video(video: torch.Tensor, path: str | Path, fps: int = 16, crf: int = 18,
                metadata: Mapping[str, Any] | None = None, overwrite: bool = False) -> Path:
    """Write one video ``[3, T, H, W]`` in [-1, 1] to ``path``; the format follows the extension
    (``OUTPUT_FORMATS``, or no extension for a folder of ``frame_00000.png``...). ``metadata`` (JSON-able:
    prompt, seed, settings) is stored in the file under ``METADATA_KEY``; ``read_metadata`` reads it back.
    Raises ValueError, before writing anything, for what ``output_problem`` refuses (``overwrite``: replace an
    existing file that this function did not write).
    """
    if isinstance(fps, bool) or not isinstance(fps, int) or fps < 1:
        raise ValueError(f"fps={fps!r}: must be an integer >= 1")
    problem = output_problem(path, overwrite)
    if problem:
        raise ValueError(problem)
    path = Path(path)
    text = json.dumps(dict(metadata), ensure_ascii=True) if metadata else None
    frames = to_uint8_frames(video)
    ext = path.suffix.lower()
    if is_frame_folder(path):
        _write_frames(frames, path, text)
    elif ext in VIDEO_FORMATS:
        _write_av(frames, path, fps, crf, text)
    else:
        _write_animated(frames, path, fps, text)
    return path


def _write_frames(frames: np.ndarray, path: Path, text: str | None) -> None:
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    path.mkdir(exist_ok=True)
    for old in path.iterdir():  # frames of an earlier run (output_problem allowed nothing else)
        old.unlink()
    info = PngInfo()
    if text:
        info.add_text(METADATA_KEY, text)
    info.add_text("Software", SOFTWARE)
    for i, f in enumerate(frames):
        Image.fromarray(f).save(path / FRAME_NAME.format(i), pnginfo=info)


def _write_av(frames: np.ndarray, path: Path, fps: int, crf: int, text: str | None) -> None:
    try:
        import av
    except ImportError as e:
        raise RuntimeError("writing video files needs PyAV: pip install av (or the 'video' extra)") from e
    codec = "libvpx-vp9" if path.suffix.lower() == ".webm" else "libx264"
    if codec not in av.codecs_available:
        codec = "libvpx-vp9" if codec != "libvpx-vp9" and "libvpx-vp9" in av.codecs_available else "mpeg4"
    # mp4/mov keep only a few standard tags unless told to write custom ones (ComfyUI's SaveVideo does the same)
    options = {"movflags": "use_metadata_tags"} if path.suffix.lower() in (".mp4", ".mov") else {}
    with av.open(str(path), mode="w", options=options) as container:
        if text:
            container.metadata[METADATA_KEY] = text
        stream = cast("av.VideoStream", container.add_stream(codec, rate=fps))
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        if codec == "libx264":
            stream.options = {"crf": str(crf)}
        for f in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def _write_animated(frames: np.ndarray, path: Path, fps: int, text: str | None) -> None:
    from PIL import Image

    images = [Image.fromarray(f) for f in frames]
    # GIF stores frame durations in 1/100 s: 1 (10 ms) is the shortest it can say
    duration = max(10, round(1000 / fps))
    if path.suffix.lower() == ".webp":
        exif = Image.Exif()
        exif[_EXIF_SOFTWARE] = SOFTWARE
        if text:
            exif[_EXIF_DESCRIPTION] = text
        extra: dict[str, Any] = {"lossless": False, "quality": 90, "exif": exif}
    else:
        extra = {"comment": text.encode("ascii")} if text else {}
    images[0].save(path, save_all=True, append_images=images[1:], duration=duration, loop=0, **extra)


def read_metadata(path: str | Path) -> dict | None:
    """The settings ``write_video`` stored in ``path`` (a video, webp, gif, PNG frame or frames folder), or None
    when it holds none (or something other than a JSON object). Raises ``ValueError`` or ``OSError`` for a file
    that cannot be read (a decompression bomb included)."""
    path = Path(path)
    text = None
    if path.is_dir():
        first = sorted(p for p in path.iterdir() if _FRAME_RE.fullmatch(p.name))
        path = first[0] if first else path
    ext = path.suffix.lower()
    if ext in VIDEO_FORMATS:
        import av

        with av.open(str(path)) as container:
            tags = {k.lower(): v for k, v in container.metadata.items()}  # matroska upper-cases tag names
        text = tags.get(METADATA_KEY)
    elif ext in (".webp", ".gif", ".png"):
        text = _image_comment(path, ext)
    if not text or not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _image_comment(path: Path, ext: str) -> Any:
    """The metadata text of a webp (EXIF description), gif (comment) or PNG (text chunk); no pixels decoded."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            if ext == ".webp":
                return im.getexif().get(_EXIF_DESCRIPTION)
            if ext == ".gif":
                raw = im.info.get("comment")
                return raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
            return im.info.get(METADATA_KEY)  # PNG text chunks
    except Image.DecompressionBombError as e:
        raise ValueError(f"{path}: image too large to read ({e})") from None
