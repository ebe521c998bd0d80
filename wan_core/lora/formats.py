"""Reading a LoRA file: every tensor grouped by the layer it patches, the naming detected from the keys
(docs/lora.md section 1).

Layouts in circulation for Wan: official/ComfyUI names (``diffusion_model.blocks.0.self_attn.q.lora_A.weight``
or ``lora_down``/``lora_up`` + ``.alpha``), kohya/musubi (``lora_unet_blocks_0_self_attn_q.lora_down.weight``),
diffusers/PEFT (``transformer.blocks.0.attn1.to_q.lora_A.weight``, alpha possibly in the safetensors header),
and the full-weight deltas of distilled LoRAs (``.diff``, ``.diff_b``). The file is read once and kept in
memory (LoRAs are small next to the DiT), so re-applying it never reads it again.
"""
from __future__ import annotations

import json
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..checkpoint import CheckpointError, Source, open_checkpoint
from .names import is_diffusers_name, is_kohya, split_key, strip_prefixes

LAYOUTS = ("official", "kohya", "diffusers")


@dataclass(eq=False)
class LoraFile:
    """A LoRA read into memory. ``layers``: layer name as written in the file -> role ("down", "up",
    "alpha", "diff", "diff_b", "up_bias", ...) -> tensor; ``other``: keys whose suffix no LoRA uses;
    ``alpha``: the PEFT ``lora_alpha`` of the file header (None when absent); ``layout``: one of LAYOUTS."""

    source: str
    layout: str
    layers: dict[str, dict[str, torch.Tensor]]
    keys: dict[tuple[str, str], str] = field(default_factory=dict)  # (layer, role) -> original key
    other: list[str] = field(default_factory=list)
    alpha: float | None = None
    alpha_pattern: dict[str, float] = field(default_factory=dict)  # PEFT: module name (suffix) -> alpha

    @property
    def name(self) -> str:
        return Path(self.source).name if not self.source.startswith("<") else self.source

    def alpha_for(self, layer: str) -> float | None:
        """The header's alpha for ``layer`` (PEFT ``alpha_pattern`` by module-name suffix, else ``lora_alpha``)."""
        name = strip_prefixes(layer)
        for pattern, value in self.alpha_pattern.items():
            if name == pattern or name.endswith("." + pattern):
                return value
        return self.alpha

    def key(self, layer: str, role: str) -> str:
        return self.keys.get((layer, role), f"{layer}.{role}")

    def all_keys(self) -> list[str]:
        return list(self.keys.values()) + self.other


def detect_layout(layers) -> str:
    """"kohya" | "diffusers" | "official" from the layer names (after prefix stripping)."""
    names = list(layers)
    if any(is_kohya(n) for n in names):
        return "kohya"
    if any(is_diffusers_name(strip_prefixes(n)) for n in names):
        return "diffusers"
    return "official"


def _header_alpha(metadata: dict) -> tuple[float | None, dict[str, float]]:
    """PEFT's ``lora_alpha`` and ``alpha_pattern`` as diffusers' ``save_lora_weights`` writes them into the
    safetensors header: JSON under ``lora_adapter_metadata``, keys prefixed with the component
    (``"transformer.lora_alpha"``)."""
    raw = metadata.get("lora_adapter_metadata")
    if not raw:
        return None, {}
    try:
        meta = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except (ValueError, TypeError, RecursionError):
        return None, {}
    alpha = meta.get("transformer.lora_alpha", meta.get("lora_alpha"))
    pattern = meta.get("transformer.alpha_pattern", meta.get("alpha_pattern")) or {}
    try:
        return (None if alpha is None else float(alpha)), {str(k): float(v) for k, v in dict(pattern).items()}
    except (TypeError, ValueError):
        return None, {}


def from_state_dict(tensors, source: str = "<state dict>", metadata: dict | None = None) -> LoraFile:
    """Group ``{key: tensor}`` by layer (see :class:`LoraFile`)."""
    layers: dict[str, dict[str, torch.Tensor]] = {}
    keys: dict[tuple[str, str], str] = {}
    other: list[str] = []
    for key, t in tensors.items():
        parts = split_key(key)
        if parts is None:
            other.append(key)
            continue
        layer, role = parts
        layers.setdefault(layer, {})[role] = t
        keys[(layer, role)] = key
    alpha, pattern = _header_alpha(metadata or {})
    return LoraFile(source, detect_layout(layers), layers, keys, other, alpha, pattern)


_CACHE: OrderedDict[tuple, LoraFile] = OrderedDict()
_CACHE_SIZE = 4


def read_lora(src: Source) -> LoraFile:
    """Read a LoRA file (``.safetensors`` or ``.pth``/``.pt``, loaded with ``weights_only``) or take a
    ``{key: tensor}`` dict. The last few files read are kept (keyed by path, size and modification time), so
    changing a strength in a graph does not read the file again."""
    if not isinstance(src, (str, os.PathLike)):
        sd = open_checkpoint(src)
        return from_state_dict({k: sd[k] for k in sd}, sd.source, sd.metadata)
    path = Path(os.fspath(src)).expanduser()
    if path.is_dir():
        raise CheckpointError(f"{path}: a folder, not a LoRA file; give the .safetensors file itself")
    try:
        stat = path.stat()
    except OSError:
        raise CheckpointError(f"{path}: no such LoRA file") from None
    cache_key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    cached = _CACHE.get(cache_key)
    if cached is not None:
        _CACHE.move_to_end(cache_key)
        return cached
    sd = open_checkpoint(path)
    lora = from_state_dict({k: sd[k] for k in sd}, sd.source, sd.metadata)
    _CACHE[cache_key] = lora
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return lora
