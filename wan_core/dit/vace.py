"""The VACE branch of a Wan 2.1 VACE DiT (docs/vace.md section 1): VACE blocks that turn a VACE context into one
hint per hinted main block.

Facts (official Wan2.1 wan/modules/vace_model.py, diffusers ``WanVACETransformer3DModel``): the VACE context
``[B, 96, F, H, W]`` is patch-embedded by ``vace_patch_embedding`` (a Conv3d like ``patch_embedding``, with
bias); VACE block 0 adds ``before_proj(c)`` to the main stream's tokens after patch embedding, before any main
block; every VACE block is a plain Wan T2V block run on ``c`` with the main blocks' time modulation, RoPE and
text context, and its ``after_proj(c)`` is the hint of main block ``vace_layers[j]``, added after that whole
block times the scale. All hints are computed before the first main block.

Several VACE inputs (e.g. a reference and a control video with their own strengths) each run the VACE blocks
from their own context; their scaled hints add. A hint is kept in the compute dtype (the official code keeps
``after_proj``'s output in the model dtype), the scaled sum is formed in float32 first.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..attention.dispatch import AttentionDispatch
from .block import WanBlock
from .embeddings import patchify

# One VACE input after patch embedding: tokens ``[B, L, D]`` (in the weight dtype, before ``before_proj``) and its
# scale.
VaceTokens = tuple[torch.Tensor, float]


class VaceBlock(WanBlock):
    """A Wan T2V block with ``after_proj`` (its hint) and, for the first one, ``before_proj`` (Linear D -> D)."""

    def __init__(self, dim: int, ffn_dim: int, num_heads: int, qk_norm: bool, cross_attn_norm: bool, eps: float,
                 first: bool):
        super().__init__(dim, ffn_dim, num_heads, qk_norm, cross_attn_norm, eps)
        self.before_proj = nn.Linear(dim, dim) if first else None
        self.after_proj = nn.Linear(dim, dim)

    def forward(self, c: torch.Tensor, x: torch.Tensor | None, e0: torch.Tensor, ctx, freqs: torch.Tensor,  # type: ignore[override]
                attn: AttentionDispatch, layer: int, attention_cache=None) -> tuple[torch.Tensor, torch.Tensor]:
        """``c [B, L, D]`` -> ``(c, hint)``, both ``[B, L, D]`` float32; for the first block ``c`` is the VACE
        tokens after patch embedding and ``x`` the main tokens (official: ``c = before_proj(c) + x``). The other
        arguments as for ``WanBlock``. One module call, so hooks on the block (block swap) see both projections."""
        if self.before_proj is not None:
            assert x is not None  # the first VACE block starts the branch from the main tokens
            c = self.before_proj(c.to(self.before_proj.weight.dtype)).float() + x
        c = super().forward(c, e0, ctx, freqs, attn, layer, attention_cache)
        return c, self.after_proj(c.to(self.after_proj.weight.dtype)).float()


def vace_modules(config) -> tuple[nn.ModuleList | None, nn.Conv3d | None]:
    """``(vace_blocks, vace_patch_embedding)`` of a DiT config (both None when it has no VACE branch)."""
    c = config
    if not c.vace_layers:
        return None, None
    blocks = nn.ModuleList(VaceBlock(c.dim, c.ffn_dim, c.num_heads, c.qk_norm, c.cross_attn_norm, c.eps, j == 0)
                           for j in range(len(c.vace_layers)))
    return blocks, nn.Conv3d(c.vace_in_dim, c.dim, kernel_size=c.patch_size, stride=c.patch_size)


def _what(dit) -> str:
    name = str(getattr(dit, "source", "<model>"))
    return "this DiT" if name.startswith("<") else f"the DiT {name}"


def _pairs(vace_context, vace_scale) -> list[tuple[torch.Tensor, float]]:
    """``vace_context`` (a tensor or a list of ``(context, scale)``) -> ``[(context, scale * vace_scale), ...]``."""
    if isinstance(vace_context, torch.Tensor):
        items = [(vace_context, 1.0)]
    elif isinstance(vace_context, (list, tuple)) and vace_context and all(
            isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], torch.Tensor) for p in vace_context):
        items = [(p[0], p[1]) for p in vace_context]
    else:
        raise ValueError(f"vace_context must be a tensor [B, 96, F, H, W] or a non-empty list of (context, scale) "
                         f"pairs, got {type(vace_context).__name__}")
    out = []
    for c, s in items:
        try:
            scale = float(s) * float(vace_scale)
        except (TypeError, ValueError):
            raise ValueError(f"vace_scale must be a number, got {s!r} / {vace_scale!r}") from None
        if not math.isfinite(scale):
            raise ValueError(f"vace_scale must be finite, got {s!r} * {vace_scale!r}")
        out.append((c, scale))
    return out


def check_vace_inputs(dit, x: torch.Tensor, vace_context, vace_scale) -> list[tuple[torch.Tensor, float]]:
    """One-line ``ValueError`` unless ``vace_context`` fits ``dit`` and latents ``x [B, C, F, H, W]``: needed
    exactly when the model has VACE blocks; each context ``[B or a divisor of B, vace_in_dim, F, H, W]``.
    Returns ``[(context, scale), ...]`` (scales multiplied by ``vace_scale``)."""
    c = dit.config
    if not c.vace_layers:
        if vace_context is not None:
            raise ValueError(f"vace_context: {_what(dit)} has no VACE blocks; load a Wan VACE model "
                             f"(e.g. wan2.1_vace_1.3B) or leave vace_context out")
        return []
    if vace_context is None:
        raise ValueError(f"vace_context: {_what(dit)} is a VACE model and needs a VACE context [B, "
                         f"{c.vace_in_dim}, F, H, W] (wan_core.vace.vace_context; no frames or masks = an empty one)")
    pairs = _pairs(vace_context, vace_scale)
    b = x.shape[0]
    for i, (ctx, _) in enumerate(pairs):
        name = "vace_context" if len(pairs) == 1 else f"vace_context[{i}]"
        if (ctx.dim() != 5 or ctx.shape[1] != c.vace_in_dim or ctx.shape[2:] != x.shape[2:] or ctx.shape[0] < 1
                or b % ctx.shape[0]):
            raise ValueError(f"{name} has shape {list(ctx.shape)}; with latents {list(x.shape)} it must be "
                             f"[{b} (or a divisor), {c.vace_in_dim}, {', '.join(map(str, x.shape[2:]))}] (same "
                             f"frames, reference frames included, and size as the latents)")
    return pairs


def embed_vace(patch_embedding: nn.Conv3d, pairs: Sequence[tuple[torch.Tensor, float]], batch: int,
               patch_size: tuple[int, int, int]) -> list[VaceTokens]:
    """Checked contexts -> ``[(tokens [B, L, D], scale), ...]``, the tokens in the weight dtype; a context with
    fewer rows than ``batch`` is repeated (``[cond; uncond]`` batches share one context)."""
    w = patch_embedding.weight
    out = []
    for ctx, scale in pairs:
        ctx = ctx.to(device=w.device, dtype=w.dtype)
        tokens = F.linear(patchify(ctx, patch_size), w.flatten(1), patch_embedding.bias)
        out.append((tokens.repeat(batch // tokens.shape[0], 1, 1) if tokens.shape[0] != batch else tokens, scale))
    return out


def vace_rows(vace: list[VaceTokens] | None, rows: slice) -> list[VaceTokens] | None:
    """The batch rows ``rows`` of embedded VACE inputs (caches and CFG-parallel split a batch)."""
    return None if vace is None else [(tokens[rows], scale) for tokens, scale in vace]


def vace_hints(blocks: nn.ModuleList, x: torch.Tensor, e0: torch.Tensor, text: Sequence, freqs: torch.Tensor,
               attn: AttentionDispatch, vace: Sequence[VaceTokens], layers: Sequence[int], num_main: int,
               attention_cache=None) -> list[torch.Tensor]:
    """One hint ``[B, L, D]`` (compute dtype) per VACE block: ``sum_k scale_k * after_proj_j(c_k)``.

    ``x [B, L, D]`` the main tokens after patch embedding, ``e0`` and ``freqs`` as for the main blocks, ``text``
    one cross-attention context (or its ``(k, v)``) per VACE block, ``layers`` the hinted main blocks: VACE block
    j's attention calls carry main block ``layers[j]``'s index (backend overrides and skiparse follow the block
    it feeds). ``num_main``: the main block count; ``attention_cache`` (``(layer, h, compute) -> out``, see
    ``WanBlock``) sees VACE block j of input k as layer ``num_main + k * len(blocks) + j``, apart from the main
    blocks and from each other."""
    total: list[torch.Tensor] = []
    dtype = blocks[0].modulation.dtype
    for k, (tokens, scale) in enumerate(vace):
        c = tokens
        for j, block in enumerate(blocks):
            cache = None if attention_cache is None else _keyed(attention_cache, num_main + k * len(blocks) + j)
            c, hint = block(c, x if j == 0 else None, e0, text[j], freqs, attn, layers[j], cache)
            hint = hint * scale
            if k == 0:
                total.append(hint.to(dtype))
            else:
                total[j] = (total[j].float() + hint).to(dtype)
    return total


def _keyed(attention_cache, key: int):
    """``attention_cache`` seen under layer ``key`` whatever layer the block passes."""
    return lambda _layer, h, compute: attention_cache(key, h, compute)
