"""``vace_context``: frames, masks and reference images -> the 96-channel VACE context the DiT's VACE blocks take,
equal to the official recipe (Wan2.1 wan/vace.py ``vace_encode_frames``, ``vace_encode_masks``, ``vace_latent``;
docs/vace_conditioning.md sections 1-3).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import latent_format
from ..progress import InterruptFn, ProgressFn
from .checks import ReferenceImages, check_references, check_vae, resolve_video
from .mask import MASK_CHANNELS, fold_mask, latent_frames, reactive_mask
from .reference import fit_reference

__all__ = ["LATENT_CHANNELS", "VACE_CHANNELS", "VaceContext", "vace_context"]

LATENT_CHANNELS = 2 * latent_format.CHANNELS  # 32: inactive latents, then reactive latents
VACE_CHANNELS = LATENT_CHANNELS + MASK_CHANNELS  # 96: the ``vace_patch_embedding`` input


@dataclass(frozen=True)
class VaceContext:
    """The VACE conditioning of one request.

    context: ``[B, 96, ref_frames + F, h, w]`` float32: channels 0-15 the normalised latents of the inactive part
    ``frames * (1 - m)``, 16-31 of the reactive part ``frames * m`` (``m = mask > 0.5``), 32-95 the folded mask;
    the first ``ref_frames`` latent frames are the reference images (latent, 16 zero channels, zero mask).
    ref_frames: latent frames to drop from the sampled latents before decoding (the trim count)."""

    context: torch.Tensor
    ref_frames: int

    @property
    def latent_shape(self) -> tuple[int, int, int]:
        """``(F, h, w)`` of the noise latent this context goes with (reference frames included)."""
        f, h, w = self.context.shape[2:]
        return int(f), int(h), int(w)

    @property
    def video_frames(self) -> int:
        """Pixel frames of the video part (``1 + 4 (F - 1 - ref_frames)``)."""
        return 1 + (self.latent_shape[0] - self.ref_frames - 1) * latent_format.TEMPORAL_FACTOR

    def trim(self, latents: torch.Tensor) -> torch.Tensor:
        """Sampled latents ``[B, C, ref_frames + F, h, w]`` -> ``[B, C, F, h, w]`` (reference frames dropped)."""
        self.check_latent(latents.shape, "latents")
        return latents[:, :, self.ref_frames:]

    def check_latent(self, shape, name: str = "latent") -> None:
        """One-line ``ValueError`` when latents of ``shape`` ``[B, 16, F, h, w]`` do not fit this context."""
        if len(shape) != 5 or tuple(shape[2:]) != self.latent_shape:
            f, h, w = self.latent_shape
            raise ValueError(f"{name}: expected [B, C, {f}, {h}, {w}] to fit the VACE context ({self.ref_frames} "
                             f"reference frames + {f - self.ref_frames} video frames), got {list(shape)}")


class _Stages:
    """One ``progress(done, total)`` over several VAE encodes (each reports its own count)."""

    def __init__(self, fn: ProgressFn | None, total: int):
        self.fn, self.total, self.offset = fn, total, 0

    def stage(self, units: int) -> ProgressFn | None:
        if self.fn is None:
            return None
        fn, offset, total = self.fn, self.offset, self.total
        self.offset += units
        return lambda done, _total: fn(offset + done, total)


def _encode(vae, video: torch.Tensor, tiling: str, progress, interrupt) -> torch.Tensor:
    """Normalised latents ``(mu - mean) / std`` (what the official ``WanVAE.encode`` returns) on ``video``'s device."""
    mu = vae.encode(video.to(vae.device, vae.dtype), tiling=tiling, progress=progress, interrupt=interrupt)
    return latent_format.to_model(mu.to(video.device, torch.float32))


def vace_context(vae, frames: torch.Tensor | None = None, masks: torch.Tensor | None = None,
                 ref_images: ReferenceImages | None = None, *, size: tuple[int, int, int] | None = None,
                 batch: int | None = None, tiling: str = "auto", progress: ProgressFn | None = None,
                 interrupt: InterruptFn | None = None) -> VaceContext:
    """The VACE context of ``frames`` ``[B, 3, T, H, W]`` in [-1, 1] (T = 4n+1; H, W multiples of 16), ``masks``
    ``[B, 1, T, H, W]`` in [0, 1] (1 = generate) and ``ref_images`` (one entry per batch item: a list of
    ``[3, H', W']`` in [-1, 1], fitted onto the H x W canvas when of another size).

    No frames: a grey video (zeros); no masks: all ones (everything generated); neither: give ``size`` =
    ``(frames, height, width)`` (and ``batch``, default ``len(ref_images)`` or 1). ``vae``: a Wan 2.1 ``WanVAE``.
    Returns a ``VaceContext`` (``context`` ``[B, 96, n_ref + T', H/8, W/8]`` float32 on the inputs' device, and the
    trim count ``ref_frames``). Bad input raises a one-line ``ValueError`` before any encoding; ``progress`` counts
    encoded latent frames over all encodes, ``interrupt`` is asked before each.
    """
    check_vae(vae)
    n = batch if batch is not None else (len(ref_images) if ref_images is not None else 1)
    frames, masks = resolve_video(frames, masks, size, n)
    b, _, t, h, w = frames.shape
    refs = check_references(ref_images, b, t)
    n_ref, f_lat = len(refs[0]), latent_frames(t)
    stages = _Stages(progress, 2 * b * f_lat + b * n_ref)

    m = reactive_mask(masks)
    # inactive and reactive parts in one batch: one streamed encode, each item encoded on its own as officially
    parts = _encode(vae, torch.cat([frames * (1 - m), frames * m]), tiling, stages.stage(2 * b * f_lat), interrupt)
    latents = torch.cat([parts[:b], parts[b:]], dim=1)  # [B, 32, F, h, w]
    mask = fold_mask(masks)  # [B, 64, F, h, w]
    if n_ref:
        fitted = [fit_reference(img.to(frames.device), h, w) for item in refs for img in item]
        images = torch.stack(fitted)  # [B*n_ref, 3, H, W]
        ref = _encode(vae, images[:, :, None], tiling, stages.stage(b * n_ref), interrupt)  # [B*n_ref, 16, 1, h, w]
        ref = ref.view(b, n_ref, *ref.shape[1:]).squeeze(3).transpose(1, 2)  # [B, 16, n_ref, h, w]
        ref = torch.cat([ref, torch.zeros_like(ref)], dim=1)
        latents = torch.cat([ref, latents], dim=2)
        mask = torch.cat([mask.new_zeros(b, MASK_CHANNELS, n_ref, *mask.shape[3:]), mask], dim=2)
    return VaceContext(torch.cat([latents, mask], dim=1), n_ref)
