"""The Wan 2.1 text-to-video DiT (docs/wan_spec.md section 2), with official parameter names.

``WanDiT(config)(x, t, context) -> v``: x ``[B, C, F, H, W]`` normalised latents (C = 16, or 48 for Wan 2.2
TI2V-5B), t ``[B]`` on 0..1000 (int or float) or one per patch token ``[B, L]``, context ``[B, L, text_dim]``
or a list of ``[L_i, text_dim]`` -> velocity ``[B, C, F, H, W]`` float32.
Attention goes through ``self.attention`` (an ``AttentionDispatch``), replaced from outside to switch backends
or wrap skiparse / context parallelism.

``self.cache`` is None except while a sampler runs with a diffusion cache (``wan_core.cache``): the session
object is then asked, at three points of the forward, whether the whole output can be reused
(``reuse_output``), how to run the block stack (``run_blocks``: text K/V reuse, residual reuse, attention
reuse) and what the output was (``record_output``). The call ``dit(x, t, context)`` is the same either way.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..attention.dispatch import AttentionDispatch
from ..config import DiTConfig
from .block import Head, WanBlock
from .embeddings import pad_context, patchify, time_embed, unpatchify
from .image import ImageEmbedding, check_image_inputs
from .rope import rope_frequencies
from .runtime import runtime_of
from .vace import VaceTokens, check_vace_inputs, embed_vace, vace_hints, vace_modules

if TYPE_CHECKING:
    from .options import ModelOptions


class WanDiT(nn.Module):
    source: str = "<model>"  # the file it was loaded from (set by load_dit), named in errors
    load_options: ModelOptions | None = None  # the acceleration options load_dit used (None: built directly)

    def __init__(self, config: DiTConfig, attention: AttentionDispatch | None = None):
        super().__init__()
        c = self.config = config
        self.attention = attention or AttentionDispatch("sdpa")
        self.patch_embedding = nn.Conv3d(c.in_dim, c.dim, kernel_size=c.patch_size, stride=c.patch_size)
        self.text_embedding = nn.Sequential(
            nn.Linear(c.text_dim, c.dim), nn.GELU(approximate="tanh"), nn.Linear(c.dim, c.dim)
        )
        self.time_embedding = nn.Sequential(nn.Linear(c.freq_dim, c.dim), nn.SiLU(), nn.Linear(c.dim, c.dim))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(c.dim, 6 * c.dim))
        self.blocks = nn.ModuleList(
            WanBlock(c.dim, c.ffn_dim, c.num_heads, c.qk_norm, c.cross_attn_norm, c.eps,
                     image_text_len=c.text_len if c.image_dim else 0)
            for _ in range(c.num_layers)
        )
        # Wan 2.1 I2V / FLF2V: CLIP tokens -> image context (docs/i2v.md section 2)
        self.img_emb = ImageEmbedding(c.image_dim, c.dim, c.image_pos_len) if c.image_dim else None
        # Wan VACE: VACE blocks + their patch embedding (docs/vace.md section 1); None without a VACE branch
        self.vace_blocks, self.vace_patch_embedding = vace_modules(c)
        pt, ph, pw = c.patch_size
        self.head = Head(c.dim, pt * ph * pw * c.out_dim, c.eps)
        self.cache = None  # a wan_core.cache.CacheSession while a cached sampling run is attached

    @property
    def dtype(self) -> torch.dtype:
        return self.patch_embedding.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.patch_embedding.weight.device

    def embed_text(self, context, batch: int) -> torch.Tensor:
        """Text states -> ``[B, text_len, D]``: zero-padded to ``text_len`` and embedded
        (docs/wan_spec.md section 2.3)."""
        c = self.config
        ctx = pad_context(context, c.text_len, c.text_dim, batch).to(self.device)
        return self.text_embedding(ctx.to(self.dtype))

    def embed_time(self, t, batch: int, tokens: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Timesteps (int or float, 0..1000) -> time embeddings (float32).

        Scalar or ``[B]`` -> ``e [B, D]``, ``e0 [B, 6, D]``. Per token, ``[B, L]`` (``L = tokens``, the patch
        tokens in (f, h, w) order, as Wan 2.2 TI2V passes it: docs/wan22.md section 2) -> ``e [B, L, D]``,
        ``e0 [B, L, 6, D]``; the MLPs run once per distinct timestep, not once per token.
        """
        t = torch.as_tensor(t, device=self.device)
        if t.dim() == 0:
            t = t.expand(batch)
        if t.dim() == 2 and tokens is not None and t.shape == (batch, tokens):
            values, index = torch.unique(t, return_inverse=True)
            e, e0 = time_embed(values, self.config.freq_dim, self.time_embedding, self.time_projection)
            return e[index], e0[index]
        if t.shape != (batch,):
            per_token = f" or [{batch}, {tokens}] (one per patch token)" if tokens is not None else ""
            raise ValueError(f"timestep must be a scalar, shape [{batch}]{per_token}, got {list(t.shape)}")
        return time_embed(t, self.config.freq_dim, self.time_embedding, self.time_projection)

    def embed_context(self, context, batch: int, clip_tokens: torch.Tensor | None = None) -> torch.Tensor:
        """Embedded text ``[B, text_len, D]``; for an I2V/FLF2V model the embedded CLIP tokens come first:
        ``[B, N_img + text_len, D]`` (official ``WanModel.forward``, Wan2.1 wan/modules/model.py lines 561-563)."""
        text = self.embed_text(context, batch)
        if self.img_emb is None:
            return text
        assert clip_tokens is not None  # check_image_inputs ran in forward
        img = self.img_emb(clip_tokens.to(self.device))
        return torch.cat([img.expand(batch, -1, -1).to(text.dtype), text], dim=1)

    def grid(self, x: torch.Tensor) -> tuple[int, int, int]:
        """Patch grid ``(F', H', W')`` of latents ``[B, C, F, H, W]``, validating the shape."""
        c = self.config
        if x.dim() != 5 or x.shape[1] != c.in_dim:
            raise ValueError(f"latents must be [B, {c.in_dim}, F, H, W], got {list(x.shape)}")
        for size, p, axis in zip(x.shape[2:], c.patch_size, ("frames", "height", "width")):
            if size % p:
                raise ValueError(f"latent {axis} {size} is not a multiple of the patch size {p} "
                                 f"(pixel width/height must be multiples of 16)")
        return tuple(s // p for s, p in zip(x.shape[2:], c.patch_size))  # type: ignore[return-value]

    def all_blocks(self) -> list[nn.Module]:
        """The main blocks, then the VACE blocks (if any): the order of ``text_kv``'s entries."""
        return list(self.blocks) + (list(self.vace_blocks) if self.vace_blocks is not None else [])

    def text_kv(self, ctx: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Embedded text ``[B, text_len, D]`` -> every block's cross-attention ``(k, v)`` (``[B, N, text_len, d]``):
        the main blocks', then the VACE blocks'."""
        return [cast(WanBlock, block).cross_attn.text_kv(ctx) for block in self.all_blocks()]

    def run_blocks(self, h: torch.Tensor, e0: torch.Tensor, text, freqs: torch.Tensor,
                   attention_cache=None, vace: list[VaceTokens] | None = None) -> torch.Tensor:
        """The block stack: ``h [B, L, D]`` float32 (the tokens after patch embedding), ``e0 [B, 6, D]``, ``text`` =
        embedded context ``[B, text_len, D]`` or one precomputed ``(k, v)`` per block (``text_kv``), ``freqs``
        RoPE, ``vace`` the embedded VACE inputs of a VACE model (``embed_vace``) -> ``[B, L, D]``.

        VACE: every hint is computed first, from ``h`` as it enters; main block ``vace_layers[j]`` then adds hint j
        after its whole block (official ``VaceWanModel.forward``)."""
        per_block = isinstance(text, list)
        n = len(self.blocks)
        hints: dict[int, torch.Tensor] = {}
        if vace:
            assert self.vace_blocks is not None  # check_vace_inputs ran in forward
            layers = self.config.vace_layers
            vace_text = text[n:] if per_block else [text] * len(layers)
            hints = dict(zip(layers, vace_hints(self.vace_blocks, h, e0, vace_text, freqs, self.attention, vace,
                                                layers, n, attention_cache)))
        for i, block in enumerate(self.blocks):
            h = block(h, e0, text[i] if per_block else text, freqs, self.attention, i, attention_cache)
            hint = hints.pop(i, None)
            if hint is not None:
                h = h + hint  # the hint is freed once added
        return h

    def forward(self, x: torch.Tensor, t, context, image_latent: torch.Tensor | None = None,
                clip_tokens: torch.Tensor | None = None, vace_context=None, vace_scale: float = 1.0) -> torch.Tensor:
        """x ``[B, C, F, H, W]``, t scalar, ``[B]`` or per token ``[B, L]``, context ``[B, L, text_dim]`` or list
        -> v float32.

        VACE model (docs/vace.md section 1): ``vace_context`` ``[B, 96, F, H, W]`` (same F, H, W as x; batch 1 or
        a divisor of B is repeated) with strength ``vace_scale``, or a list of ``(context, scale)`` pairs whose
        hints add (each scale times ``vace_scale``); scale 0 gives the plain T2V model."""
        c = self.config
        b = x.shape[0]
        check_image_inputs(self, x, image_latent, clip_tokens)  # image-to-video inputs: docs/i2v.md section 2
        vace_pairs = check_vace_inputs(self, x, vace_context, vace_scale)
        x_in = x if image_latent is None else torch.cat([x, image_latent.to(x).expand(b, -1, -1, -1, -1)], dim=1)
        grid = self.grid(x_in)
        cache = self.cache
        if cache is not None:
            reused = cache.reuse_output(self, x, t)
            if reused is not None:
                return reused
        w = self.patch_embedding.weight
        tokens = F.linear(patchify(x_in.to(w.dtype), c.patch_size), w.flatten(1), self.patch_embedding.bias)
        h = tokens.float()  # residual stream [B, L, D], float32
        e, e0 = self.embed_time(t, b, tokens.shape[1])
        freqs = rope_frequencies(grid, c.rope_dims, c.rope_theta, device=x.device, riflex=runtime_of(self).riflex)
        vace = None
        if vace_pairs:
            assert self.vace_patch_embedding is not None  # check_vace_inputs: a VACE model
            vace = embed_vace(self.vace_patch_embedding, vace_pairs, b, c.patch_size)
        if cache is None:
            h = self.run_blocks(h, e0, self.embed_context(context, b, clip_tokens), freqs, vace=vace)
        else:
            h = cache.run_blocks(self, h, e, e0, context, freqs, clip_tokens=clip_tokens, vace=vace)
        out = unpatchify(self.head(h, e), grid, c.patch_size, c.out_dim)
        if cache is not None:
            cache.record_output(self, x, out)
        return out
