"""Input embeddings of the Wan DiT: timestep sinusoid + MLP, text padding, 3D patches
(docs/wan_spec.md sections 2.1-2.3, 2.6)."""
from __future__ import annotations

from typing import cast

import torch
import torch.nn as nn
import torch.nn.functional as F


def sinusoidal_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """``[B] -> [B, dim]`` float32, ``[cos(t w_i) | sin(t w_i)]`` with ``w_i = 10000^(-i/(dim/2))`` (cos first).

    Computed in float64 like the official code; ``t`` may be integer or float on the 0..1000 scale.
    """
    half = dim // 2
    pos = t.to(torch.float64)
    freqs = torch.pow(10000.0, -torch.arange(half, dtype=torch.float64, device=t.device) / half)
    ang = torch.outer(pos, freqs)
    return torch.cat([torch.cos(ang), torch.sin(ang)], dim=1).float()


def linear_fp32(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    """``layer(x)`` computed in float32 whatever the stored weight dtype (time path, docs/wan_spec.md section 2.2)."""
    w = layer.weight.float()
    b = layer.bias.float() if layer.bias is not None else None
    return F.linear(x.float(), w, b)


def time_embed(t: torch.Tensor, freq_dim: int, time_embedding: nn.Sequential,
               time_projection: nn.Sequential) -> tuple[torch.Tensor, torch.Tensor]:
    """``t [B]`` -> ``e [B, D]`` (for the head) and ``e0 [B, 6, D]`` (for the blocks), both in float32.

    ``time_embedding`` = Linear, SiLU, Linear; ``time_projection`` = SiLU, Linear(D -> 6D)
    (docs/wan_spec.md section 2.2).
    """
    s = sinusoidal_embedding(t, freq_dim)
    # nn.Sequential indexing is typed as Module; the layout above fixes these entries as Linear
    lin1, lin2, proj = (cast(nn.Linear, m) for m in (time_embedding[0], time_embedding[2], time_projection[1]))
    e = linear_fp32(F.silu(linear_fp32(s, lin1)), lin2)
    e0 = linear_fp32(F.silu(e), proj)
    return e, e0.unflatten(1, (6, -1))


def pad_context(
    context: torch.Tensor | list[torch.Tensor] | tuple[torch.Tensor, ...], text_len: int, text_dim: int,
    batch: int,
) -> torch.Tensor:
    """Text states -> ``[B, text_len, text_dim]``, zero rows appended (not masked: docs/wan_spec.md section 2.3).

    ``context``: ``[B, L, text_dim]`` or a list of ``[L_i, text_dim]`` (one per sample, L_i <= text_len).
    A single item is broadcast to the batch.
    """
    if isinstance(context, (list, tuple)):
        items = list(context)
    elif context.dim() == 3:
        items = list(context.unbind(0))
    else:
        raise ValueError(f"context must be [B, L, {text_dim}] or a list of [L_i, {text_dim}], got shape "
                         f"{list(context.shape)}")
    if len(items) == 1 and batch > 1:
        items = items * batch
    if len(items) != batch:
        raise ValueError(f"context has {len(items)} entries but the latent batch is {batch}")
    ref = items[0]
    out = ref.new_zeros(batch, text_len, text_dim)
    for i, c in enumerate(items):
        if c.dim() != 2 or c.shape[1] != text_dim:
            raise ValueError(f"context[{i}] has shape {list(c.shape)}; expected [L, {text_dim}] "
                             f"(text states of the umT5 encoder)")
        if c.shape[0] > text_len:
            raise ValueError(f"context[{i}] has {c.shape[0]} tokens; at most {text_len} are supported")
        out[i, : c.shape[0]] = c.to(out.dtype)
    return out


def patchify(x: torch.Tensor, patch: tuple[int, int, int]) -> torch.Tensor:
    """``[B, C, F, H, W] -> [B, L, C*pt*ph*pw]``, tokens row-major in (f, h, w), features in Conv3d order."""
    b, c, f, h, w = x.shape
    pt, ph, pw = patch
    x = x.view(b, c, f // pt, pt, h // ph, ph, w // pw, pw)
    x = x.permute(0, 2, 4, 6, 1, 3, 5, 7)  # B F' H' W' C pt ph pw
    return x.reshape(b, (f // pt) * (h // ph) * (w // pw), c * pt * ph * pw)


def unpatchify(u: torch.Tensor, grid: tuple[int, int, int], patch: tuple[int, int, int], channels: int) -> torch.Tensor:
    """``[B, L, pt*ph*pw*C] -> [B, C, F, H, W]``; channel is the fastest index of each token vector
    (docs/wan_spec.md section 2.6)."""
    b = u.shape[0]
    fg, hg, wg = grid
    pt, ph, pw = patch
    u = u.view(b, fg, hg, wg, pt, ph, pw, channels)
    u = u.permute(0, 7, 1, 4, 2, 5, 3, 6)  # B C F' pt H' ph W' pw
    return u.reshape(b, channels, fg * pt, hg * ph, wg * pw)
