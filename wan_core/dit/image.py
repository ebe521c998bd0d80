"""Image conditioning layers of the Wan 2.1 I2V / FLF2V DiT (docs/i2v.md section 2): the CLIP-token MLP
``img_emb`` and the cross-attention with a second key/value set for the image tokens.

Facts from the official code (Wan-Video/Wan2.1 ``wan/modules/model.py``): ``MLPProj`` (lines 350-369) is
LayerNorm(1280), Linear(1280, 1280), GELU (exact), Linear(1280, dim), LayerNorm(dim), with the FLF2V-only
``emb_pos`` [1, 514, 1280] added before it; ``WanI2VCrossAttention`` (lines 187-227) attends the same queries
to the text tokens and, separately (its own softmax), to the image tokens through ``k_img`` / ``v_img`` /
``norm_k_img``, sums both results and applies ``o``. The image rows come first in the context (line 563).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..attention.dispatch import AttentionCall, AttentionDispatch
from .attention import CrossAttention, RMSNorm, heads_first, heads_last


class ImageEmbedding(nn.Module):
    """``img_emb``: CLIP penultimate states ``[B, N, clip_dim]`` -> image context ``[B, N, dim]``.

    ``pos_len`` > 0 (FLF2V: 514 = 2 x 257) adds the learned ``emb_pos [1, pos_len, clip_dim]``; the input then
    has the first image's tokens followed by the last image's, ``N = pos_len``."""

    def __init__(self, clip_dim: int, dim: int, pos_len: int = 0):
        super().__init__()
        self.proj = nn.Sequential(nn.LayerNorm(clip_dim), nn.Linear(clip_dim, clip_dim), nn.GELU(),
                                  nn.Linear(clip_dim, dim), nn.LayerNorm(dim))
        self.emb_pos = nn.Parameter(torch.zeros(1, pos_len, clip_dim)) if pos_len else None

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens [B, N, clip_dim]`` -> ``[B, N, dim]`` in the weight dtype (LayerNorms in float32)."""
        norm_in, lin1, _, lin2, norm_out = self.proj
        assert isinstance(norm_in, nn.LayerNorm) and isinstance(norm_out, nn.LayerNorm)
        assert isinstance(lin1, nn.Linear) and isinstance(lin2, nn.Linear)
        x = tokens.float()
        if self.emb_pos is not None:
            if x.shape[1] != self.emb_pos.shape[1]:
                raise ValueError(f"clip_tokens: this first-last-frame model takes {self.emb_pos.shape[1]} CLIP tokens "
                                 f"(the first image's then the last image's), got {x.shape[1]}")
            x = x + self.emb_pos.float()
        dtype = lin1.weight.dtype
        x = F.layer_norm(x, norm_in.normalized_shape, norm_in.weight.float(), norm_in.bias.float(), norm_in.eps)
        x = lin2(F.gelu(lin1(x.to(dtype))))
        x = F.layer_norm(x.float(), norm_out.normalized_shape, norm_out.weight.float(), norm_out.bias.float(),
                         norm_out.eps)
        return x.to(dtype)


class ImageCrossAttention(CrossAttention):
    """``cross_attn`` of an I2V block: the text attention of ``CrossAttention`` plus an attention over the
    image rows with ``k_img`` / ``v_img`` / ``norm_k_img``; the two outputs are summed before ``o``.

    The context is ``[B, N_img + text_len, D]`` (image rows first, as the official model concatenates them);
    ``text_len`` splits it."""

    def __init__(self, dim: int, num_heads: int, qk_norm: bool = True, eps: float = 1e-6, text_len: int = 512):
        super().__init__(dim, num_heads, qk_norm, eps)
        self.text_len = text_len
        self.k_img = nn.Linear(dim, dim)
        self.v_img = nn.Linear(dim, dim)
        self.norm_k_img = RMSNorm(dim, eps) if qk_norm else nn.Identity()

    def text_kv(self, ctx: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        """``ctx [B, N_img + text_len, D]`` -> ``(k, v, k_img, v_img)``, each ``[B, N, rows, d]``."""
        if ctx.shape[1] <= self.text_len:
            raise ValueError("this image-to-video model needs CLIP image tokens in its context (clip_tokens=...)")
        n = self.num_heads
        img, txt = ctx[:, : -self.text_len], ctx[:, -self.text_len:]
        k, v = super().text_kv(txt)
        return k, v, heads_first(self.norm_k_img(self.k_img(img)), n), heads_first(self.v_img(img), n)

    def forward(self, h: torch.Tensor, ctx, attn: AttentionDispatch, layer: int) -> torch.Tensor:
        """``h [B, L, D]``, ``ctx [B, N_img + text_len, D]`` or its precomputed ``text_kv(ctx)`` -> ``[B, L, D]``."""
        n = self.num_heads
        q = heads_first(self.norm_q(self.q(h)), n)
        k, v, k_img, v_img = ctx if isinstance(ctx, tuple) else self.text_kv(ctx)
        out = attn(q, k, v, AttentionCall("cross", layer)) + attn(q, k_img, v_img, AttentionCall("cross", layer))
        return self.o(heads_last(out))


def check_image_inputs(dit, x: torch.Tensor, image_latent: torch.Tensor | None,
                       clip_tokens: torch.Tensor | None) -> None:
    """One-line ``ValueError`` when the image inputs do not fit the model: ``image_latent`` needed exactly when the
    model takes more input channels than it predicts (``in_dim - out_dim`` = 20: 4 mask + 16 latent), with the
    latent's batch (or 1), frames, height and width; ``clip_tokens [B or 1, N, image_dim]`` exactly when the model
    has ``img_emb``."""
    c = dit.config
    extra = c.in_dim - c.out_dim
    name = getattr(dit, "source", "<model>")
    what = "this DiT" if str(name).startswith("<") else f"the DiT {name}"
    if image_latent is None and extra > 0 and x.dim() == 5 and x.shape[1] == c.out_dim:
        raise ValueError(f"{what} is an image-to-video model ({c.in_dim} input channels): give it a start image "
                         f"(image_latent=[B, {extra}, F, H, W] from wan_core.i2v.image_condition)")
    if image_latent is not None:
        if extra <= 0:
            raise ValueError(f"{what} is a text-to-video model ({c.in_dim} input channels); it takes no image "
                             f"(load an image-to-video model such as wan2.1_i2v_480p_14B)")
        if x.dim() != 5 or image_latent.dim() != 5:
            raise ValueError(f"image_latent must be [B, {extra}, F, H, W] beside latents [B, {c.out_dim}, F, H, W]; "
                             f"got {list(image_latent.shape)} and {list(x.shape)}")
        if (image_latent.shape[1] != extra or image_latent.shape[2:] != x.shape[2:]
                or image_latent.shape[0] not in (1, x.shape[0])):
            batch = "1" if x.shape[0] == 1 else f"{x.shape[0]} or 1"
            raise ValueError(f"image_latent has shape {list(image_latent.shape)}; with latents {list(x.shape)} it "
                             f"must be [{batch}, {extra}, {', '.join(map(str, x.shape[2:]))}] (4 mask "
                             f"channels + 16 latent channels of the start image, same frames and size)")
    if getattr(dit, "img_emb", None) is None:
        if clip_tokens is not None:
            raise ValueError(f"{what} has no image embedding (img_emb); it takes no CLIP tokens (clip_tokens=None)")
        return
    if clip_tokens is None:
        raise ValueError(f"{what} (Wan 2.1 image-to-video) needs the CLIP vision tokens of the image: "
                         f"clip_tokens=[B, 257, {c.image_dim}] (wan_core.load_clip_vision(...).encode(images))")
    n = c.image_pos_len or None
    if (clip_tokens.dim() != 3 or clip_tokens.shape[-1] != c.image_dim or clip_tokens.shape[0] not in (1, x.shape[0])
            or (n is not None and clip_tokens.shape[1] != n)):
        want = f"[B, {n or 257}, {c.image_dim}]" + (" (first image's 257 tokens, then the last image's)" if n else "")
        raise ValueError(f"clip_tokens has shape {list(clip_tokens.shape)}; {what} takes {want} (CLIP ViT-H/14 "
                         f"penultimate hidden states)")
