"""LoRA key names -> the DiT's official parameter names (docs/lora.md section 1).

A LoRA file names each patched layer in one of three namings: official/ComfyUI (``blocks.0.self_attn.q``,
optionally under ``diffusion_model.``), kohya/musubi (``lora_unet_blocks_0_self_attn_q``) or diffusers/PEFT
(``transformer.blocks.0.attn1.to_q``). ``split_key`` separates a key into (layer, role); ``official_layer``
maps a layer name of any naming to the official one, given the model's own names (kohya names are ambiguous
without them).
"""
from __future__ import annotations

import re

from ..dit.keys import diffusers_to_official

# key suffix -> role of the tensor (longest suffixes first)
ROLES = (
    (".lora_A.weight", "down"), (".lora_down.weight", "down"), (".lora_A.default.weight", "down"),
    (".lora_B.weight", "up"), (".lora_up.weight", "up"), (".lora_B.default.weight", "up"),
    (".lora_B.bias", "up_bias"), (".lora_mid.weight", "mid"), (".alpha", "alpha"), (".diff_b", "diff_b"),
    (".diff", "diff"), (".dora_scale", "dora_scale"),
)
# LoRA variants whose math is not a plain low-rank product (named in the error, not silently dropped)
OTHER_ADAPTERS = {"hada_w1": "LoHa", "hada_w2": "LoHa", "lokr_w1": "LoKr", "lokr_w2": "LoKr", "oft_": "OFT"}

PREFIXES = ("model.diffusion_model.", "diffusion_model.", "base_model.model.", "transformer.", "unet.")
KOHYA_PREFIXES = ("lora_unet_", "lycoris_")

# Image-to-video layers in diffusers naming that wan_core/dit/keys.py (text-to-video) does not map.
_I2V_DIFFUSERS = (
    ("attn2.add_k_proj.", "cross_attn.k_img."), ("attn2.add_v_proj.", "cross_attn.v_img."),
    ("attn2.norm_added_k.", "cross_attn.norm_k_img."),
)
_I2V_TOP = (
    ("condition_embedder.image_embedder.norm1.", "img_emb.proj.0."),
    ("condition_embedder.image_embedder.ff.net.0.proj.", "img_emb.proj.1."),
    ("condition_embedder.image_embedder.ff.net.2.", "img_emb.proj.3."),
    ("condition_embedder.image_embedder.norm2.", "img_emb.proj.4."),
)
I2V_MARKERS = ("k_img", "v_img", "norm_k_img", "img_emb", "add_k_proj", "add_v_proj", "image_embedder")
_DIFFUSERS_MARKERS = ("attn1.", "attn2.", "condition_embedder.", "proj_out.", "ffn.net.", "scale_shift_table")
_BLOCK = re.compile(r"^(blocks\.\d+\.)(.*)$")


def split_key(key: str) -> tuple[str, str] | None:
    """``'diffusion_model.blocks.0.self_attn.q.lora_A.weight'`` -> ``('diffusion_model.blocks.0.self_attn.q',
    'down')``; None when the suffix is not one a LoRA uses."""
    for suffix, role in ROLES:
        if key.endswith(suffix):
            return key[: -len(suffix)], role
    return None


def strip_prefixes(layer: str) -> str:
    for p in PREFIXES:
        if layer.startswith(p):
            return layer[len(p):]
    return layer


def is_kohya(layer: str) -> bool:
    return layer.startswith(KOHYA_PREFIXES)


def is_diffusers_name(layer: str) -> bool:
    return any(m in layer for m in _DIFFUSERS_MARKERS)


def _diffusers_layer(layer: str) -> str | None:
    name = diffusers_to_official(layer + ".weight")
    if name is not None:
        return name[: -len(".weight")]
    m = _BLOCK.match(layer + ".")
    if m:
        prefix, rest = m.groups()
        for a, b in _I2V_DIFFUSERS:
            if rest.startswith(a):
                return (prefix + b + rest[len(a):]).rstrip(".")
    for a, b in _I2V_TOP:
        if (layer + ".").startswith(a):
            return (b + (layer + ".")[len(a):]).rstrip(".")
    return None


def kohya_table(names) -> dict[str, str]:
    """``{'blocks_0_self_attn_q': 'blocks.0.self_attn.q', ...}`` for the given official names."""
    return {n.replace(".", "_"): n for n in names}


def official_layer(layer: str, kohya: dict[str, str]) -> str | None:
    """The official name of a LoRA layer name (any naming), or None when it maps to nothing known.

    ``kohya``: :func:`kohya_table` of the model's module and parameter names (plus the image-to-video names,
    so an I2V LoRA is recognised as such on a text-to-video model)."""
    if is_kohya(layer):
        for p in KOHYA_PREFIXES:
            if layer.startswith(p):
                return kohya.get(layer[len(p):])
    layer = strip_prefixes(layer)
    if is_diffusers_name(layer):
        return _diffusers_layer(layer)
    return layer


def i2v_names(num_layers: int) -> list[str]:
    """Official names of the image-to-video layers (Wan 2.1 I2V; docs/wan_spec.md section 2.4)."""
    names = [f"img_emb.proj.{i}" for i in (0, 1, 3, 4)]
    for i in range(num_layers):
        names += [f"blocks.{i}.cross_attn.{n}" for n in ("k_img", "v_img", "norm_k_img")]
    return names


def is_i2v_layer(name: str) -> bool:
    return any(m in name for m in I2V_MARKERS)
