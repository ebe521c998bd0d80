"""Matching a LoRA against a DiT: which parameter each tensor patches, and refusals that name the file, what
the LoRA is for and the first key that does not fit (docs/lora.md section 3).

``match_lora(lora, model) -> (patches, unused)``: every patch names an existing parameter with a delta of the
right shape; ``unused`` lists the keys that patch nothing in this model (with why), for the caller to report.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from ..checkpoint import CheckpointError, describe_keys
from ..numerics import nonfinite_count
from ..quant.gguf_linear import quantized_shapes
from .formats import LoraFile
from .names import OTHER_ADAPTERS, i2v_names, is_i2v_layer, kohya_table, official_layer


class LoraError(CheckpointError):
    """A LoRA that cannot be applied to this model; the message names the file, what the LoRA is for and the
    first key that does not fit."""


@dataclass(eq=False)
class Patch:
    """One change to one parameter: ``scale * up @ down`` (low rank; ``up [out, r, ...]``, ``down [r, in, ...]``)
    or ``scale * diff`` (a full delta of the parameter's shape). ``key``: the file's key, for messages."""

    param: str
    key: str
    up: torch.Tensor | None = None
    down: torch.Tensor | None = None
    diff: torch.Tensor | None = None
    scale: float = 1.0

    @property
    def low_rank(self) -> bool:
        return self.diff is None

    def delta_shape(self) -> tuple[int, ...]:
        if self.diff is not None:
            return tuple(self.diff.shape)
        assert self.up is not None and self.down is not None
        return (self.up.shape[0], math.prod(self.down.shape[1:]))

    def delta(self, shape: torch.Size | tuple[int, ...], device=None) -> torch.Tensor:
        """The change ``scale * (up @ down)`` or ``scale * diff`` in float32, shaped like the parameter."""
        if self.diff is not None:
            return (self.diff.to(device=device, dtype=torch.float32) * self.scale).reshape(shape)
        assert self.up is not None and self.down is not None
        up = self.up.to(device=device, dtype=torch.float32).flatten(1)
        down = self.down.to(device=device, dtype=torch.float32).flatten(1)
        return ((up @ down) * self.scale).reshape(shape)


# Families a LoRA may be made for, recognised from its key names (lower case) when none fits a Wan DiT.
_FAMILIES = (
    (("individual_token_refiner",), "HunyuanVideo"),
    (("txt_in",), "HunyuanVideo"),
    (("double_blocks",), "Flux"),
    (("single_blocks",), "Flux"),
    (("single_transformer_blocks",), "Flux"),
    (("joint_blocks",), "Stable Diffusion 3"),
    (("lora_te2_",), "Stable Diffusion XL"),
    (("text_encoder_2",), "Stable Diffusion XL"),
    (("input_blocks",), "Stable Diffusion (UNet)"),
    (("down_blocks",), "Stable Diffusion (UNet)"),
    (("lora_te_",), "Stable Diffusion (UNet)"),
    (("transformer_blocks",), "another video/image transformer (LTX-Video, CogVideoX, Mochi, ...)"),
)
_SIZES = {1536: "Wan 1.3B", 5120: "Wan 14B", 3072: "Wan 2.2 5B"}


def lora_family(keys) -> str | None:
    """What non-Wan model a LoRA is for, from its key names (None when it does not look like one)."""
    lowered = [k.lower() for k in keys]
    for markers, family in _FAMILIES:
        if any(all(m in k for m in markers) for k in lowered):
            return family
    return None


_WAN_KEY = re.compile(  # a Wan DiT layer right after a known prefix (so SD's "transformer_blocks_0_attn1" is not)
    r"^(?:model\.diffusion_model\.|diffusion_model\.|transformer\.|base_model\.model\.|lora_unet_|lycoris_)?"
    r"(?:(?:vace_)?blocks[._]\d+[._](?:self_attn|cross_attn|ffn|attn1|attn2|norm3|norm2|modulation|scale_shift)"
    r"|head[._]head|(?:vace_)?patch_embedding|text_embedding|time_embedding|time_projection|img_emb|condition_embedder"
    r"|proj_out)")


def foreign_lora(keys) -> str | None:
    """From key names alone (before a model is at hand, e.g. a node's pre-queue check): what a file that has no
    key of a Wan DiT layer is for (``lora_family``, or "another model"); None when some key looks like Wan."""
    keys = list(keys)
    if not keys or any(_WAN_KEY.match(k) for k in keys):
        return None
    return lora_family(keys) or "another model (no key names a Wan DiT layer)"


def _size(width: int) -> str:
    return _SIZES.get(width, f"width {width}")


def _lora_width(patches: list[tuple[Patch, tuple[int, ...]]]) -> int | None:
    """The DiT width a LoRA was made for, from a self-attention projection it patches."""
    for patch, _ in patches:
        if ".self_attn." in patch.param or ".cross_attn." in patch.param:
            return patch.delta_shape()[0]
    return None


def _scale(lora: LoraFile, layer: str, roles: dict[str, torch.Tensor], rank: int) -> float:
    alpha = roles.get("alpha")
    value = float(alpha.float().reshape(-1)[0]) if alpha is not None else lora.alpha_for(layer)
    return 1.0 if value is None else value / rank


def _target_names(model: nn.Module) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    params = {n: tuple(p.shape) for n, p in model.named_parameters()}
    params.update(quantized_shapes(model))  # GGUF weights: buffers of bytes, patched by their logical shape
    modules = [n for n, _ in model.named_modules() if n]
    layers = getattr(getattr(model, "config", None), "num_layers", 0)
    return params, kohya_table(modules + list(params) + i2v_names(layers))


@dataclass
class _Matching:
    """One ``match_lora`` call in progress: the patches found (with the target's shape), why each other key is
    not used, the keys consumed and the layers this model lacks ``[(key, official name)]``."""

    lora: LoraFile
    params: dict[str, tuple[int, ...]]
    patches: list[tuple[Patch, tuple[int, ...]]] = field(default_factory=list)
    why: dict[str, str] = field(default_factory=dict)
    consumed: set[str] = field(default_factory=set)
    missing: list[tuple[str, str]] = field(default_factory=list)

    def layer_missing(self, layer: str, key: str, name: str) -> None:
        self.missing.append((key, name))
        for role in self.lora.layers[layer]:
            self.why.setdefault(self.lora.key(layer, role), f"this model has no {name}")

    def target(self, layer: str, name: str, leaf: str, key: str) -> str | None:
        for cand in (f"{name}.{leaf}", name) if leaf == "weight" else (f"{name}.{leaf}",):
            if cand in self.params:
                return cand
        self.layer_missing(layer, key, f"{name}.{leaf}")
        return None

    def add(self, patch: Patch) -> None:
        self.patches.append((patch, self.params[patch.param]))

    def low_rank(self, layer: str, name: str, roles: dict[str, torch.Tensor]) -> None:
        """``lora_down`` / ``lora_up`` (with alpha and an ``up_bias``) of one layer."""
        lora = self.lora
        if "down" not in roles or "up" not in roles:
            have, lack = ("down", "up") if "down" in roles else ("up", "down")
            self.why[lora.key(layer, have)] = f"lora_{have} without its lora_{lack}"
            return
        param = self.target(layer, name, "weight", lora.key(layer, "down"))
        down, up = roles["down"], roles["up"]
        scale = _scale(lora, layer, roles, down.shape[0])
        if param is not None:
            self.add(Patch(param, lora.key(layer, "down"), up=up, down=down, scale=scale))
            self.consumed.update(lora.key(layer, r) for r in ("down", "up", "alpha") if r in roles)
        if "up_bias" in roles:
            bias = self.target(layer, name, "bias", lora.key(layer, "up_bias"))
            if bias is not None:
                self.add(Patch(bias, lora.key(layer, "up_bias"), diff=roles["up_bias"], scale=scale))
                self.consumed.add(lora.key(layer, "up_bias"))


def match_lora(lora: LoraFile, model: nn.Module) -> tuple[list[Patch], list[tuple[str, str]]]:
    """The patches ``lora`` makes to ``model`` and the keys it leaves unused ``[(key, reason)]``.

    Raises :class:`LoraError` for a file that is not a LoRA, a LoRA for another model family, for another
    Wan size (shapes), or for image-to-video layers this model lacks."""
    params, kohya = _target_names(model)
    m = _Matching(lora, params, why={k: "not a LoRA tensor name" for k in lora.other})
    for layer, roles in lora.layers.items():
        name = official_layer(layer, kohya)
        if name is None:
            m.layer_missing(layer, lora.key(layer, next(iter(roles))), layer)
            continue
        if "down" in roles or "up" in roles:
            m.low_rank(layer, name, roles)
        elif "alpha" in roles:
            m.why[lora.key(layer, "alpha")] = "alpha without lora_down/lora_up"
        for role, leaf in (("diff", "weight"), ("diff_b", "bias")):
            if role in roles:
                param = m.target(layer, name, leaf, lora.key(layer, role))
                if param is not None:
                    m.add(Patch(param, lora.key(layer, role), diff=roles[role]))
                    m.consumed.add(lora.key(layer, role))
        for role in ("mid", "dora_scale"):
            if role in roles:
                what = "LoCon/Tucker mid weights" if role == "mid" else "DoRA magnitudes"
                m.why[lora.key(layer, role)] = f"{what} are not supported"
    _refuse(lora, model, m.patches, m.missing)
    _refuse_nonfinite(lora, [p for p, _ in m.patches], m.consumed)
    unused = [(k, m.why.get(k, "patches nothing in this model")) for k in lora.all_keys() if k not in m.consumed]
    return [p for p, _ in m.patches], unused


def _refuse_nonfinite(lora: LoraFile, patches: list[Patch], consumed: set[str]) -> None:
    """NaN/Inf in a tensor the LoRA applies (``consumed`` keys), or a non-finite alpha (in the file or its
    header), would make every output NaN: refused here, naming the LoRA and the key, as the model loaders
    refuse such weights."""
    for (layer, role), key in lora.keys.items():
        t = lora.layers[layer][role]
        bad = nonfinite_count(t) if key in consumed else 0
        if bad:
            raise LoraError(f"{lora.name}: {key} holds NaN/Inf values ({bad} of {t.numel()}); the LoRA file is "
                            f"corrupt or was saved from a diverged training run")
    for patch in patches:
        if not math.isfinite(patch.scale):
            raise LoraError(f"{lora.name}: the alpha of {patch.key} makes its scale {patch.scale}; alpha must be a "
                            f"finite number (the file or its header is corrupt)")


def _refuse(lora: LoraFile, model: nn.Module, patches, missing) -> None:
    file = lora.name
    keys = lora.all_keys()
    for marker, kind in OTHER_ADAPTERS.items():
        first = next((k for k in keys if marker in k), None)
        if first is not None and not patches:
            raise LoraError(f"{file}: a {kind} adapter, not a LoRA; {kind} is not supported (first key: {first})")
    if not lora.layers:
        raise LoraError(f"{file}: not a LoRA (no lora_A/lora_B, lora_down/lora_up or .diff tensors); it looks "
                        f"like {describe_keys(keys)}")
    i2v = next(((k, n) for k, n in missing if is_i2v_layer(n)), None)
    if not patches:
        family = lora_family(keys)
        first = missing[0][0] if missing else keys[0]
        if family is not None:
            raise LoraError(f"{file}: a LoRA for {family}, not for the Wan DiT; first key that matches no layer "
                            f"of this model: {first}")
        if i2v is None:
            raise LoraError(f"{file}: no key of this LoRA matches a layer of the Wan DiT ({lora.layout} naming); "
                            f"first key: {first}")
    if i2v is not None:
        raise LoraError(f"{file}: a LoRA for Wan image-to-video: it patches image cross-attention layers that "
                        f"this text-to-video model does not have; first such key: {i2v[0]}")
    for patch, shape in patches:
        if math.prod(patch.delta_shape()) != math.prod(shape) or patch.delta_shape()[0] != shape[0]:
            width = getattr(getattr(model, "config", None), "dim", None)
            lora_width = _lora_width(patches)
            made_for = f"made for {_size(lora_width)}" if lora_width and lora_width != width else "of another size"
            this = f" ({_size(width)})" if width else ""
            raise LoraError(f"{file}: a LoRA {made_for}, not for this model{this}: first mismatching key "
                            f"{patch.key} changes {patch.param} by {list(patch.delta_shape())} but the parameter "
                            f"is {list(shape)}")
        if patch.up is not None and patch.down is not None and patch.up.shape[1] != patch.down.shape[0]:
            raise LoraError(f"{file}: broken LoRA: {patch.key} has rank {patch.down.shape[0]} but its up matrix "
                            f"has {patch.up.shape[1]} columns")
