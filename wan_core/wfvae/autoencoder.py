"""The loaded WF-VAE: validated, streamed, optionally tiled ``encode`` / ``decode`` (the Wan VAE's interface).

``encode(video [B,3,T,H,W] in [-1,1]) -> raw posterior mean [B, latent, 1+(T-1)/t, H/8, W/8]`` (no scale/shift:
``wan_core.wfvae.latent_format`` applies the release's); ``decode(raw latents) -> video`` (not clamped).
"""
from __future__ import annotations

import torch

from ..numerics import check_finite
from ..progress import InterruptFn, ProgressCounter, ProgressFn
from ..vae.tiling import pair
from .config import WFVAEConfig
from .latent_format import WFVAELatentFormat, latent_format
from .model import WFVAEModel
from .streaming import stream_decode, stream_encode, tiled_decode, tiled_encode

TILING_MODES = ("auto", "on", "off")


def check_video(video: torch.Tensor, cfg: WFVAEConfig) -> None:
    """[B, 3, 1 + k t, H, W] floating point, H and W multiples of 8."""
    if not isinstance(video, torch.Tensor) or video.dim() != 5 or video.shape[1] != 3:
        got = list(video.shape) if isinstance(video, torch.Tensor) else type(video).__name__
        raise ValueError(f"WF-VAE encode expects a video tensor [B, 3, T, H, W], got {got}")
    t, h, w = video.shape[2:]
    tf = cfg.temporal_factor
    if (t - 1) % tf:
        below = 1 + tf * ((t - 1) // tf)
        raise ValueError(f"this WF-VAE ({tf}x8x8) encodes 1 + {tf}k frames; got {t}, nearest valid: {below} or "
                         f"{below + tf}")
    if h % 8 or w % 8 or not h or not w:
        raise ValueError(f"WF-VAE encode: height and width must be multiples of 8, got {h}x{w}")
    if not video.is_floating_point():
        raise ValueError(f"WF-VAE encode expects a floating-point video in [-1, 1], got dtype {video.dtype}")
    check_finite(video, "WF-VAE encode input", "the frames are corrupt")


def check_latents(z: torch.Tensor, cfg: WFVAEConfig) -> None:
    """[B, latent, T', H', W'] floating point."""
    if not isinstance(z, torch.Tensor) or z.dim() != 5 or z.shape[1] != cfg.latent_dim:
        got = list(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__
        raise ValueError(f"WF-VAE decode expects raw latents [B, {cfg.latent_dim}, T, H, W], got {got}")
    if min(z.shape[2:]) < 1 or not z.is_floating_point():
        raise ValueError(f"WF-VAE decode expects non-empty floating-point latents, got {list(z.shape)} {z.dtype}")
    check_finite(z, "WF-VAE decode input", "the latents are corrupt")


class WFVAE:
    """A loaded WF-VAE. Results are float32 on the input's device; work runs on the model's device and dtype.

    ``tiling``: "off" (stream through time only), "on" (also spatial tiles of ``tile`` latents with ``overlap``),
    "auto" (tiles when the latent grid is larger than ``tile`` in either direction).
    """

    default_tile = 32  # latents (256 px)
    default_overlap = 8

    def __init__(self, model: WFVAEModel, source: str = "<model>"):
        self.model = model
        self.source = source

    @property
    def config(self) -> WFVAEConfig:
        return self.model.config

    @property
    def latent_format(self) -> WFVAELatentFormat:
        """Its latents' format (the release's scale/shift; the mark on its LATENT dicts)."""
        return latent_format(self.config)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device=None, dtype: torch.dtype | None = None) -> "WFVAE":
        self.model.to(device=device, dtype=dtype)
        return self

    def __repr__(self) -> str:
        return f"WFVAE({self.config.name}, dtype={self.dtype}, device={self.device}, source={self.source!r})"

    def _tiled(self, tiling: str, grid: tuple[int, int], tile, overlap) -> tuple[bool, tuple, tuple]:
        if tiling not in TILING_MODES:
            raise ValueError(f"tiling must be one of {TILING_MODES}, got {tiling!r}")
        tile = pair(self.default_tile if tile is None else tile, "tile")
        overlap = pair(self.default_overlap if overlap is None else overlap, "overlap")
        big = grid[0] > tile[0] or grid[1] > tile[1]
        return tiling == "on" or (tiling == "auto" and big), tile, overlap

    def encode(self, video: torch.Tensor, tiling: str = "auto", tile=None, overlap=None,
               progress: ProgressFn | None = None, interrupt: InterruptFn | None = None) -> torch.Tensor:
        """``video`` [B, 3, 1 + k t, H, W] in [-1, 1] -> raw mean [B, latent, 1 + k, H/8, W/8] float32."""
        check_video(video, self.config)
        b, _, t, h, w = video.shape
        out = torch.zeros(b, self.config.latent_dim, self.config.latent_frames(t), h // 8, w // 8,
                          device=video.device)
        tiled, tile, overlap = self._tiled(tiling, (h // 8, w // 8), tile, overlap)
        with torch.no_grad():
            if tiled:
                return tiled_encode(self.model, video, out, tile, overlap, progress, interrupt)

            def sink(b: int, i: int, mu: torch.Tensor) -> None:
                out[b:b + 1, :, i:i + 1].copy_(mu)

            stream_encode(self.model, video, sink, ProgressCounter(progress, b * out.shape[2]), interrupt)
        return out

    def decode(self, z: torch.Tensor, tiling: str = "auto", tile=None, overlap=None,
               progress: ProgressFn | None = None, interrupt: InterruptFn | None = None) -> torch.Tensor:
        """Raw latents [B, latent, T', H', W'] -> video [B, 3, 1 + t(T'-1), 8H', 8W'] float32 (not clamped)."""
        check_latents(z, self.config)
        b, _, t, h, w = z.shape
        out = torch.zeros(b, 3, self.config.video_frames(t), 8 * h, 8 * w, device=z.device)
        tiled, tile, overlap = self._tiled(tiling, (h, w), tile, overlap)
        with torch.no_grad():
            if tiled:
                out = tiled_decode(self.model, z, out, tile, overlap, progress, interrupt, self.source)
            else:
                def sink(b: int, t0: int, frames: torch.Tensor) -> None:
                    out[b:b + 1, :, t0:t0 + frames.shape[2]].copy_(frames)

                stream_decode(self.model, z, sink, ProgressCounter(progress, b * t), interrupt, self.source)
        return out
