"""CLIP vision encoder of Wan 2.1 I2V / FLF2V (docs/i2v.md section 3): transformers' ``CLIPVisionModel`` loaded
from ComfyUI's ``clip_vision_h.safetensors`` (transformers names under ``vision_model.``) or a transformers folder.

``load_clip_vision(src).encode(images)``: ComfyUI IMAGE ``[N, H, W, 3]`` in [0, 1] -> the penultimate hidden
states ``[N, 257, 1280]`` the DiT's ``img_emb`` takes. Preprocessing is the official one (Wan-Video/Wan2.1
``wan/modules/clip.py`` lines 527-537 and 457-465): bicubic resize straight to 224x224 (``F.interpolate``,
align_corners=False, no antialias, no crop), then OpenAI CLIP mean/std. diffusers' ``CLIPImageProcessor``
(WanImageToVideoPipeline) and ComfyUI's ``clip_preprocess`` (CLIPVisionEncode with crop="center") resize the
short side and centre-crop instead, so for non-square images they see a different picture. The official model
stops after block 31 of 32 (``use_31_block``, clip.py lines 295-297): ``hidden_states[-2]`` of transformers.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from ..checkpoint import (CheckpointError, LazyStateDict, Source, check_shapes, describe_keys, materialize,
                         open_checkpoint)

__all__ = ["CLIP_MEAN", "CLIP_STD", "CLIPVisionEncoder", "load_clip_vision", "preprocess"]

# OpenAI CLIP normalisation (official clip.py lines 457-458)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
PREFIXES = ("clip_vision.", "conditioner.embedders.0.", "model.")  # all-in-one files; plain keys start vision_model.


def preprocess(images: torch.Tensor, size: int = 224) -> torch.Tensor:
    """IMAGE ``[N, H, W, 3]`` (or ``[N, H, W, 4]``, alpha dropped) in [0, 1] -> ``[N, 3, size, size]`` normalised
    pixels, as the official ``CLIPModel.visual`` does it."""
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or images.shape[-1] not in (3, 4):
        shape = list(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"CLIP vision: expected an IMAGE [N, H, W, 3] in [0, 1], got {shape}")
    x = images[..., :3].movedim(-1, 1).float()
    x = F.interpolate(x * 2 - 1, size=(size, size), mode="bicubic", align_corners=False) * 0.5 + 0.5
    mean = torch.tensor(CLIP_MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(CLIP_STD, device=x.device).view(1, 3, 1, 1)
    return (x - mean) / std


class CLIPVisionEncoder:
    """A transformers ``CLIPVisionModel`` with Wan's preprocessing; ``encode`` -> penultimate hidden states."""

    def __init__(self, model, source: str = "<model>"):
        self.model = model.eval()
        self.source = source

    @property
    def config(self):
        return self.model.config

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    def to(self, *args, **kwargs) -> "CLIPVisionEncoder":
        self.model.to(*args, **kwargs)
        return self

    @torch.no_grad()
    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """IMAGE ``[N, H, W, 3]`` in [0, 1] -> ``[N, 1 + (224/14)^2 = 257, hidden]`` float32 (``hidden_states[-2]``)."""
        pixels = preprocess(images, int(self.model.config.image_size)).to(self.device, self.dtype)
        out = self.model(pixel_values=pixels, output_hidden_states=True)
        return out.hidden_states[-2].float()

    def __repr__(self) -> str:
        c = self.model.config
        return (f"CLIPVisionEncoder(hidden {c.hidden_size}, {c.num_hidden_layers} layers, dtype={self.dtype}, "
                f"source={self.source!r})")


def _vision_state_dict(src: Source) -> LazyStateDict:
    sd = open_checkpoint(src)
    prefix = next((p for p in ("",) + PREFIXES if any(k.startswith(p + "vision_model.encoder.layers.") for k in sd)),
                  None)
    if prefix is not None:
        keep = prefix + "vision_model."
        # visual_projection (CLIPVisionModelWithProjection) and a full CLIP's text tower are not used
        return sd.rename(lambda k: k[len(prefix):] if k.startswith(keep) else None)
    if "embeddings.patch_embedding.weight" in sd and any(k.startswith("encoder.layers.") for k in sd):
        return sd.rename(lambda k: f"vision_model.{k}")  # CLIPVisionModel saved by transformers >= 5: no wrapper
    raise CheckpointError(f"{sd.source}: not a CLIP vision model; it looks like {describe_keys(sd.keys())}. Pick "
                          f"the CLIP vision file of Wan 2.1 image-to-video (clip_vision_h.safetensors)")


def _config_from_shapes(sd: LazyStateDict, num_heads: int | None):
    from transformers import CLIPVisionConfig

    layers = {int(k.split(".")[3]) for k in sd if k.startswith("vision_model.encoder.layers.")}
    if not layers:
        raise CheckpointError(f"{sd.source}: CLIP vision model without encoder layers")
    hidden, _, patch, _ = sd.shape("vision_model.embeddings.patch_embedding.weight")
    positions = sd.shape("vision_model.embeddings.position_embedding.weight")[0]
    grid = round((positions - 1) ** 0.5)
    if grid * grid + 1 != positions:
        raise CheckpointError(f"{sd.source}: {positions} position embeddings is not 1 + a square grid")
    heads = num_heads or (hidden // 80 if hidden % 80 == 0 else max(1, hidden // 64))  # ViT-H/14: 1280 / 80 = 16
    # ViT-H/14 of open_clip (Wan's encoder): GELU (official clip.py line 484: activation='gelu'), LayerNorm eps 1e-5
    ffn = sd.shape("vision_model.encoder.layers.0.mlp.fc1.weight")[0]
    return CLIPVisionConfig(hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=max(layers) + 1,
                            num_attention_heads=heads, image_size=grid * patch, patch_size=patch, hidden_act="gelu",
                            layer_norm_eps=1e-5)


def load_clip_vision(src: Source, dtype: torch.dtype | None = None, device: torch.device | str = "cpu",
                     num_heads: int | None = None) -> CLIPVisionEncoder:
    """Load the CLIP vision encoder from ComfyUI's file (``clip_vision_h.safetensors``), a transformers folder
    (``config.json`` of a CLIPVisionModel / CLIPVisionModelWithProjection / CLIPModel + weights) or a state dict.

    ``dtype``: None = as stored (fp8 dequantised to bf16). ``num_heads``: only for unusual widths without a
    config.json (the file does not store it; 1280 -> 16 heads). Returns the encoder in eval mode on ``device``."""
    from transformers import CLIPVisionConfig, CLIPVisionModel

    sd = _vision_state_dict(src)
    config_json = sd.metadata.get("config")
    if isinstance(config_json, dict) and Path(sd.source).is_dir():
        config = CLIPVisionConfig.from_pretrained(sd.source)
    else:
        config = _config_from_shapes(sd, num_heads)
    with torch.device("meta"):
        model = CLIPVisionModel(config)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if not any(k.startswith("vision_model.") for k in expected):  # transformers >= 5: no vision_model wrapper
        sd = sd.rename(lambda k: k.removeprefix("vision_model."))
    found = {k: tuple(sd.shape(k)) for k in sd if not k.endswith("position_ids")}
    expected = {k: v for k, v in expected.items() if not k.endswith("position_ids")}  # a buffer, rebuilt below
    check_shapes(found, expected, sd.source, f"a CLIP vision model (hidden {config.hidden_size}, "
                                             f"{config.num_hidden_layers} layers)")
    stored = next(sd.dtype(k) for k in sd if sd.dtype(k).is_floating_point)
    target = dtype or (torch.bfloat16 if stored.itemsize == 1 else stored)
    tensors = materialize(sd.subset(expected), target, device=device)
    model.load_state_dict(tensors, assign=True, strict=False)
    embeddings = getattr(model, "vision_model", model).embeddings
    embeddings.register_buffer("position_ids", torch.arange(embeddings.num_positions, device=device)[None],
                               persistent=False)
    return CLIPVisionEncoder(model, sd.source)
