"""Wan VAE parameter names: official (= ComfyUI) <-> diffusers ``AutoencoderKLWan``, by rules (Wan 2.1 and 2.2).

Implements docs/wan_spec.md section 5.3; the rules reproduce ``tests/vae/data/wan_vae_keymap_official_to_diffusers.tsv``
exactly (tested). ComfyUI files use the official names, optionally prefixed ``vae.`` / ``first_stage_model.``.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from ..checkpoint import LazyStateDict

OFFICIAL = "official"
DIFFUSERS = "diffusers"
PREFIXES = ("vae.", "first_stage_model.")

# inside a residual block: diffusers name -> official name
_RES_TO_OFFICIAL = {"norm1": "residual.0", "conv1": "residual.2", "norm2": "residual.3", "conv2": "residual.6",
                    "conv_shortcut": "shortcut"}
_RES_TO_DIFFUSERS = {v: k for k, v in _RES_TO_OFFICIAL.items()}
_TOP_TO_OFFICIAL = {"quant_conv": "conv1", "post_quant_conv": "conv2"}
_TOP_TO_DIFFUSERS = {v: k for k, v in _TOP_TO_OFFICIAL.items()}
_EDGE_TO_OFFICIAL = {"conv_in": "conv1", "norm_out": "head.0", "conv_out": "head.2"}
_EDGE_TO_DIFFUSERS = {v: k for k, v in _EDGE_TO_OFFICIAL.items()}
_MID_TO_OFFICIAL = {"resnets.0": "middle.0", "attentions.0": "middle.1", "resnets.1": "middle.2"}
_MID_TO_DIFFUSERS = {v: k for k, v in _MID_TO_OFFICIAL.items()}


def _swap_head(rest: str, table: dict[str, str]) -> str:
    """Replace the leading component(s) of ``rest`` found in ``table`` (longest first)."""
    for old in sorted(table, key=len, reverse=True):
        if rest.startswith(old + "."):
            return table[old] + rest[len(old):]
    return rest


def diffusers_to_official(key: str, num_res_blocks: int = 2) -> str | None:
    """Official name of a diffusers ``AutoencoderKLWan`` parameter, or None if the key is not one of them."""
    stride = num_res_blocks + 2  # decoder stage in the official flat list: (num_res_blocks + 1) res blocks + 1 upsample
    top, _, rest = key.partition(".")
    if top in _TOP_TO_OFFICIAL:
        return f"{_TOP_TO_OFFICIAL[top]}.{rest}"
    if top not in ("encoder", "decoder"):
        return None
    sub, _, rest = rest.partition(".")
    if sub in _EDGE_TO_OFFICIAL:
        return f"{top}.{_EDGE_TO_OFFICIAL[sub]}.{rest}"
    if sub == "mid_block":
        m = re.match(r"(resnets\.[01]|attentions\.0)\.(.+)$", rest)
        if not m:
            return None
        return f"{top}.{_MID_TO_OFFICIAL[m.group(1)]}.{_swap_head(m.group(2), _RES_TO_OFFICIAL)}"
    if top == "encoder" and sub == "down_blocks":
        m = re.match(r"(\d+)\.(.+)$", rest)
        return f"encoder.downsamples.{m.group(1)}.{_swap_head(m.group(2), _RES_TO_OFFICIAL)}" if m else None
    if top == "decoder" and sub == "up_blocks":
        m = re.match(r"(\d+)\.resnets\.(\d+)\.(.+)$", rest)
        if m:
            index = stride * int(m.group(1)) + int(m.group(2))
            return f"decoder.upsamples.{index}.{_swap_head(m.group(3), _RES_TO_OFFICIAL)}"
        m = re.match(r"(\d+)\.upsamplers\.0\.(.+)$", rest)
        if m:
            return f"decoder.upsamples.{stride * int(m.group(1)) + num_res_blocks + 1}.{m.group(2)}"
    return None


def official_to_diffusers(key: str, num_res_blocks: int = 2) -> str | None:
    """diffusers ``AutoencoderKLWan`` name of an official Wan VAE parameter (None if not one)."""
    stride = num_res_blocks + 2
    top, _, rest = key.partition(".")
    if top in _TOP_TO_DIFFUSERS:
        return f"{_TOP_TO_DIFFUSERS[top]}.{rest}"
    if top not in ("encoder", "decoder"):
        return None
    for old, new in _EDGE_TO_DIFFUSERS.items():
        if rest.startswith(old + "."):
            return f"{top}.{new}{rest[len(old):]}"
    m = re.match(r"(middle\.[012])\.(.+)$", rest)
    if m:
        return f"{top}.mid_block.{_MID_TO_DIFFUSERS[m.group(1)]}.{_swap_head(m.group(2), _RES_TO_DIFFUSERS)}"
    m = re.match(r"downsamples\.(\d+)\.(.+)$", rest)
    if top == "encoder" and m:
        return f"encoder.down_blocks.{m.group(1)}.{_swap_head(m.group(2), _RES_TO_DIFFUSERS)}"
    m = re.match(r"upsamples\.(\d+)\.(.+)$", rest)
    if top == "decoder" and m:
        block, r = divmod(int(m.group(1)), stride)
        if r == num_res_blocks + 1:
            return f"decoder.up_blocks.{block}.upsamplers.0.{m.group(2)}"
        return f"decoder.up_blocks.{block}.resnets.{r}.{_swap_head(m.group(2), _RES_TO_DIFFUSERS)}"
    return None


# Wan 2.2 VAE (docs/wan22.md section 3): stages hold their own lists, official
# ``encoder.downsamples.<i>.downsamples.<j>`` / ``decoder.upsamples.<i>.upsamples.<j>`` <-> diffusers
# ``encoder.down_blocks.<i>.resnets.<j>`` (+ ``.downsampler``) / ``decoder.up_blocks.<i>.resnets.<j>``
# (+ ``.upsampler``)
_STAGE22 = {"encoder": ("downsamples", "down_blocks", "downsampler"),
            "decoder": ("upsamples", "up_blocks", "upsampler")}


def is_wan22_layout(keys: Iterable[str]) -> bool:
    """True for Wan 2.2 VAE names, official or diffusers (stage-nested encoder lists)."""
    pat = re.compile(r"encoder\.(downsamples\.\d+\.downsamples|down_blocks\.\d+\.resnets)\.")
    return any(pat.match(k) for k in keys)


def official22_to_diffusers(key: str, num_res_blocks: int = 2) -> str | None:
    """diffusers ``AutoencoderKLWan(is_residual=True)`` name of an official Wan 2.2 VAE parameter (None if not one)."""
    top, _, rest = key.partition(".")
    if top in _STAGE22:
        own, blocks, resample = _STAGE22[top]
        m = re.match(rf"{own}\.(\d+)\.{own}\.(\d+)\.(.+)$", rest)
        if m:
            i, j, tail = int(m.group(1)), int(m.group(2)), m.group(3)
            per_stage = num_res_blocks + (1 if top == "decoder" else 0)
            if j == per_stage:
                return f"{top}.{blocks}.{i}.{resample}.{tail}"
            return f"{top}.{blocks}.{i}.resnets.{j}.{_swap_head(tail, _RES_TO_DIFFUSERS)}"
        if rest.startswith(own + "."):
            return None
    return official_to_diffusers(key, num_res_blocks)


def diffusers22_to_official(key: str, num_res_blocks: int = 2) -> str | None:
    """Official name of a diffusers ``AutoencoderKLWan(is_residual=True)`` (Wan 2.2) parameter (None if not one)."""
    top, _, rest = key.partition(".")
    if top in _STAGE22:
        own, blocks, resample = _STAGE22[top]
        per_stage = num_res_blocks + (1 if top == "decoder" else 0)
        m = re.match(rf"{blocks}\.(\d+)\.resnets\.(\d+)\.(.+)$", rest)
        if m:
            tail = _swap_head(m.group(3), _RES_TO_OFFICIAL)
            return f"{top}.{own}.{m.group(1)}.{own}.{m.group(2)}.{tail}"
        m = re.match(rf"{blocks}\.(\d+)\.{resample}\.(.+)$", rest)
        if m:
            return f"{top}.{own}.{m.group(1)}.{own}.{per_stage}.{m.group(2)}"
        if rest.startswith(blocks + "."):
            return None
    return diffusers_to_official(key, num_res_blocks)


def detect_key_format(keys: Iterable[str]) -> str | None:
    """``"official"`` (also ComfyUI), ``"diffusers"``, or None when the keys are not a Wan 2.1 VAE's."""
    keys = list(keys)
    if any(k.startswith("decoder.up_blocks.") for k in keys) and any(k.startswith("post_quant_conv.") for k in keys):
        return DIFFUSERS
    if any(k.startswith("decoder.upsamples.") for k in keys) and any(k.startswith("conv2.") for k in keys):
        return OFFICIAL
    return None


def diffusers_num_res_blocks(keys: Iterable[str]) -> int:
    """``num_res_blocks`` of a diffusers-named VAE: decoder stages hold num_res_blocks + 1 resnets."""
    found = [int(m.group(1)) for k in keys if (m := re.match(r"decoder\.up_blocks\.0\.resnets\.(\d+)\.", k))]
    return max(found) if found else 2


def to_official(sd: LazyStateDict) -> LazyStateDict:
    """A view of a diffusers-named VAE state dict under official names (unknown keys keep their name)."""
    nrb = diffusers_num_res_blocks(sd)
    if is_wan22_layout(sd):  # decoder stages hold num_res_blocks + 1 resnets as in 2.1
        return sd.rename(lambda k: diffusers22_to_official(k, nrb) or k)
    return sd.rename(lambda k: diffusers_to_official(k, nrb) or k)
