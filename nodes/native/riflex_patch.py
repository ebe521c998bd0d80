"""The RIFLEx patch for ComfyUI's native Wan model (docs/long_video.md): one temporal RoPE frequency lowered so
that one period covers the generated length (``wan_core.dit.riflex``).

The native Wan model builds its rotations in ``rope_encode`` with ``self.rope_embedder`` (``EmbedND`` of
``comfy.ldm.flux.layers``): called with token positions ``ids [B, N, 3]`` (frame, row, column), it returns
``[B, 1, N, d/2, 2, 2]`` rotation matrices ``[[cos, -sin], [sin, cos]]``, the frame axis's ``d_t/2`` first.
:class:`RiflexEmbedder` stands in for it: the same output with the frame axis's frequency k replaced, the
length read from the positions of each call (a context window's call sees the window). It goes on a clone of
the MODEL as a ComfyUI object patch (``diffusion_model.rope_embedder``), which ComfyUI puts on the model while
that clone runs and takes off afterwards: nothing global, the input MODEL unchanged. Plain Python (no ``comfy``
import): tested without ComfyUI.
"""
from __future__ import annotations

import torch

from wan_core.config import DiTConfig
from wan_core.dit.riflex import RIFLEx, resolve_riflex

EMBEDDER = "diffusion_model.rope_embedder"  # the object patch's path (ComfyUI comfy/ldm/wan/model.py WanModel)


class RiflexEmbedder(torch.nn.Module):
    """``original`` (the native ``EmbedND``) with RIFLEx on the frame axis. ``setting``: ``"auto"`` or a k;
    ``config``: the model's widths (``auto`` reads its k and training length from ``wan_core.variants``)."""

    def __init__(self, original: torch.nn.Module, setting: str | int, config: DiTConfig):
        super().__init__()
        self.original = original
        self.setting = setting
        self.config = config

    def riflex_for(self, ids: torch.Tensor) -> RIFLEx | None:
        """The RIFLEx of a call with positions ``ids [B, N, 3]``: length = the frames the positions span."""
        frames = ids[..., 0]
        length = int(round(float(frames.max() - frames.min()))) + 1 if frames.numel() else 1
        return resolve_riflex(self.setting, self.config, length)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out = self.original(ids)
        riflex = self.riflex_for(ids)
        if riflex is None:
            return out
        column = out[..., riflex.k - 1, :, :]  # [B, 1, N, 2, 2]: the frame axis's component k
        angle = ids[..., 0].to(torch.float64) * riflex.frequency  # [B, N]
        cos, sin = angle.cos(), angle.sin()
        rot = torch.stack([cos, -sin, sin, cos], dim=-1).reshape(column.shape)
        out = out.clone()
        out[..., riflex.k - 1, :, :] = rot.to(out.dtype)
        return out


def native_riflex_patch(model, setting: str | int, config: DiTConfig):
    """A clone of ``model`` (a ComfyUI ``ModelPatcher``) whose Wan model builds its RoPE with RIFLEx. A RIFLEx
    patch already on ``model`` is replaced, not stacked."""
    current = model.get_model_object(EMBEDDER)
    original = current.original if isinstance(current, RiflexEmbedder) else current
    patched = model.clone()
    patched.add_object_patch(EMBEDDER, RiflexEmbedder(original, setting, config))
    return patched
