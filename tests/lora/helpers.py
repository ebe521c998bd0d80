"""Random LoRA files for the LoRA tests: one low-rank LoRA written in each layout in circulation.

The official-name LoRA is generated from the model's linear layers; the kohya and diffusers namings are
derived with the team's key list (tests/dit/data/*.tsv, independent of wan_core's rules)."""
from __future__ import annotations

import torch

from wan_core.config import DiTConfig

from ..dit.helpers import tsv_map

CFG = DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32, name="tiny-lora")
LINEARS = ("self_attn.q", "self_attn.k", "self_attn.v", "self_attn.o", "cross_attn.q", "cross_attn.k",
           "cross_attn.v", "cross_attn.o", "ffn.0", "ffn.2")


def linear_shapes(cfg: DiTConfig = CFG) -> dict[str, tuple[int, int]]:
    """Official block linear name -> (out, in)."""
    shapes = {}
    for i in range(cfg.num_layers):
        for name in LINEARS:
            out_f = cfg.ffn_dim if name == "ffn.0" else cfg.dim
            in_f = cfg.ffn_dim if name == "ffn.2" else cfg.dim
            shapes[f"blocks.{i}.{name}"] = (out_f, in_f)
    return shapes


def random_lora(cfg: DiTConfig = CFG, rank: int = 4, alpha: float | None = 2.0, seed: int = 0,
                bias: bool = False, names=None) -> dict[str, torch.Tensor]:
    """``{official layer: {"down", "up", "alpha"?, "diff_b"?}}`` with changes of a visible size."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, (o, i) in linear_shapes(cfg).items():
        if names is not None and name not in names:
            continue
        layer = {"down": torch.randn(rank, i, generator=g) * 0.3, "up": torch.randn(o, rank, generator=g) * 0.3}
        if alpha is not None:
            layer["alpha"] = torch.tensor(float(alpha))
        if bias:
            layer["diff_b"] = torch.randn(o, generator=g) * 0.1
        out[name] = layer
    return out


def official_file(lora, down="lora_A", up="lora_B", prefix="diffusion_model.") -> dict[str, torch.Tensor]:
    sd = {}
    for name, t in lora.items():
        sd[f"{prefix}{name}.{down}.weight"] = t["down"]
        sd[f"{prefix}{name}.{up}.weight"] = t["up"]
        if "alpha" in t:
            sd[f"{prefix}{name}.alpha"] = t["alpha"]
        if "diff_b" in t:
            sd[f"{prefix}{name}.diff_b"] = t["diff_b"]
    return sd


def kohya_file(lora) -> dict[str, torch.Tensor]:
    sd = {}
    for name, t in lora.items():
        k = "lora_unet_" + name.replace(".", "_")
        sd[f"{k}.lora_down.weight"] = t["down"]
        sd[f"{k}.lora_up.weight"] = t["up"]
        sd[f"{k}.alpha"] = t["alpha"]
    return sd


def _diffusers_name(official: str) -> str:
    block = {}
    for off, dif in tsv_map().items():
        if off.startswith("blocks.0."):
            block[off[len("blocks.0."):]] = dif[len("blocks.0."):]
    _, idx, rest = official.split(".", 2)
    return f"blocks.{idx}.{block[rest + '.weight'][: -len('.weight')]}"


def diffusers_file(lora) -> dict[str, torch.Tensor]:
    """PEFT keys as diffusers saves them (no alpha: alpha/rank folded into lora_A)."""
    sd = {}
    for name, t in lora.items():
        k = "transformer." + _diffusers_name(name)
        scale = float(t["alpha"]) / t["down"].shape[0] if "alpha" in t else 1.0
        sd[f"{k}.lora_A.weight"] = t["down"] * scale
        sd[f"{k}.lora_B.weight"] = t["up"]
    return sd


def expected_delta(t: dict[str, torch.Tensor]) -> torch.Tensor:
    """The change a LoRA layer makes, computed by hand: alpha / rank * up @ down."""
    scale = float(t["alpha"]) / t["down"].shape[0] if "alpha" in t else 1.0
    return scale * t["up"].double() @ t["down"].double()
