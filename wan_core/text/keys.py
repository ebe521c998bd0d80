"""umT5 encoder key naming: official Wan ``.pth`` names <-> transformers ``UMT5EncoderModel`` names.

Implements docs/wan_spec.md section 4.2 and the text-encoder parts of 5.1 (ComfyUI prefix, ``spiece_model``,
tied ``encoder.embed_tokens.weight``). The rules are checked in tests against
``tests/text/data/umt5_keymap_official_to_hf.tsv``.
"""
from __future__ import annotations

import re

# Prefix of the text encoder inside a ComfyUI all-in-one checkpoint (docs/wan_spec.md sections 4.2 / 5.1).
COMFY_PREFIXES = ("text_encoders.umt5xxl.transformer.",)

# ComfyUI umT5 files carry the SentencePiece model as a uint8 tensor under this name (docs/comfyui.md section 7.4).
SPIECE_KEY = "spiece_model"

# transformers keeps a second name for the (tied) input embedding.
TIED_EMBED_KEY = "encoder.embed_tokens.weight"
EMBED_KEY = "shared.weight"

# (official module, transformers module); the parameter name after the module (weight, scale_weight, ...)
# is kept, so fp8 scale tensors follow their layer.
_TOP = [
    ("token_embedding", "shared"),
    ("norm", "encoder.final_layer_norm"),
]
_BLOCK = [
    ("norm1", "layer.0.layer_norm"),
    ("attn.q", "layer.0.SelfAttention.q"),
    ("attn.k", "layer.0.SelfAttention.k"),
    ("attn.v", "layer.0.SelfAttention.v"),
    ("attn.o", "layer.0.SelfAttention.o"),
    ("pos_embedding.embedding", "layer.0.SelfAttention.relative_attention_bias"),
    ("norm2", "layer.1.layer_norm"),
    ("ffn.gate.0", "layer.1.DenseReluDense.wi_0"),  # GELU branch
    ("ffn.fc1", "layer.1.DenseReluDense.wi_1"),  # linear branch
    ("ffn.fc2", "layer.1.DenseReluDense.wo"),
]
_OFFICIAL_BLOCK_RE = re.compile(r"^blocks\.(\d+)\.(.+)\.([^.]+)$")
_HF_BLOCK_RE = re.compile(r"^encoder\.block\.(\d+)\.(.+)\.([^.]+)$")
_OFFICIAL_TOP = dict(_TOP)
_HF_TOP = {hf: off for off, hf in _TOP}
_OFFICIAL_BLOCK = dict(_BLOCK)
_HF_BLOCK = {hf: off for off, hf in _BLOCK}


def official_to_hf(key: str) -> str | None:
    """transformers name of an official Wan umT5 key, or None when ``key`` is not one.

    ``blocks.3.ffn.gate.0.weight`` -> ``encoder.block.3.layer.1.DenseReluDense.wi_0.weight``.
    """
    m = _OFFICIAL_BLOCK_RE.match(key)
    if m:
        i, module, param = m.groups()
        hf = _OFFICIAL_BLOCK.get(module)
        return None if hf is None else f"encoder.block.{i}.{hf}.{param}"
    module, _, param = key.rpartition(".")
    hf = _OFFICIAL_TOP.get(module)
    return None if hf is None or not param else f"{hf}.{param}"


def hf_to_official(key: str) -> str | None:
    """Official Wan name of a transformers umT5 key, or None (also for the tied ``encoder.embed_tokens``)."""
    m = _HF_BLOCK_RE.match(key)
    if m:
        i, module, param = m.groups()
        off = _HF_BLOCK.get(module)
        return None if off is None else f"blocks.{i}.{off}.{param}"
    module, _, param = key.rpartition(".")
    off = _HF_TOP.get(module)
    return None if off is None or not param else f"{off}.{param}"


def detect_naming(keys) -> str | None:
    """``"official"`` (Wan ``.pth``), ``"hf"`` (transformers / ComfyUI) or None (not a umT5 encoder).

    ``keys``: names with any ComfyUI prefix already removed.
    """
    ks = set(keys)
    if "blocks.0.attn.q.weight" in ks or (
        "token_embedding.weight" in ks and any(k.startswith("blocks.") for k in ks)
    ):
        return "official"
    if "encoder.block.0.layer.0.SelfAttention.q.weight" in ks or (
        (EMBED_KEY in ks or TIED_EMBED_KEY in ks) and "encoder.final_layer_norm.weight" in ks
    ):
        return "hf"
    return None


def find_spiece_key(keys) -> str | None:
    """The key holding an embedded SentencePiece model (``spiece_model``, possibly prefixed), if any."""
    for k in keys:
        if k == SPIECE_KEY or k.endswith("." + SPIECE_KEY):
            return k
    return None


__all__ = ["COMFY_PREFIXES", "SPIECE_KEY", "TIED_EMBED_KEY", "EMBED_KEY", "official_to_hf", "hf_to_official",
           "detect_naming", "find_spiece_key"]
