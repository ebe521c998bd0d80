"""Image-to-video conditioning for Wan 2.1 I2V / FLF2V (docs/i2v.md section 4): start image (and optional last
image) -> resized frames -> VAE-encoded conditioning latent + the official mask -> ``image_latent`` ``[1, 20, F, h, w]``
and the CLIP tokens, which the sampler passes to the DiT at every step.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import latent_format
from ..progress import InterruptFn, ProgressFn

__all__ = ["ImageCondition", "check_image_model", "check_image_request", "condition_mask", "conditioning_video",
           "image_condition", "load_image", "official_size", "resize_image"]

MASK_CHANNELS = TEMPORAL = latent_format.TEMPORAL_FACTOR  # 4: one mask channel per pixel frame of a latent frame


@dataclass(frozen=True)
class ImageCondition:
    """What an image-to-video DiT takes besides the noise and the text.

    image_latent: ``[1, 20, F, h, w]`` float32: 4 mask channels then the normalised conditioning latent.
    clip_tokens: ``[1, 257, C]`` (I2V) or ``[1, 514, C]`` (FLF2V), or None (models without ``img_emb``).
    width, height, frames: the video size it was built for (pixels, frames = 4n+1)."""

    image_latent: torch.Tensor
    clip_tokens: torch.Tensor | None
    width: int
    height: int
    frames: int
    last_image: bool = False

    @property
    def latent_shape(self) -> tuple[int, int, int]:
        """``(F, h, w)`` of the latents it goes with."""
        f, h, w = self.image_latent.shape[2:]
        return int(f), int(h), int(w)

    def check_latent(self, shape, name: str = "latent") -> None:
        """One-line ``ValueError`` when latents of ``shape`` ``[B, 16, F, h, w]`` do not fit this conditioning."""
        if tuple(shape[2:]) != self.latent_shape:
            f, h, w = self.latent_shape
            raise ValueError(f"{name} has shape {list(shape)} but the image conditioning was made for "
                             f"{self.width}x{self.height}, {self.frames} frames (latent {f}x{h}x{w}); use the same "
                             f"width, height and length for both")


def condition_mask(frames: int, lat_h: int, lat_w: int, last_image: bool = False, head: int = 1) -> torch.Tensor:
    """The official conditioning mask ``[1, 4, 1 + (frames-1)/4, lat_h, lat_w]`` (Wan2.1 wan/image2video.py lines
    210-217; wan/first_last_frame2video.py lines 231-238): one value per pixel frame (1 = given), frame 0 repeated 4x
    so 1 + 4(F-1) frames fill 4F slots, regrouped as 4 channels per latent frame. ``head`` > 1: the first ``head``
    pixel frames are given (a clip that continues a video, ``continuation.py``)."""
    per_frame = torch.zeros(frames)
    per_frame[:head] = 1
    if last_image:
        per_frame[-1] = 1
    slots = torch.cat([per_frame[:1].repeat(TEMPORAL), per_frame[1:]])  # [4F]
    mask = slots.view(-1, TEMPORAL).t()  # [4, F]: channel c of latent frame f = slot 4f + c
    return mask[None, :, :, None, None].expand(1, TEMPORAL, mask.shape[1], lat_h, lat_w).contiguous()


def _check_image(image: torch.Tensor, name: str) -> torch.Tensor:
    if not isinstance(image, torch.Tensor) or image.dim() not in (3, 4) or image.shape[-1] not in (3, 4):
        shape = list(image.shape) if isinstance(image, torch.Tensor) else type(image).__name__
        raise ValueError(f"{name}: expected an IMAGE [1, H, W, 3] in [0, 1], got {shape}")
    if image.dim() == 3:
        image = image[None]
    if image.shape[0] != 1:
        raise ValueError(f"{name}: one image expected, got a batch of {image.shape[0]} (pick one frame)")
    return image[..., :3].float()


def resize_image(image: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """IMAGE ``[1, H, W, 3]`` in [0, 1] -> frame ``[1, 3, height, width]`` in [-1, 1]: bicubic ``F.interpolate`` on
    [-1, 1] values, no crop, as the official code resizes the start image (wan/image2video.py lines 242-243)."""
    x = _check_image(image, "image").movedim(-1, 1) * 2 - 1
    if tuple(x.shape[2:]) == (height, width):
        return x
    return F.interpolate(x, size=(height, width), mode="bicubic", align_corners=False)


def conditioning_video(first: torch.Tensor, frames: int, last: torch.Tensor | None = None) -> torch.Tensor:
    """Frames ``[1, 3, H, W]`` in [-1, 1] -> the conditioning video ``[1, 3, frames, H, W]``: ``first`` at frame 0,
    zeros after, ``last`` (FLF2V) at the last frame (wan/image2video.py lines 240-248)."""
    video = first.new_zeros(1, 3, frames, *first.shape[2:])
    video[:, :, 0] = first[0]
    if last is not None:
        video[:, :, -1] = last[0]
    return video


def image_condition(vae, image: torch.Tensor, width: int, height: int, frames: int,
                    last_image: torch.Tensor | None = None, clip_vision=None, *, tiling: str = "auto",
                    progress: ProgressFn | None = None, interrupt: InterruptFn | None = None) -> ImageCondition:
    """Build the conditioning of an I2V / FLF2V run (docs/i2v.md section 4).

    ``image`` / ``last_image``: IMAGE ``[1, H, W, 3]`` in [0, 1] (any size: resized to ``width`` x ``height``).
    ``vae``: a ``WanVAE``; ``clip_vision``: a ``CLIPVisionEncoder`` (None for models without ``img_emb``); it sees
    the images as given, not resized (the official code encodes the original image). Returns an
    ``ImageCondition`` on the CPU in float32."""
    latent_format.check_video_size(width, height, frames)
    if last_image is not None and frames < 2:
        raise ValueError("a last image needs a video of at least 5 frames")
    first = resize_image(image, width, height)
    last = resize_image(_check_image(last_image, "last image"), width, height) if last_image is not None else None
    video = conditioning_video(first, frames, last)
    z = vae.encode(video.to(vae.device, vae.dtype), tiling=tiling, progress=progress, interrupt=interrupt)
    z = latent_format.to_model(z.float().cpu())
    mask = condition_mask(frames, z.shape[3], z.shape[4], last_image is not None)
    tokens = None
    if clip_vision is not None:
        shots = [image] + ([last_image] if last_image is not None else [])
        tokens = torch.cat([clip_vision.encode(_check_image(shot, "image")) for shot in shots]).float().cpu()
        tokens = tokens.reshape(1, -1, tokens.shape[-1])  # FLF2V: the first image's tokens, then the last's
    return ImageCondition(torch.cat([mask, z], dim=1), tokens, width, height, frames, last_image is not None)


def image_channels(dit) -> int:
    """Extra input channels of a DiT beyond its output (20 for image-to-video models, 0 for text-to-video)."""
    cfg = getattr(dit, "config", None)
    if cfg is None or not hasattr(cfg, "in_dim"):
        return 0
    return int(cfg.in_dim) - int(getattr(cfg, "out_dim", cfg.in_dim))


def check_image_model(dit, image: ImageCondition | None, latent_shape=None, name: str = "the diffusion model") -> None:
    """One-line ``ValueError`` before any sampling when ``image`` does not fit ``dit``: an image-to-video model
    without an image, an image for a text-to-video model, a Wan 2.1 I2V model without CLIP tokens, a conditioning
    made for another size than ``latent_shape`` ``[B, 16, F, h, w]``."""
    extra = image_channels(dit)
    if dit is None:
        return
    if image is None:
        if extra:
            raise ValueError(f"{name} is an image-to-video model: give it a start image (--image, or the "
                             f"WanCoreImageToVideo node); for text-to-video load a text-to-video model")
        return
    if not extra:
        raise ValueError(f"{name} is a text-to-video model; a start image needs an image-to-video model "
                         f"(e.g. wan2.1_i2v_480p_14B)")
    if image.image_latent.shape[1] != extra:
        raise ValueError(f"the image conditioning has {image.image_latent.shape[1]} channels but {name} takes "
                         f"{extra}; build it with the VAE of this model")
    cfg = dit.config
    if getattr(cfg, "image_dim", 0) and image.clip_tokens is None:
        raise ValueError(f"{name} (Wan 2.1 image-to-video) needs the CLIP vision encoding of the image: load "
                         f"clip_vision_h.safetensors (--clip-vision, or WanCoreCLIPVisionLoader)")
    if getattr(cfg, "image_dim", 0) and image.clip_tokens is not None:  # (models without img_emb ignore them)
        pos = getattr(cfg, "image_pos_len", 0)
        n = image.clip_tokens.shape[1]
        if pos and n != pos:
            raise ValueError(f"{name} is a first-last-frame model: it needs a last image as well as the start image")
        if not pos and image.last_image:
            raise ValueError(f"{name} takes one start image; a last image needs the first-last-frame model "
                             f"(wan2.1_flf2v_720p_14B)")
        if image.clip_tokens.shape[-1] != cfg.image_dim:
            raise ValueError(f"the CLIP vision tokens are {image.clip_tokens.shape[-1]} wide but {name} expects "
                             f"{cfg.image_dim}; use clip_vision_h (ViT-H/14)")
    if latent_shape is not None:
        image.check_latent(latent_shape)


def check_image_request(dit, last_image: bool, clip_vision: bool, name: str = "the diffusion model") -> None:
    """The checks of ``check_image_model`` that need no conditioning yet, so a bad request fails before the VAE
    encodes anything: an image for a text-to-video model, a Wan 2.1 I2V model without a CLIP vision encoder, a
    last image for a one-image model, an FLF2V model without a last image."""
    if not image_channels(dit):
        raise ValueError(f"{name} is a text-to-video model; a start image needs an image-to-video model "
                         f"(e.g. wan2.1_i2v_480p_14B)")
    cfg = dit.config
    if getattr(cfg, "image_dim", 0) and not clip_vision:
        raise ValueError(f"{name} (Wan 2.1 image-to-video) needs the CLIP vision encoding of the image: load "
                         f"clip_vision_h.safetensors (--clip-vision, or WanCoreCLIPVisionLoader)")
    pos = getattr(cfg, "image_pos_len", 0)
    if pos and not last_image:
        raise ValueError(f"{name} is a first-last-frame model: it needs a last image as well as the start image")
    if getattr(cfg, "image_dim", 0) and not pos and last_image:
        raise ValueError(f"{name} takes one start image; a last image needs the first-last-frame model "
                         f"(wan2.1_flf2v_720p_14B)")


def official_size(image_height: int, image_width: int, max_area: int = 832 * 480) -> tuple[int, int]:
    """``(width, height)`` the official I2V code picks for an image: the image's aspect ratio at about
    ``max_area`` pixels, each side floored to a multiple of 16 (Wan2.1 wan/image2video.py lines 184-193)."""
    ratio = image_height / image_width
    lat_h = int((max_area * ratio) ** 0.5 // 8 // 2 * 2)
    lat_w = int((max_area / ratio) ** 0.5 // 8 // 2 * 2)
    return max(lat_w, 2) * 8, max(lat_h, 2) * 8


def load_image(path) -> torch.Tensor:
    """An image file (PNG, JPEG, WebP, ...) -> IMAGE ``[1, H, W, 3]`` float32 in [0, 1] (alpha dropped, palette and
    greyscale converted to RGB; 16-bit and float greyscale kept at their full range). One-line ``ValueError``
    for a missing, unreadable or oversized file (more pixels than Pillow's decompression-bomb limit)."""
    from pathlib import Path

    p = Path(path).expanduser()
    if "\0" in str(p) or not p.is_file():
        raise ValueError(f"{p}: no such image file")
    try:
        from PIL import Image, UnidentifiedImageError
    except ModuleNotFoundError:
        raise ValueError("reading an image needs Pillow: pip install Pillow") from None
    limit = Image.MAX_IMAGE_PIXELS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # refused below, with the size
            with Image.open(p) as im:
                if limit is not None and im.width * im.height > limit:
                    raise Image.DecompressionBombError(f"{im.width}x{im.height}")
                return _image_tensor(im)
    except Image.DecompressionBombError:
        raise ValueError(f"{p}: image too large (more than {limit} pixels, the decompression-bomb limit); "
                         f"give a smaller image") from None
    except (UnidentifiedImageError, OSError, SyntaxError) as e:
        raise ValueError(f"{p}: not a readable image ({type(e).__name__})") from None


def _image_tensor(im) -> torch.Tensor:
    """An open PIL image -> ``[1, H, W, 3]`` float32 in [0, 1]. 16-bit ("I;16*", "I") and float ("F") greyscale
    are scaled from their own range: ``convert("RGB")`` would clip them to 255 (mid-grey read as white)."""
    import numpy as np

    if im.mode.startswith("I;16") or im.mode in ("I", "F"):
        grey = np.asarray(im).astype(np.float32)
        grey = grey if im.mode == "F" else grey / 65535.0
        data = torch.from_numpy(np.ascontiguousarray(grey)).clamp(0, 1)
        return data[None, :, :, None].expand(1, im.height, im.width, 3).contiguous()
    rgb = im.convert("RGB")
    data = torch.frombuffer(bytearray(rgb.tobytes()), dtype=torch.uint8).view(rgb.height, rgb.width, 3)
    return data.float().div(255)[None]
