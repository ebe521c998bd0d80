"""DiT key naming: official <-> diffusers (docs/wan_spec.md section 5.2), and naming detection.

ComfyUI files use the official names, optionally under ``model.diffusion_model.``; the rules below are
checked in tests against ``tests/dit/data/wan_dit_keymap_official_to_diffusers.tsv``.
"""
from __future__ import annotations

import re

# (official, diffusers) name fragments; block-level ones are matched after "blocks.N."
_TOP = [
    ("time_embedding.0.", "condition_embedder.time_embedder.linear_1."),
    ("time_embedding.2.", "condition_embedder.time_embedder.linear_2."),
    ("text_embedding.0.", "condition_embedder.text_embedder.linear_1."),
    ("text_embedding.2.", "condition_embedder.text_embedder.linear_2."),
    ("time_projection.1.", "condition_embedder.time_proj."),
    ("head.head.", "proj_out."),
    ("patch_embedding.", "patch_embedding."),
    # Wan VACE (diffusers WanVACETransformer3DModel keeps the official name)
    ("vace_patch_embedding.", "vace_patch_embedding."),
    # Wan 2.1 I2V / FLF2V image MLP: diffusers loaders/single_file_utils.py TRANSFORMER_KEYS_RENAME_DICT
    ("img_emb.proj.0.", "condition_embedder.image_embedder.norm1."),
    ("img_emb.proj.1.", "condition_embedder.image_embedder.ff.net.0.proj."),
    ("img_emb.proj.3.", "condition_embedder.image_embedder.ff.net.2."),
    ("img_emb.proj.4.", "condition_embedder.image_embedder.norm2."),
]
# img_emb.emb_pos (FLF2V) is WanImageEmbedding.pos_embed in diffusers; its single-file converter drops it
_TOP_EXACT = [("head.modulation", "scale_shift_table"),
              ("img_emb.emb_pos", "condition_embedder.image_embedder.pos_embed")]
_BLOCK = [
    ("self_attn.q.", "attn1.to_q."), ("self_attn.k.", "attn1.to_k."), ("self_attn.v.", "attn1.to_v."),
    ("self_attn.o.", "attn1.to_out.0."), ("self_attn.norm_q.", "attn1.norm_q."),
    ("self_attn.norm_k.", "attn1.norm_k."),
    ("cross_attn.q.", "attn2.to_q."), ("cross_attn.k.", "attn2.to_k."), ("cross_attn.v.", "attn2.to_v."),
    ("cross_attn.o.", "attn2.to_out.0."), ("cross_attn.norm_q.", "attn2.norm_q."),
    ("cross_attn.norm_k.", "attn2.norm_k."),
    ("cross_attn.k_img.", "attn2.add_k_proj."), ("cross_attn.v_img.", "attn2.add_v_proj."),
    ("cross_attn.norm_k_img.", "attn2.norm_added_k."),
    ("norm3.", "norm2."),
    ("ffn.0.", "ffn.net.0.proj."), ("ffn.2.", "ffn.net.2."),
    # VACE blocks (vace_blocks.N.): diffusers WanVACETransformerBlock proj_in / proj_out
    ("before_proj.", "proj_in."), ("after_proj.", "proj_out."),
]
_BLOCK_EXACT = [("modulation", "scale_shift_table")]
_BLOCK_RE = re.compile(r"^((?:vace_)?blocks\.\d+\.)(.*)$")  # main blocks and a VACE model's VACE blocks


def _convert(key: str, pairs, exact, top_pairs, top_exact) -> str | None:
    m = _BLOCK_RE.match(key)
    if m:
        prefix, rest = m.groups()
        for a, b in exact:
            if rest == a:
                return prefix + b
        for a, b in pairs:
            if rest.startswith(a):
                return prefix + b + rest[len(a):]
        return None
    for a, b in top_exact:
        if key == a:
            return b
    for a, b in top_pairs:
        if key.startswith(a):
            return b + key[len(a):]
    return None


def official_to_diffusers(key: str) -> str | None:
    """diffusers name of an official DiT key (None if the key has no counterpart)."""
    return _convert(key, _BLOCK, _BLOCK_EXACT, _TOP, _TOP_EXACT)


def diffusers_to_official(key: str) -> str | None:
    """Official name of a diffusers ``WanTransformer3DModel`` key (None if unknown)."""
    swap = lambda pairs: [(b, a) for a, b in pairs]  # noqa: E731
    return _convert(key, swap(_BLOCK), swap(_BLOCK_EXACT), swap(_TOP), swap(_TOP_EXACT))


# Prefixes under which DiT weights are found in the wild (ComfyUI all-in-one files, DDP saves).
DIT_PREFIXES = ("model.diffusion_model.", "diffusion_model.", "module.", "model.")


def detect_naming(keys) -> str | None:
    """``"official"`` or ``"diffusers"`` from marker keys, None when neither (after prefix stripping)."""
    ks = set(keys)
    if "head.modulation" in ks and "patch_embedding.weight" in ks:
        return "official"
    if "scale_shift_table" in ks and "condition_embedder.time_proj.weight" in ks:
        return "diffusers"
    return None
