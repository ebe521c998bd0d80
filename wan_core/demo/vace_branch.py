"""The demo model's VACE branch: a Wan 2.1 VACE DiT made from the demo DiT, its initialisation, and the shipped
branch file (VACE keys only; docs/demo_model.md, "The VACE branch").

The branch has one VACE block per second main block (``DEMO_VACE_LAYERS``: 3 on 6, as the released 1.3B has 15 on
30) and the 96-channel ``vace_patch_embedding``. As the VACE paper's models start, each VACE block starts as a copy
of the main block it feeds and ``before_proj`` / ``after_proj`` start at zero, so the untrained branch adds nothing
and the model equals the demo DiT until training moves the projections.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..config import DiTConfig
from ..dit.model import WanDiT
from .model import DEMO_DIT

__all__ = ["DEMO_VACE_DIT", "DEMO_VACE_LAYERS", "VACE_FILE_DTYPE", "VACE_PREFIXES", "init_vace_branch_",
           "is_vace_key", "load_vace_branch", "vace_dit_from", "vace_state"]

DEMO_VACE_LAYERS = tuple(range(0, DEMO_DIT.num_layers, 2))  # (0, 2, 4)
VACE_CHANNELS = 96  # 16 inactive + 16 reactive latent channels + 64 mask channels (wan_core.vace.VACE_CHANNELS)
DEMO_VACE_DIT: DiTConfig = DEMO_DIT.replace(vace_layers=DEMO_VACE_LAYERS, vace_in_dim=VACE_CHANNELS,
                                            name="wancore-demo-vace")
VACE_PREFIXES = ("vace_blocks.", "vace_patch_embedding.")
VACE_FILE_DTYPE = torch.float16  # as the demo DiT file: half the bytes, the same prompts followed (demo_model.md)


def is_vace_key(name: str) -> bool:
    return name.startswith(VACE_PREFIXES)


def vace_dit_from(dit: WanDiT) -> WanDiT:
    """A float32 ``WanDiT`` of ``DEMO_VACE_DIT`` holding ``dit``'s main weights (copied) and a fresh VACE branch
    (``init_vace_branch_``). ``dit``: the demo DiT (``DEMO_DIT`` shapes)."""
    if dit.config.dim != DEMO_DIT.dim or dit.config.num_layers != DEMO_DIT.num_layers:
        raise ValueError(f"vace_dit_from: expected the demo DiT (dim {DEMO_DIT.dim}, {DEMO_DIT.num_layers} blocks), "
                         f"got dim {dit.config.dim}, {dit.config.num_layers} blocks")
    model = WanDiT(DEMO_VACE_DIT)
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in dit.state_dict().items()}, strict=False)
    if unexpected or any(not is_vace_key(k) for k in missing):
        raise ValueError(f"vace_dit_from: the DiT's keys do not match the demo DiT (unexpected {unexpected[:3]}, "
                         f"missing {[k for k in missing if not is_vace_key(k)][:3]})")
    init_vace_branch_(model)
    return model.eval()


def init_vace_branch_(model: WanDiT, patch_seed: int = 0) -> None:
    """VACE block j = a copy of main block ``vace_layers[j]``, ``before_proj`` / ``after_proj`` zero; the patch
    embedding drawn like a Conv3d's default (seeded), since no main weight reads 96 channels."""
    assert model.vace_blocks is not None and model.vace_patch_embedding is not None
    with torch.no_grad():
        for j, layer in enumerate(model.config.vace_layers):
            block = model.vace_blocks[j]
            block.load_state_dict(model.blocks[layer].state_dict(), strict=False)
            for name in ("before_proj", "after_proj"):
                proj = getattr(block, name)
                if isinstance(proj, torch.nn.Linear):
                    proj.weight.zero_()
                    proj.bias.zero_()
        gen = torch.Generator().manual_seed(patch_seed)
        patch = model.vace_patch_embedding
        bound = patch.weight[0].numel() ** -0.5
        patch.weight.copy_(torch.empty(patch.weight.shape).uniform_(-bound, bound, generator=gen))
        if patch.bias is not None:
            patch.bias.zero_()


def vace_state(model: WanDiT, dtype: torch.dtype = VACE_FILE_DTYPE) -> dict[str, torch.Tensor]:
    """The VACE branch's tensors (official names), in ``dtype``: what the branch file holds."""
    return {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items() if is_vace_key(k)}


def load_vace_branch(dit_path: str | Path, vace_path: str | Path, device: torch.device | str = "cpu",
                     **dit_options) -> WanDiT:
    """The demo VACE DiT: the main DiT file's weights and the branch file's, loaded through ``load_dit`` (state
    dict input, ``DEMO_VACE_DIT`` config). ``dit_options``: ``load_dit`` keywords (dtype, attention, ...)."""
    from safetensors.torch import load_file

    from ..dit.loader import load_dit

    main, branch = load_file(str(dit_path)), load_file(str(vace_path))
    wrong = [k for k in branch if not is_vace_key(k)]
    if wrong or not branch:
        raise ValueError(f"{vace_path}: expected only VACE tensors ({', '.join(VACE_PREFIXES)}), got "
                         f"{wrong[:3] or 'none'}")
    return load_dit({**main, **branch}, device=device, config=DEMO_VACE_DIT, **dit_options)
