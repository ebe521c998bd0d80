"""``load_vae`` and the WanVAE object: validated, streamed, optionally tiled encode/decode.

Implements docs/design.md section 4 (``vae.encode`` / ``vae.decode``) and docs/wan_spec.md sections 3.4 and 5
(official / ComfyUI / diffusers files, prefixes, detection, errors that say what a file is).
"""
from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from ..checkpoint import (
    CheckpointError,
    Source,
    check_shapes,
    describe_keys,
    is_quant_aux_key,
    materialize,
    open_checkpoint,
    stored_float_dtype,
    strip_prefix,
)
from ..numerics import check_finite
from ..progress import InterruptFn, ProgressCounter, ProgressFn
from .config import VAEConfig, detect_vae_config
from .keys import DIFFUSERS, PREFIXES, detect_key_format, to_official
from .model import WanVAEModel, build_model
from .streaming import stream_decode, stream_encode
from .auto_tile import plan_decode
from .tiling import pair, tiled_decode, tiled_encode

TILING_MODES = ("auto", "on", "off")


class VAETilingWarning(UserWarning):
    """Emitted once when ``tiling="auto"`` fell back to tiles after running out of memory."""


def default_is_oom(err: BaseException) -> bool:
    """True for out-of-memory errors (CUDA/XPU/MPS ``OutOfMemoryError``, CPU allocation failures)."""
    if isinstance(err, (torch.OutOfMemoryError, MemoryError)):
        return True
    msg = str(err).lower()
    return isinstance(err, RuntimeError) and ("out of memory" in msg or "can't allocate memory" in msg)


def nearest_valid_frames(frames: int, factor: int = 4) -> tuple[int, ...]:
    """The valid frame counts (``factor * n + 1``) just below and above ``frames``."""
    if frames < 1:
        return (1,)
    below = 1 + factor * ((frames - 1) // factor)
    return (below, below + factor) if below < frames else (below,)


def check_video(video: torch.Tensor, cfg: VAEConfig) -> None:
    """Validate an encode input: [B, 3, T, H, W], T = 4n+1, H and W multiples of 8, floating point."""
    if not isinstance(video, torch.Tensor):
        raise TypeError(f"VAE encode expects a torch.Tensor [B, 3, T, H, W], got {type(video).__name__}")
    if video.dim() != 5:
        hint = (" (a ComfyUI IMAGE [T, H, W, 3] is converted with wan_core.vae.image_to_video)"
                if video.dim() == 4 and video.shape[-1] in (3, 4) else "")
        raise ValueError(f"VAE encode expects a 5-D video [B, 3, T, H, W], got shape {list(video.shape)}{hint}")
    b, c, t, h, w = video.shape
    if c != cfg.in_channels:
        hint = " (channels-last? expected channels in dim 1)" if w == cfg.in_channels else ""
        raise ValueError(f"VAE encode expects {cfg.in_channels} channels (RGB) in dim 1 of [B, C, T, H, W], "
                         f"got {c} (shape {list(video.shape)}){hint}")
    tf = cfg.temporal_factor
    if t < 1 or (t - 1) % tf:
        near = " or ".join(str(n) for n in nearest_valid_frames(t, tf))
        raise ValueError(f"the Wan VAE encodes {tf}n+1 frames (1, 5, 9, ..., 81); got {t} frames, "
                         f"nearest valid: {near}")
    sf = cfg.spatial_factor
    bad = [(name, n) for name, n in (("height", h), ("width", w)) if n < sf or n % sf]
    if bad:
        sizes = " and ".join(f"{name} {n}" for name, n in bad)
        near = ", ".join(f"{name} {max(sf, n // sf * sf)}" for name, n in bad)
        raise ValueError(f"video {sizes} must be multiples of {sf} (nearest valid: {near})")
    if not video.is_floating_point():
        raise TypeError(f"VAE encode expects a floating-point video in [-1, 1], got dtype {video.dtype}")
    check_finite(video, "VAE encode input", "the frames are corrupt")


def check_latents(z: torch.Tensor, cfg: VAEConfig) -> None:
    """Validate a decode input: raw latents [B, z_dim, T', H', W'], floating point."""
    if not isinstance(z, torch.Tensor):
        raise TypeError(f"VAE decode expects a torch.Tensor [B, {cfg.z_dim}, T, H, W], got {type(z).__name__}")
    if z.dim() != 5:
        raise ValueError(f"VAE decode expects 5-D latents [B, {cfg.z_dim}, T, H, W], got shape {list(z.shape)}")
    if z.shape[1] != cfg.z_dim:
        hint = " (48 channels: Wan 2.2 5B latents, which need the Wan 2.2 VAE)" if z.shape[1] == 48 else ""
        raise ValueError(f"the Wan 2.1 VAE decodes {cfg.z_dim}-channel latents, got {z.shape[1]} channels "
                         f"(shape {list(z.shape)}){hint}")
    if min(z.shape[2:]) < 1:
        raise ValueError(f"VAE decode got empty latents (shape {list(z.shape)})")
    if not z.is_floating_point():
        raise TypeError(f"VAE decode expects floating-point latents, got dtype {z.dtype}")
    check_finite(z, "VAE decode input", "the latents are corrupt (a sampler or encoder upstream produced NaN/Inf)")


class WanVAE:
    """A loaded Wan 2.1 video VAE (docs/design.md section 4).

    ``encode(video [B,3,T,H,W] in [-1,1]) -> raw mu [B,16,1+(T-1)/4,H/8,W/8]``;
    ``decode(z raw latents) -> [B,3,1+4(T'-1),8H',8W'] in [-1,1]``. Both stream through time (memory flat in
    length) and can tile space (memory flat in resolution). Results are float32 on the input's device;
    the work runs on the model's device and dtype, one chunk at a time.
    Latents are raw (un-normalised), as in ComfyUI LATENTs; ``wan_core.latent_format`` normalises them.
    """

    default_tile = 32     # latent units (256 px), as diffusers' default tile
    default_overlap = 8   # latent units (64 px)
    min_tile = 8
    memory_budget: int | None = None  # bytes decode(tiling="auto") plans for; None: free CUDA memory / half the RAM

    def __init__(self, model: WanVAEModel, source: str = "<model>",
                 is_oom: Callable[[BaseException], bool] = default_is_oom):
        self.model = model
        self.source = source
        self.is_oom = is_oom  # injectable: decides which errors trigger the tiled fallback

    @property
    def config(self) -> VAEConfig:
        return self.model.config

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device=None, dtype: torch.dtype | None = None) -> "WanVAE":
        self.model.to(device=device, dtype=dtype)
        return self

    def __repr__(self) -> str:
        return f"WanVAE({self.config.name}, dtype={self.dtype}, device={self.device}, source={self.source!r})"

    # ---------------------------------------------------------------------------------------------- encode
    def encode(
        self,
        video: torch.Tensor,
        tiling: str = "auto",
        tile=None,
        overlap=None,
        progress: ProgressFn | None = None,
        interrupt: InterruptFn | None = None,
    ) -> torch.Tensor:
        """``video`` [B, 3, T, H, W] in [-1, 1], T = 4n+1, H, W multiples of 8 -> raw ``mu``
        [B, 16, n+1, H/8, W/8] float32 (no sampling, no normalisation).

        ``tiling``: "off" | "on" | "auto" (untiled, tiled after an out-of-memory error). ``tile`` /
        ``overlap`` in latent units (int or (h, w)). ``progress(done, total)`` is called per encoded chunk;
        ``interrupt()`` before each chunk (raise, or return True, to stop).
        """
        check_video(video, self.config)
        cfg = self.config
        b, _, t, h, w = video.shape
        shape = (b, cfg.z_dim, cfg.latent_frames(t), h // cfg.spatial_factor, w // cfg.spatial_factor)
        mu = self._with_tiling_policy(
            "encode", tiling, tile, overlap,
            lambda: self._encode_untiled(video, shape, progress, interrupt),
            lambda tile_, overlap_: self._encode_tiled(video, shape, tile_, overlap_, progress, interrupt))
        self._check_output(mu, "encode")
        return mu

    def _encode_untiled(self, video, shape, progress, interrupt) -> torch.Tensor:
        out = torch.empty(shape, dtype=torch.float32, device=video.device)

        def sink(b: int, i: int, mu: torch.Tensor) -> None:
            out[b:b + 1, :, i:i + 1].copy_(mu)

        stream_encode(self.model, video, sink, ProgressCounter(progress, shape[0] * shape[2]), interrupt)
        return out

    def _encode_tiled(self, video, shape, tile, overlap, progress, interrupt) -> torch.Tensor:
        out = torch.zeros(shape, dtype=torch.float32, device=video.device)
        return tiled_encode(self.model, video, out, tile, overlap, progress, interrupt)

    # ---------------------------------------------------------------------------------------------- decode
    def decode(
        self,
        z: torch.Tensor,
        tiling: str = "auto",
        tile=None,
        overlap=None,
        progress: ProgressFn | None = None,
        interrupt: InterruptFn | None = None,
    ) -> torch.Tensor:
        """Raw latents ``z`` [B, 16, T', H', W'] -> video [B, 3, 1 + 4(T'-1), 8H', 8W'] float32 in [-1, 1].

        Streams one latent frame at a time. ``tiling``: "auto" (default: untiled when the estimated peak fits
        the memory there is, else the largest tile that fits, see ``wan_core.vae.auto_tile``; on an
        out-of-memory error tiled with a warning naming the tile size), "on", "off"; ``tile`` / ``overlap`` in
        latent units (default 32 / 8; with "auto" a given tile caps the planned one).
        ``progress(done, total)`` per decoded chunk (x tiles); ``interrupt()`` before each
        chunk (raise, or return True, to stop).
        """
        check_latents(z, self.config)
        cfg = self.config
        b, _, t, h, w = z.shape
        sf = cfg.spatial_factor
        shape = (b, cfg.out_channels, cfg.video_frames(t), h * sf, w * sf)
        plan = plan_decode(self, z, tile, overlap) if tiling == "auto" else None  # None: untiled fits

        def untiled() -> torch.Tensor:
            return self._decode_untiled(z, shape, progress, interrupt)

        if plan is not None:  # the largest tile that fits (at most ``tile``); untiled is not tried
            tile, overlap = plan
        video = self._with_tiling_policy(
            "decode", tiling, tile, overlap, untiled if plan is None else None,
            lambda tile_, overlap_: self._decode_tiled(z, shape, tile_, overlap_, progress, interrupt))
        self._check_output(video, "decode")
        return video

    def _check_output(self, out: torch.Tensor, what: str) -> None:
        """Finite inputs and weights can still overflow inside (float16): say so instead of a black video."""
        check_finite(out, f"VAE {what} output of {Path(str(self.source)).name}",
                     f"the VAE overflowed in {str(self.dtype).replace('torch.', '')}; load it in bfloat16 or "
                     f"float32" if self.dtype == torch.float16 else "the VAE weights or its input are corrupt")

    def _decode_untiled(self, z, shape, progress, interrupt) -> torch.Tensor:
        out = torch.empty(shape, dtype=torch.float32, device=z.device)

        def sink(b: int, t: int, frames: torch.Tensor) -> None:
            out[b:b + 1, :, t:t + frames.shape[2]].copy_(frames)

        stream_decode(self.model, z, sink, ProgressCounter(progress, z.shape[0] * z.shape[2]), interrupt)
        return out

    def _decode_tiled(self, z, shape, tile, overlap, progress, interrupt) -> torch.Tensor:
        out = torch.zeros(shape, dtype=torch.float32, device=z.device)
        return tiled_decode(self.model, z, out, tile, overlap, progress, interrupt)

    # ---------------------------------------------------------------------------------------------- policy
    def _with_tiling_policy(self, what: str, tiling: str, tile, overlap, untiled, tiled) -> torch.Tensor:
        """"off": ``untiled()``; "on": ``tiled(tile, overlap)``; "auto": untiled (skipped when ``untiled`` is
        None), and after an error that ``self.is_oom`` accepts, tiled (tile halved on each further OOM, down to
        ``min_tile``) with one warning."""
        if tiling not in TILING_MODES:
            raise ValueError(f"tiling must be one of {TILING_MODES}, got {tiling!r}")
        tile = self.default_tile if tile is None else tile
        overlap = self.default_overlap if overlap is None else overlap
        pair(tile, "tile")  # validate before any work
        pair(overlap, "overlap")
        with torch.no_grad():
            if tiling == "off":
                return untiled()
            if tiling == "on":
                return tiled(tile, overlap)
            planned = tile if untiled is None else None  # untiled=None: it does not fit, start with these tiles
            try:
                if planned is None:
                    return untiled()
            except Exception as err:  # noqa: BLE001 - filtered by the OOM predicate
                if not self.is_oom(err):
                    raise
            # outside the except block: the failed attempt's tensors are released with its traceback
            while True:
                self._release_memory()
                try:
                    out = tiled(tile, overlap)
                    break
                except Exception as err:  # noqa: BLE001
                    th, tw = pair(tile, "tile")
                    if not self.is_oom(err) or max(th, tw) <= self.min_tile:
                        raise
                tile = (max(self.min_tile, th // 2), max(self.min_tile, tw // 2))
                oh, ow = pair(overlap, "overlap")
                overlap = (min(oh, tile[0] // 4), min(ow, tile[1] // 4))
            if tile == planned:
                return out  # the planned tiles fitted: nothing went wrong
            th, tw = pair(tile, "tile")
            oh, ow = pair(overlap, "overlap")
            sf = self.config.spatial_factor
            warnings.warn(
                f"VAE {what} ran out of memory untiled; used spatial tiles of {th}x{tw} latents "
                f"({th * sf}x{tw * sf} px) with overlap {oh}x{ow} latents",
                VAETilingWarning, stacklevel=3,
            )
            return out

    def _release_memory(self) -> None:
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def _default_dtype(sd) -> torch.dtype:
    stored = stored_float_dtype(sd)
    return stored if stored in (torch.float32, torch.float16, torch.bfloat16) else torch.float32


def load_vae(src: Source, dtype: torch.dtype | None = None, device: torch.device | str = "cpu") -> WanVAE:
    """Load a Wan 2.1 VAE: ``Wan2.1_VAE.pth``, ComfyUI's ``wan_2.1_vae.safetensors`` (official names,
    optionally prefixed ``vae.`` / ``first_stage_model.``, e.g. inside an all-in-one checkpoint), a diffusers
    ``AutoencoderKLWan`` folder (or a pipeline folder with ``vae/``), or an in-memory state dict.

    ``dtype``: None keeps the stored precision (fp8 files: float32). Raises CheckpointError for anything that
    is not a Wan 2.1 VAE, saying what it looks like instead.
    """
    sd = strip_prefix(open_checkpoint(src, subfolder="vae"), PREFIXES)
    fmt = detect_key_format(sd)
    if fmt is None:
        raise CheckpointError(f"{sd.source}: not a Wan 2.1 VAE; this file looks like {describe_keys(sd)}")
    if fmt == DIFFUSERS:
        sd = to_official(sd)
    shapes = {k: tuple(sd.shape(k)) for k in sd if not is_quant_aux_key(k)}  # fp8 scales are not parameters
    cfg = detect_vae_config(shapes, sd.source)
    model = build_model(cfg, "meta")
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    check_shapes(shapes, expected, sd.source, f"the Wan VAE layout detected from it ({cfg.name}: {cfg})")
    tensors = materialize(sd, dtype=dtype or _default_dtype(sd), device=device)
    model.load_state_dict(tensors, strict=True, assign=True)
    model.eval().requires_grad_(False)
    return WanVAE(model, source=sd.source)
