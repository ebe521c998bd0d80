"""A tiny random VACE DiT for the pipeline, CLI and node tests."""
from __future__ import annotations

import torch

from wan_core.config import DIT_PRESETS
from wan_core.demo import randomize_
from wan_core.dit.model import WanDiT


def vace_dit(seed: int, text_dim: int = 32) -> WanDiT:
    """The tiny DiT (2 blocks) with a VACE block on each, every weight random (``before_proj`` / ``after_proj``
    too: zero in a fresh official model, which would make VACE a no-op)."""
    cfg = DIT_PRESETS["tiny"].replace(text_dim=text_dim, vace_layers=(0, 1), vace_in_dim=96)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        dit = WanDiT(cfg).eval()
        randomize_(dit)
    return dit


def demo_vace_state(vace_layers: tuple[int, ...] = (0, 2, 4), text_width: int | None = None,
                    seed: int = 0) -> dict[str, torch.Tensor]:
    """The built-in demo DiT's weights plus a random VACE branch on ``vace_layers`` (VACE block j a copy of main
    block ``vace_layers[j]``, as VACE training starts; ``before_proj`` / ``after_proj`` and the VACE patch embedding
    random and small), official key names: a VACE checkpoint in demo widths for server checks until a trained
    one exists. ``text_width``: zero-pad the text embedding's input to it (ComfyUI 0.3.64 builds a 4096-wide text
    input without reading the file's)."""
    from safetensors import safe_open

    from wan_core.demo import builtin_paths

    with safe_open(str(builtin_paths()["dit"]), "pt") as f:
        sd = {k: f.get_tensor(k) for k in f.keys()}
    dim = sd["patch_embedding.weight"].shape[0]
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, std=0.02):
        return (torch.randn(*shape, generator=g) * std).to(sd["patch_embedding.weight"].dtype)

    for j, layer in enumerate(vace_layers):
        for k in [k for k in sd if k.startswith(f"blocks.{layer}.")]:
            sd[f"vace_blocks.{j}." + k.split(".", 2)[2]] = sd[k].clone()
        if j == 0:
            sd["vace_blocks.0.before_proj.weight"], sd["vace_blocks.0.before_proj.bias"] = rand(dim, dim), rand(dim)
        sd[f"vace_blocks.{j}.after_proj.weight"], sd[f"vace_blocks.{j}.after_proj.bias"] = rand(dim, dim), rand(dim)
    sd["vace_patch_embedding.weight"] = rand(dim, 96, 1, 2, 2, std=0.05)
    sd["vace_patch_embedding.bias"] = rand(dim)
    if text_width is not None:
        w = sd["text_embedding.0.weight"]
        padded = torch.zeros(w.shape[0], text_width, dtype=w.dtype)
        padded[:, : w.shape[1]] = w
        sd["text_embedding.0.weight"] = padded
    return {k: v.contiguous() for k, v in sd.items()}
