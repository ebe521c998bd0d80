"""ComfyUI's native VACE conditioning (``WanVaceToVideo``'s ``vace_frames`` / ``vace_mask`` / ``vace_strength``
entries) to and from our 96-channel contexts (docs/vace_conditioning.md section 6).

ComfyUI 0.3.64 comfy_extras/nodes_wan.py ``WanVaceToVideo`` stores, per node in a chain (lists, appended):
``vace_frames`` ``[1, 32, F, h, w]`` *raw* VAE latents (inactive 16, reactive 16; reference frames first, their
reactive half the raw latent of zeros, i.e. the channel means), ``vace_mask`` ``[1, 64, F, h, w]`` and a float
``vace_strength``; comfy/model_base.py ``WAN21_Vace.extra_conds`` normalises each 16-channel block and appends
the mask, which is our layout. The trim count travels separately (``TrimVideoLatent``), it is not in the entries.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from .. import latent_format
from ..numerics import check_finite
from .context import LATENT_CHANNELS, VACE_CHANNELS
from .mask import MASK_CHANNELS

__all__ = ["NATIVE_KEYS", "from_native", "from_native_conditioning", "to_native"]

NATIVE_KEYS = ("vace_frames", "vace_mask", "vace_strength")
_BLOCK = latent_format.CHANNELS


def _blockwise(x: torch.Tensor, fn) -> torch.Tensor:
    return torch.cat([fn(x[:, i:i + _BLOCK]) for i in range(0, x.shape[1], _BLOCK)], dim=1)


def _check_pair(i: int, frames, mask) -> None:
    if not isinstance(frames, torch.Tensor) or frames.dim() != 5 or frames.shape[1] != LATENT_CHANNELS:
        got = list(frames.shape) if isinstance(frames, torch.Tensor) else type(frames).__name__
        raise ValueError(f"vace_frames[{i}]: expected raw latents [B, {LATENT_CHANNELS}, F, h, w], got {got}")
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dim() != 5 or mask.shape[1] != MASK_CHANNELS:
        got = list(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"vace_mask[{i}]: expected [B, {MASK_CHANNELS}, F, h, w], got {got}")
    if mask.shape[2:] != frames.shape[2:]:
        raise ValueError(f"vace_mask[{i}]: expected the frames' F, h, w {list(frames.shape[2:])}, got "
                         f"{list(mask.shape[2:])}")


def from_native(vace_frames: Sequence[torch.Tensor], vace_mask: Sequence[torch.Tensor] | None = None,
                vace_strength: Sequence[float] | None = None) -> list[tuple[torch.Tensor, float]]:
    """ComfyUI's lists -> ``[(context [B, 96, F, h, w] float32, strength), ...]``, one per chained node, as the
    DiT's ``vace_context`` list takes them. Missing masks are all ones and missing strengths 1.0 (ComfyUI's
    defaults in ``WAN21_Vace.extra_conds``); the batch stays as stored (1 from ``WanVaceToVideo``)."""
    frames = list(vace_frames)
    masks = list(vace_mask) if vace_mask is not None else [None] * len(frames)
    strengths = list(vace_strength) if vace_strength is not None else [1.0] * len(frames)
    if not frames or len(masks) != len(frames) or len(strengths) != len(frames):
        raise ValueError(f"vace_frames, vace_mask, vace_strength: expected lists of one equal length >= 1, got "
                         f"{len(frames)}, {len(masks)}, {len(strengths)}")
    out = []
    for i, (f, m, s) in enumerate(zip(frames, masks, strengths)):
        _check_pair(i, f, m)
        f = f.float()
        m = torch.ones_like(f[:, :1]).expand(-1, MASK_CHANNELS, -1, -1, -1) if m is None else m.to(f.device).float()
        context = torch.cat([_blockwise(f, latent_format.to_model), m], dim=1)
        check_finite(context, f"vace_frames[{i}] / vace_mask[{i}] (native VACE conditioning)")
        out.append((context, float(s)))
    return out


def from_native_conditioning(options: Mapping) -> list[tuple[torch.Tensor, float]]:
    """The options dict of one ComfyUI CONDITIONING entry -> ``from_native`` of its VACE entries; [] without."""
    if options.get("vace_frames") is None:
        return []
    return from_native(options["vace_frames"], options.get("vace_mask"), options.get("vace_strength"))


def to_native(context: torch.Tensor, strength: float = 1.0) -> dict[str, list]:
    """Our ``[B, 96, F, h, w]`` context -> ComfyUI's entries ``{"vace_frames": [raw 32 ch], "vace_mask": [64 ch],
    "vace_strength": [strength]}`` (append them to existing lists to chain)."""
    if not isinstance(context, torch.Tensor) or context.dim() != 5 or context.shape[1] != VACE_CHANNELS:
        got = list(context.shape) if isinstance(context, torch.Tensor) else type(context).__name__
        raise ValueError(f"context: expected a VACE context [B, {VACE_CHANNELS}, F, h, w], got {got}")
    raw = _blockwise(context[:, :LATENT_CHANNELS].float(), latent_format.from_model)
    mask = context[:, LATENT_CHANNELS:].float()
    return {"vace_frames": [raw], "vace_mask": [mask], "vace_strength": [float(strength)]}
