"""WanCore: a pure-PyTorch implementation of Wan 2.1 text-to-video (no ComfyUI import).

Public API (docs/design.md section 4): ``load_dit``, ``load_vae``, ``load_text_encoder``; other entry points are
re-exported from their subpackages. Heavy optional dependencies (transformers, diffusers) are imported
lazily so ``import wan_core`` stays cheap.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> "module:attribute", resolved on first access
_EXPORTS = {
    # models (docs/design.md section 4)
    "load_dit": "wan_core.dit.loader:load_dit",
    "ModelOptions": "wan_core.dit.options:ModelOptions",
    "WanDiT": "wan_core.dit.model:WanDiT",
    "load_vae": "wan_core.wfvae.loader:load_vae",  # Wan VAE, or an Open-Sora Plan WF-VAE
    "WFVAE": "wan_core.wfvae.autoencoder:WFVAE",
    "WanVAE": "wan_core.vae.loader:WanVAE",
    "VAETilingWarning": "wan_core.vae.loader:VAETilingWarning",
    "load_text_encoder": "wan_core.text.encoder:load_text_encoder",
    "TextEncoder": "wan_core.text.encoder:TextEncoder",
    "CheckpointError": "wan_core.checkpoint:CheckpointError",
    "load_clip_vision": "wan_core.i2v.clip_vision:load_clip_vision",
    "CLIPVisionEncoder": "wan_core.i2v.clip_vision:CLIPVisionEncoder",
    # configs
    "DiTConfig": "wan_core.config:DiTConfig",
    "TextEncoderConfig": "wan_core.config:TextEncoderConfig",
    "VAEConfig": "wan_core.vae.config:VAEConfig",
    "detect_dit_config": "wan_core.config:detect_dit_config",
    "detect_vae_config": "wan_core.vae.config:detect_vae_config",
    # generation
    "WanPipeline": "wan_core.pipeline:WanPipeline",
    "GenerationConfig": "wan_core.pipeline:GenerationConfig",
    "build_schedule": "wan_core.sampling:build_schedule",
    "ScheduleConfig": "wan_core.sampling:ScheduleConfig",
    "sample": "wan_core.sampling:sample",
    "ClassifierFreeGuidance": "wan_core.sampling:ClassifierFreeGuidance",
    "make_noise": "wan_core.sampling:make_noise",
    "SamplingInterrupted": "wan_core.sampling:SamplingInterrupted",
    "DEFAULT_NEGATIVE_PROMPT": "wan_core.sampling:DEFAULT_NEGATIVE_PROMPT",
    # acceleration
    "AttentionDispatch": "wan_core.attention.dispatch:AttentionDispatch",
    "AttentionOverride": "wan_core.attention.dispatch:AttentionOverride",
    "register_attention_backend": "wan_core.attention.dispatch:register_backend",
    "FP8Linear": "wan_core.quant.fp8:FP8Linear",
    # LoRA (docs/lora.md)
    "apply_lora": "wan_core.lora:apply_lora",
    "remove_loras": "wan_core.lora:remove_loras",
    "LoraError": "wan_core.lora:LoraError",
    # training (the loop itself is wan_core.train.train)
    "flow_matching_loss": "wan_core.train.loss:flow_matching_loss",
    "BucketSampler": "wan_core.train.bucket_sampler:BucketSampler",
    "AdaptiveGradClipper": "wan_core.train.grad_clip:AdaptiveGradClipper",
    "GradientSpikeError": "wan_core.train.grad_clip:GradientSpikeError",
    "SUVWanDiT": "wan_core.train.suv_dit:SUVWanDiT",
    "TrainConfig": "wan_core.train.loop:TrainConfig",
    # frames
    "image_to_video": "wan_core.vae.image:image_to_video",
    "video_to_image": "wan_core.vae.image:video_to_image",
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
