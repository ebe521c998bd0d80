"""``load_dit``: any Wan 2.1 T2V DiT file users have -> a ready ``WanDiT`` (DESIGN.md section 4).

Accepts official, ComfyUI (optionally ``model.diffusion_model.``-prefixed) and diffusers namings, in
fp32/fp16/bf16/fp8 (plain or "scaled", dequantised here), as a file, a diffusers folder or a state dict.
The model is built on the ``meta`` device and the checkpoint tensors are assigned, so the weights are
read once and never initialised randomly.
"""
from __future__ import annotations

import torch

from ..attention.dispatch import AttentionDispatch
from ..checkpoint import (
    FP8_DTYPES, CheckpointError, LazyStateDict, Source, check_shapes, describe_keys, is_quant_aux_key,
    materialize, open_checkpoint, stored_float_dtype, strip_prefix,
)
from ..config import DiTConfig, detect_dit_config
from .keys import DIT_PREFIXES, detect_naming, diffusers_to_official
from .model import WanDiT


def official_state_dict(src: Source) -> LazyStateDict:
    """Open ``src`` and present it under official DiT names (prefix stripped, diffusers names mapped)."""
    sd = open_checkpoint(src, subfolder="transformer")
    for prefixes in ((), DIT_PREFIXES):
        view = strip_prefix(sd, prefixes) if prefixes else sd
        naming = detect_naming(view.keys())
        if naming == "official":
            return view
        if naming == "diffusers":
            return view.rename(lambda k: diffusers_to_official(k) or (k if is_quant_aux_key(k) else f"?{k}"))
    raise CheckpointError(
        f"{sd.source}: not a Wan 2.1 text-to-video DiT; it looks like {describe_keys(sd.keys())}. "
        f"Pick the Wan diffusion model file (e.g. wan2.1_t2v_1.3B_fp16.safetensors) for this input."
    )


def default_dtype(stored: torch.dtype) -> torch.dtype:
    """Compute dtype when the caller does not choose: the stored one, bf16 for fp8 files."""
    return torch.bfloat16 if stored in FP8_DTYPES else stored


def load_dit(
    src: Source,
    dtype: torch.dtype | None = None,
    device: torch.device | str = "cpu",
    config: DiTConfig | None = None,
    attention: str | AttentionDispatch = "sdpa",
) -> WanDiT:
    """Load a Wan DiT from a file, a diffusers folder or a state dict.

    ``dtype``: weight dtype (None = as stored; fp8 files are dequantised to bf16). ``config``: skip
    detection (needed only for unusual head counts). Returns the model in eval mode on ``device``.
    """
    sd = official_state_dict(src)
    shapes = {k: sd.shape(k) for k in sd if not is_quant_aux_key(k)}
    if config is None:
        heads = sd.metadata.get("config", {}).get("num_attention_heads")
        try:
            config = detect_dit_config(shapes, num_heads=heads)
        except (KeyError, ValueError) as e:
            raise CheckpointError(f"{sd.source}: incomplete Wan DiT: {e}") from e
    with torch.device("meta"):
        model = WanDiT(config)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    check_shapes(shapes, expected, sd.source,
                 f"the Wan DiT config {config.name} (dim {config.dim}, {config.num_layers} layers)")
    target = dtype or default_dtype(stored_float_dtype(sd))
    tensors = materialize(sd, target, device=device)
    model.load_state_dict(tensors, assign=True, strict=True)
    model.attention = attention if isinstance(attention, AttentionDispatch) else AttentionDispatch(attention)
    return model.eval()
