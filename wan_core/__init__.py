"""WanCore: a pure-PyTorch implementation of Wan 2.1 text-to-video (no ComfyUI import).

Public API (DESIGN.md section 4): ``load_dit``, ``load_vae``, ``load_text_encoder``; other entry points are
re-exported from their subpackages. Heavy optional dependencies (transformers, diffusers) are imported
lazily so ``import wan_core`` stays cheap.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> "module:attribute", resolved on first access
_EXPORTS = {
    "load_dit": "wan_core.dit.loader:load_dit",
    "WanDiT": "wan_core.dit.model:WanDiT",
    "DiTConfig": "wan_core.config:DiTConfig",
    "TextEncoderConfig": "wan_core.config:TextEncoderConfig",
    "detect_dit_config": "wan_core.config:detect_dit_config",
    "CheckpointError": "wan_core.checkpoint:CheckpointError",
    "load_text_encoder": "wan_core.text.encoder:load_text_encoder",
    "load_vae": "wan_core.vae.loader:load_vae",
}


def __getattr__(name: str):
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'wan_core' has no attribute {name!r}")
    module_name, attr = target.split(":")
    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = sorted(_EXPORTS)
