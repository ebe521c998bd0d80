"""Normalized Attention Guidance (NAG) for guidance-1 sampling: the negative prompt applied inside the DiT's
text cross-attention, where CFG (a second pass) is not run (docs/lora.md section 6).

Chen et al., "Normalized Attention Guidance: Universal Negative Guidance for Diffusion Models" (arXiv
2505.21179), per cross-attention output before its ``o`` projection, with ``Z+`` from the prompt and ``Z-``
from the negative prompt (same queries)::

    Z~ = s Z+ - (s - 1) Z-                       extrapolation, s = scale
    r  = |Z~|_1 / |Z+|_1  (per token, over the channels)
    Z^ = Z~ * min(r, tau) / r                    normalisation
    Z  = alpha Z^ + (1 - alpha) Z+               blend

Defaults: tau 2.5 and alpha 0.25 are the reference implementation's (ChenDarYen/Normalized-Attention-Guidance,
the ``nag_tau`` / ``nag_alpha`` defaults of its attention processors); scale 11 is what the most used Wan pack
ships for 4-step Wan (kijai/ComfyUI-WanVideoWrapper's NAG node); the reference's 25-step Wan 2.1 example uses 9.
Scale 1 is exactly no NAG (nothing is attached). Text-to-video DiTs only (the image cross-attention of I2V
models sums a second attention before ``o``, which this does not cover).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from ..attention.dispatch import AttentionCall
from ..dit.attention import CrossAttention, heads_first, heads_last
from ..dit.model import WanDiT

NAG_SCALE, NAG_TAU, NAG_ALPHA = 11.0, 2.5, 0.25


@dataclass(frozen=True)
class NAGConfig:
    """``scale`` >= 1 (1 = off), ``tau`` > 0, ``alpha`` in [0, 1] (see the module docstring)."""

    scale: float = NAG_SCALE
    tau: float = NAG_TAU
    alpha: float = NAG_ALPHA

    def __post_init__(self):
        for name, ok, want in (("scale", self.scale >= 1, ">= 1 (1 = off)"), ("tau", self.tau > 0, "> 0"),
                               ("alpha", 0 <= self.alpha <= 1, "in [0, 1]")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not ok:
                raise ValueError(f"NAG {name}={value!r}: must be a finite number {want}")

    @property
    def active(self) -> bool:
        return self.scale != 1


def nag_combine(z_pos: torch.Tensor, z_neg: torch.Tensor, config: NAGConfig) -> torch.Tensor:
    """The NAG attention output from ``z_pos``, ``z_neg`` ``[..., C]`` (same shape), in float32, cast back to
    ``z_pos``'s dtype."""
    zp, zn = z_pos.float(), z_neg.float()
    guided = config.scale * zp - (config.scale - 1) * zn
    ratio = guided.abs().sum(-1, keepdim=True) / zp.abs().sum(-1, keepdim=True).clamp_min(1e-12)
    guided = guided * (ratio.clamp(max=config.tau) / ratio.clamp_min(1e-12))
    return (config.alpha * guided + (1 - config.alpha) * zp).to(z_pos.dtype)


class NAGAttention:
    """Context manager: while active, every text cross-attention of ``dit`` returns the NAG output for the
    negative prompt ``negative`` (a list of ``[L_i, text_dim]`` embeddings, one or one per sample, or
    ``[B, L, text_dim]``). Attached from outside with forward hooks; the DiT is unchanged afterwards.

    The negative keys/values depend on the text only: they are computed once per block and batch size."""

    def __init__(self, dit: nn.Module, negative: Any, config: NAGConfig):
        self.dit, self.negative, self.config = dit, negative, config
        self._handles: list = []
        self._kv: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self._ctx: dict[tuple[int, int], torch.Tensor] = {}
        self._current: tuple[WanDiT, int] | None = None
        self._pending: dict[int, tuple] = {}

    def __enter__(self) -> "NAGAttention":
        if not self.config.active:
            return self
        crosses = [m for m in self.dit.modules() if isinstance(m, CrossAttention)]
        if any(type(m) is not CrossAttention for m in crosses):
            raise ValueError("NAG works on text-to-video models; this model has image cross-attention (I2V)")
        for m in self.dit.modules():
            if isinstance(m, WanDiT):
                self._handles.append(m.register_forward_pre_hook(self._on_dit))
        for m in crosses:
            self._handles.append(m.register_forward_pre_hook(self._on_cross))
            self._handles.append(m.o.register_forward_pre_hook(self._on_output(m)))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._kv.clear()
        self._ctx.clear()

    def _negative_for(self, batch: int):
        neg = self.negative
        if isinstance(neg, torch.Tensor):
            return neg if neg.shape[0] == batch else neg.expand(batch, *neg.shape[1:])
        neg = list(neg)
        return neg * batch if len(neg) == 1 else neg

    def _on_dit(self, module: nn.Module, args: tuple) -> None:
        self._current = (module, int(args[0].shape[0]))  # type: ignore[assignment]

    def _on_cross(self, module: nn.Module, args: tuple) -> None:
        h, _ctx, attn, layer = args[:4]
        self._pending[id(module)] = (h, attn, layer)

    def _negative_kv(self, module: CrossAttention, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        key = (id(module), batch)
        if key not in self._kv:
            assert self._current is not None, "NAG: a cross-attention ran outside a DiT forward"
            dit = self._current[0]
            ctx_key = (id(dit), batch)
            if ctx_key not in self._ctx:
                self._ctx[ctx_key] = dit.embed_text(self._negative_for(batch), batch)
            self._kv[key] = module.text_kv(self._ctx[ctx_key])
        return self._kv[key]

    def _on_output(self, module: CrossAttention):
        def hook(_o: nn.Module, args: tuple):
            z_pos = args[0]  # [B, L, D]: the prompt's attention output, heads merged
            h, attn, layer = self._pending.pop(id(module))
            q = heads_first(module.norm_q(module.q(h)), module.num_heads)
            k, v = self._negative_kv(module, h.shape[0])
            z_neg = heads_last(attn(q, k, v, AttentionCall("cross", layer)))
            return (nag_combine(z_pos, z_neg, self.config),)
        return hook
