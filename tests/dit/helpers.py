"""Reference builders shared by the DiT tests: a randomised diffusers WanTransformer3DModel and name exports."""
from __future__ import annotations

from pathlib import Path

import torch

from wan_core.config import DiTConfig

DATA = Path(__file__).parent / "data"


def diffusers_reference(cfg: DiTConfig, seed: int = 0):
    """diffusers WanTransformer3DModel with every tensor randomised (official init zeroes the head)."""
    from diffusers import WanTransformer3DModel

    torch.manual_seed(seed)
    ref = WanTransformer3DModel(
        patch_size=cfg.patch_size, num_attention_heads=cfg.num_heads, attention_head_dim=cfg.head_dim,
        in_channels=cfg.in_dim, out_channels=cfg.out_dim, text_dim=cfg.text_dim, freq_dim=cfg.freq_dim,
        ffn_dim=cfg.ffn_dim, num_layers=cfg.num_layers, cross_attn_norm=cfg.cross_attn_norm,
        qk_norm="rms_norm_across_heads", eps=cfg.eps, rope_max_seq_len=cfg.rope_max_len,
    )
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2 + (1.0 if p.dim() == 1 and p.abs().sum() > 0 and
                                                                 (p == 1).all() else 0.0))
    return ref.eval()


def tsv_map() -> dict[str, str]:
    """official -> diffusers key map of the team's key list (1.3B block count), generalised per block."""
    rows = {}
    for line in (DATA / "wan_dit_keymap_official_to_diffusers.tsv").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        off, dif, _shape = line.split("\t")
        rows[off] = dif
    return rows


def export_official(diffusers_sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename a diffusers state dict to official names using the .tsv (independent of wan_core's rules)."""
    block, top = {}, {}
    for off, dif in tsv_map().items():
        if off.startswith("blocks.0."):
            block[dif[len("blocks.0."):]] = off[len("blocks.0."):]
        elif not off.startswith("blocks."):
            top[dif] = off
    out = {}
    for k, v in diffusers_sd.items():
        if k.startswith("blocks."):
            _, idx, rest = k.split(".", 2)
            out[f"blocks.{idx}.{block[rest]}"] = v
        else:
            out[top[k]] = v
    return out
