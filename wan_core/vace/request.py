"""The VACE request of one run: the ``(context, strength)`` inputs the DiT's VACE blocks take at every call and the
reference latent frames at the front of the latent (docs/vace.md section 3).

One input is the official recipe (one context, one scale). Several inputs (a reference and a control video with
their own strengths, chained nodes, chained native ``WanVaceToVideo``) each run the VACE blocks and their hints
add (``wan_core.dit.vace``). Inputs with fewer reference frames than the request get zero frames in front (all 96
channels 0: a reference slot holding the mean latent and no mask), so every context spans the same latent frames.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..dit.moe import experts
from ..numerics import check_finite
from .context import VACE_CHANNELS, VaceContext, vace_context

__all__ = ["VaceRequest", "build_request", "has_vace", "vace_models"]

Input = tuple[torch.Tensor, float]


@dataclass(frozen=True)
class VaceRequest:
    """``inputs``: ``(context [B or 1, 96, ref_frames + F, h, w] float32, strength)`` pairs, all of one shape
    but the batch; ``ref_frames``: reference latent frames at the front of the latent, dropped before decoding."""

    inputs: tuple[Input, ...]
    ref_frames: int = 0

    def __post_init__(self):
        if not self.inputs:
            raise ValueError("VACE request: expected at least one (context, strength) input")
        shapes = {tuple(c.shape[1:]) for c, _ in self.inputs}
        first = self.inputs[0][0]
        if first.dim() != 5 or first.shape[1] != VACE_CHANNELS or len(shapes) != 1:
            raise ValueError(f"VACE request: expected contexts [B, {VACE_CHANNELS}, F, h, w] of one shape, got "
                             f"{[list(c.shape) for c, _ in self.inputs]}")
        if not 0 <= self.ref_frames < first.shape[2]:
            raise ValueError(f"VACE request: ref_frames={self.ref_frames} must be from 0 to {first.shape[2] - 1} "
                             f"(the context has {first.shape[2]} latent frames)")
        bad = [s for _, s in self.inputs if not 0 <= float(s) < float("inf")]
        if bad:
            raise ValueError(f"VACE strength: expected finite numbers >= 0, got {bad}")

    @classmethod
    def of(cls, *parts: tuple[VaceContext, float]) -> "VaceRequest":
        """``(VaceContext, strength)`` parts -> one request, reference frames aligned at the front."""
        request = None
        for context, strength in parts:
            request = request.add(context, strength) if request else cls(((context.context, float(strength)),),
                                                                           context.ref_frames)
        if request is None:
            raise ValueError("VACE request: expected at least one (context, strength) part")
        return request

    def add(self, context: VaceContext, strength: float) -> "VaceRequest":
        """This request with one more input (its hints add); reference frames aligned by zero frames in front."""
        n = max(self.ref_frames, context.ref_frames)
        old = [(_pad(c, n - self.ref_frames), s) for c, s in self.inputs]
        new = (_pad(context.context, n - context.ref_frames), float(strength))
        if old[0][0].shape[2:] != new[0].shape[2:]:
            f, h, w = (int(v) for v in self.inputs[0][0].shape[2:])
            raise ValueError(f"VACE input: its video has {context.latent_shape[0] - context.ref_frames} latent frames "
                             f"of {context.latent_shape[1]}x{context.latent_shape[2]} but the inputs before it have "
                             f"{f - self.ref_frames} of {h}x{w} (h x w latents): give every VACE input the same "
                             f"width, height and length")
        return VaceRequest((*old, new), n)

    @property
    def latent_shape(self) -> tuple[int, int, int]:
        """``(ref_frames + F, h, w)`` of the latent sampled with this request."""
        f, h, w = self.inputs[0][0].shape[2:]
        return int(f), int(h), int(w)

    @property
    def batch(self) -> int:
        return max(int(c.shape[0]) for c, _ in self.inputs)

    def check(self, shape: Sequence[int], name: str = "latent") -> None:
        """One-line ``ValueError`` unless latents of ``shape`` ``[B, C, ref_frames + F, h, w]`` fit the contexts
        (each context's batch 1 or a divisor of B)."""
        if len(shape) != 5 or tuple(shape[2:]) != self.latent_shape:
            f, h, w = self.latent_shape
            raise ValueError(f"{name}: expected [B, C, {f}, {h}, {w}] ({self.ref_frames} reference + "
                             f"{f - self.ref_frames} video latent frames) to fit the VACE context, got {list(shape)}")
        bad = [int(c.shape[0]) for c, _ in self.inputs if shape[0] % c.shape[0]]
        if bad:
            raise ValueError(f"{name}: batch {shape[0]} is not a multiple of the VACE context batch {bad[0]}")
        for i, (c, _) in enumerate(self.inputs):
            check_finite(c, f"VACE context {i + 1} of {len(self.inputs)}", "make it again")

    def window(self, frames: Sequence[int]) -> "VaceRequest":
        """The contexts of the latent frames ``frames`` (a context window's indices, reference frames first)."""
        index = torch.tensor(list(frames), device=self.inputs[0][0].device)
        head = sum(1 for f in frames if f < self.ref_frames)
        return VaceRequest(tuple((c.index_select(2, index), s) for c, s in self.inputs), head)

    def dit_kwargs(self, device) -> dict:
        """What the DiT's forward takes: ``{"vace_context": [(context on device, strength), ...]}``."""
        return {"vace_context": [(c.to(device), s) for c, s in self.inputs]}

    def trim(self, latents: torch.Tensor) -> torch.Tensor:
        """Sampled latents ``[B, C, ref_frames + F, h, w]`` -> the video's ``[B, C, F, h, w]``."""
        self.check(latents.shape, "latents")
        return latents[:, :, self.ref_frames:]


def _pad(context: torch.Tensor, frames: int) -> torch.Tensor:
    """``frames`` zero latent frames in front of ``context`` ``[B, 96, F, h, w]``."""
    if frames <= 0:
        return context
    b, c, _, h, w = context.shape
    return torch.cat([context.new_zeros(b, c, frames, h, w), context], dim=2)


def vace_models(dit) -> list:
    """The DiTs that run a step (both experts of a ``WanMoE``, else ``dit`` itself)."""
    return [e for _, e in experts(dit)]


def has_vace(dit) -> bool:
    """True when ``dit`` (every expert of a ``WanMoE``) has VACE blocks (``config.vace_layers``)."""
    return dit is not None and all(bool(getattr(getattr(e, "config", None), "vace_layers", ())) for e in
                                   vace_models(dit))


def build_request(vae, frames: torch.Tensor | None = None, masks: torch.Tensor | None = None,
                  ref_images=None, *, scale: float = 1.0, ref_scale: float | None = None,
                  size: tuple[int, int, int] | None = None, batch: int | None = None, tiling: str = "auto",
                  progress=None, interrupt=None) -> VaceRequest:
    """Encode one run's VACE inputs (``vace_context``'s arguments) into a request.

    ``ref_scale`` None: the official recipe, one context at ``scale``. Otherwise, with reference images, two
    inputs whose hints add: the references over an empty video (grey, all generated) at ``ref_scale`` and the
    frames / masks (their reference slots zero) at ``scale``: separate strengths the official code does not offer."""
    if ref_scale is None or not ref_images or all(not r for r in ref_images if r is not None):
        ctx = vace_context(vae, frames, masks, ref_images, size=size, batch=batch, tiling=tiling, progress=progress,
                           interrupt=interrupt)
        return VaceRequest(((ctx.context, float(scale)),), ctx.ref_frames)
    video = frames if frames is not None else masks  # either sets the size
    if video is not None:
        b, _, t, h, w = video.shape
    elif size is not None:
        t, h, w = size
        b = batch if batch is not None else len(ref_images)
    else:
        raise ValueError("VACE: give frames or size=(frames, height, width)")
    refs = vace_context(vae, None, None, ref_images, size=(t, h, w), batch=b, tiling=tiling, interrupt=interrupt)
    given = frames is not None or masks is not None  # then they set the size and batch
    control = vace_context(vae, frames, masks, None, size=None if given else size, batch=None if given else b,
                           tiling=tiling, progress=progress, interrupt=interrupt)
    return VaceRequest.of((refs, ref_scale), (control, scale))
