"""Wan 2.2 A14B: two experts of one architecture as one model (docs/wan22.md sections 1 and 4).

``WanMoE(high, low, boundary)`` is called like one DiT: ``moe(x, t, context)`` runs the high-noise expert for
timesteps ``t >= boundary * 1000`` and the low-noise one below (Wan2.2 wan/text2video.py lines 186-191 and
306, 342-344; diffusers' ``WanPipeline`` with ``transformer_2`` + ``boundary_ratio`` does the same).
``experts(model)`` lists the experts of any model (one, unnamed, for a plain DiT), so code that patches, swaps
or guides experts has one loop instead of a branch.
"""
from __future__ import annotations

from typing import cast

import torch
import torch.nn as nn

from ..variants import NUM_TRAIN_TIMESTEPS, T2V_A14B

EXPERTS = ("high", "low")


def is_moe(model) -> bool:
    return isinstance(model, WanMoE)


def _describe(model) -> str:
    source = str(getattr(model, "source", "") or "")
    return source.rsplit("/", 1)[-1] if source and not source.startswith("<") else type(model).__name__


class WanMoE(nn.Module):
    """Two experts of one architecture: ``high_noise`` for ``t >= boundary * 1000``, ``low_noise`` below.

    ``guidance``: ``(high, low)`` classifier-free guidance scales, or None for the sampler's one for both.
    ``offload_device``: when set (e.g. "cpu" while sampling on a GPU that cannot hold both experts), the
    inactive expert is moved there at the switch and only the active one stays on the compute device.
    """

    def __init__(self, high: nn.Module, low: nn.Module, boundary: float = T2V_A14B.boundary,
                 guidance: tuple[float, float] | None = None, offload_device: torch.device | str | None = None):
        super().__init__()
        check_experts(high, low)
        if not 0.0 < float(boundary) < 1.0:
            raise ValueError(f"boundary={boundary!r}: must lie between 0 and 1 (a fraction of the 1000 training "
                             f"timesteps; T2V-A14B 0.875, I2V-A14B 0.9)")
        if guidance is not None and not all(0 <= float(g) < float("inf") for g in guidance):
            raise ValueError(f"guidance={guidance!r}: per-expert guidance scales must be finite numbers >= 0")
        self.high_noise = high
        self.low_noise = low
        self.boundary = float(boundary)
        self.guidance = None if guidance is None else (float(guidance[0]), float(guidance[1]))
        self.offload_device = offload_device
        self.source = f"{getattr(high, 'source', '<model>')} + {getattr(low, 'source', '<model>')}"

    @property
    def config(self):
        return self.high_noise.config

    @property
    def dtype(self) -> torch.dtype:
        return cast(torch.dtype, self.high_noise.dtype)

    @property
    def device(self) -> torch.device:
        return cast(torch.device, self.high_noise.device)

    @property
    def boundary_timestep(self) -> float:
        return self.boundary * NUM_TRAIN_TIMESTEPS

    def expert_name(self, t: float) -> str:
        """"high" when ``t >= boundary * 1000`` (official comparison, text2video.py line 186), else "low"."""
        return "high" if float(t) >= self.boundary_timestep else "low"

    def expert(self, name: str) -> nn.Module:
        return self.high_noise if name == "high" else self.low_noise

    def guidance_for(self, name: str, default: float) -> float:
        return default if self.guidance is None else self.guidance[EXPERTS.index(name)]

    def activate(self, name: str, device: torch.device | str | None = None) -> nn.Module:
        """Make expert ``name`` ready on ``device`` (default: where the other one is) and, with
        ``offload_device``, move the other one there. Returns the expert."""
        from ..memory.offload import move  # a block-swapped expert moves its resident parts only

        active, other = self.expert(name), self.expert("low" if name == "high" else "high")
        target = torch.device(device) if device is not None else cast(torch.device, other.device)
        if self.offload_device is not None:
            move(other, self.offload_device)
        if getattr(active, "device", target) != target:
            move(active, target)
        return active

    def forward(self, x: torch.Tensor, t, context, **kwargs) -> torch.Tensor:
        """``x [B, C, F, H, W]``, ``t`` scalar, ``[B]`` or ``[B, L]``: the expert of the largest timestep."""
        t_max = float(torch.as_tensor(t).max())
        return self.expert(self.expert_name(t_max))(x, t, context, **kwargs)


# what the two experts of one A14B model share: the latents and text they take and their architecture
_SHARED = (("in_dim", "latent channels in"), ("out_dim", "latent channels out"), ("text_dim", "text width"),
           ("patch_size", "patch size"), ("dim", "width"), ("ffn_dim", "feed-forward width"),
           ("num_heads", "attention heads"), ("num_layers", "blocks"),
           # Wan 2.2 VACE-Fun A14B: both experts carry the same VACE blocks (docs/vace.md section 1)
           ("vace_layers", "VACE-hinted blocks"), ("vace_in_dim", "VACE context channels"))


def experts_problem(a, b, high: str, low: str) -> str | None:
    """One line saying how the configs ``a`` (high-noise expert ``high``) and ``b`` (``low``) cannot be one
    A14B pair, or None (also None when a config is unknown). Used on loaded models and on file headers."""
    if a is None or b is None:
        return None
    for field, what in _SHARED:
        va, vb = getattr(a, field, None), getattr(b, field, None)
        if va != vb:
            return (f"the high-noise expert {high} and the low-noise expert {low} differ in {what} ({va} vs {vb}); "
                    f"use the two experts of one Wan 2.2 A14B model")
    return None


def check_experts(high: nn.Module, low: nn.Module) -> None:
    """Both experts must take the same latents and text and share one architecture: one-line ``ValueError``
    naming both otherwise."""
    problem = experts_problem(getattr(high, "config", None), getattr(low, "config", None), _describe(high),
                              _describe(low))
    if problem:
        raise ValueError(problem)


def experts(model) -> list[tuple[str, nn.Module]]:
    """``[("high", high), ("low", low)]`` for a ``WanMoE``, ``[("", model)]`` for one DiT."""
    if isinstance(model, WanMoE):
        return [(name, model.expert(name)) for name in EXPERTS]
    return [("", model)]
