"""Offload policies per model part (docs/memory.md section 3): where the text encoder, the VAE and the DiT live
between the stages of a generation, without ComfyUI (the CLI, scripts). Inside ComfyUI the host's model
management does this for our models (``nodes/host.py``).

Stages: encode prompts (text encoder) -> sample (DiT) -> decode (VAE). Defaults keep only the model that works
on the compute device: the text encoder is released once the embeddings exist (they are what the sampler
needs), the DiT waits in CPU memory while the text encoder runs and is released after sampling, the VAE is
brought in for the decode only.
"""
from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn as nn

from ..dit.runtime import runtime_of

__all__ = ["DIT_OFFLOAD", "TEXT_ENCODER_OFFLOAD", "VAE_OFFLOAD", "OffloadPolicy", "free_device_cache", "move",
           "release", "resident_parts"]

TEXT_ENCODER_OFFLOAD = ("release", "keep", "cpu")
VAE_OFFLOAD = ("decode", "keep")
DIT_OFFLOAD = ("release", "keep")
TextEncoderOffload = Literal["release", "keep", "cpu"]  # mirrors TEXT_ENCODER_OFFLOAD
VaeOffload = Literal["decode", "keep"]  # mirrors VAE_OFFLOAD
DitOffload = Literal["release", "keep"]  # mirrors DIT_OFFLOAD
CPU = torch.device("cpu")


@dataclass(frozen=True)
class OffloadPolicy:
    """Where each part lives between stages.

    text_encoder: "release" (on the compute device to encode, then freed: the embeddings are kept) | "keep"
      (stays on the device) | "cpu" (loaded and run on the CPU: slower encoding, no device memory).
    vae: "decode" (in CPU memory until the decode, then on the device) | "keep" (on the device throughout).
    dit: "release" (freed after sampling, before the decode) | "keep".
    """

    text_encoder: TextEncoderOffload = "release"
    vae: VaeOffload = "decode"
    dit: DitOffload = "release"

    def __post_init__(self):
        for name, allowed in (("text_encoder", TEXT_ENCODER_OFFLOAD), ("vae", VAE_OFFLOAD), ("dit", DIT_OFFLOAD)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} offload must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")

    def load_device(self, part: str, device: torch.device) -> torch.device:
        """Where to load ``part`` ("dit" | "vae" | "text_encoder") for a run on ``device``."""
        if device.type == "cpu":
            return device
        if part == "text_encoder":
            return CPU if self.text_encoder == "cpu" else device
        if part == "vae":
            return CPU if self.vae == "decode" else device
        if part == "dit":  # waits in RAM while the text encoder holds the device
            return CPU if self.text_encoder == "release" else device
        raise ValueError(f"unknown model part {part!r}")


def _modules(model: Any) -> list[nn.Module]:
    if isinstance(model, nn.Module):
        return [model]
    inner = getattr(model, "model", None)  # TextEncoder, WanVAE wrap an nn.Module as .model
    return [inner] if isinstance(inner, nn.Module) else []


def _swapped_children(module: nn.Module) -> list[nn.Module]:
    return [c for c in module.children() if runtime_of(c).block_swap is not None]


def resident_parts(module: nn.Module) -> list[nn.Module]:
    """The modules that go to the compute device: a block-swapped DiT's resident modules (its swapped blocks stay
    in pinned RAM), each child's for a module whose children swap blocks (a ``WanMoE`` of swapped experts,
    docs/wan22.md section 6), else the module itself."""
    swap = runtime_of(module).block_swap
    if swap is not None:
        return list(swap.resident_modules())
    if _swapped_children(module):
        return [part for child in module.children() for part in resident_parts(child)]
    return [module]


def move(model: Any, device: torch.device | str) -> Any:
    """``model.to(device)`` for a WanDiT, WanMoE, WanVAE or TextEncoder (a DiT with block swap, or each expert
    with one, keeps its swapped blocks where they are); frees the device cache when moving off a GPU."""
    if model is None:
        return None
    if isinstance(model, nn.Module):
        for module in resident_parts(model):
            module.to(device)
    else:
        model.to(device)
    if torch.device(device).type == "cpu":
        free_device_cache()
    return model


def release(model: Any) -> None:
    """Free a model's weights now, also while other references to it exist: every parameter and buffer moves
    to the ``meta`` device (no storage); the model cannot run afterwards."""
    for module in _modules(model):
        for part in (module, *_swapped_children(module)):  # a WanMoE: each expert's swap
            swap = runtime_of(part).block_swap
            if swap is not None:
                swap.remove(bring_back=False)
        module.to("meta")
    clear = getattr(model, "clear_cache", None)
    if callable(clear):  # the text encoder's prompt cache
        clear()
    free_device_cache()


def free_device_cache() -> None:
    """Collect garbage and hand the CUDA caching allocator's free blocks back (a no-op without CUDA)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
