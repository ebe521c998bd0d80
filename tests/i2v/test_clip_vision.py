"""CLIP vision encoder (docs/i2v.md section 3): our encoder's penultimate hidden states equal transformers'
CLIPVisionModel's on the same random weights loaded from a ComfyUI-layout file and from a transformers folder
(<= 1e-5), with the official preprocessing (Wan2.1 wan/modules/clip.py lines 527-537) written out here."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from wan_core import load_clip_vision
from wan_core.checkpoint import CheckpointError

MEAN = torch.tensor([0.48145466, 0.4578275, 0.40821073]).view(1, 3, 1, 1)
STD = torch.tensor([0.26862954, 0.26130258, 0.27577711]).view(1, 3, 1, 1)


def official_pixels(images: torch.Tensor) -> torch.Tensor:
    """IMAGE [N, H, W, 3] in [0, 1] -> what the official CLIPModel.visual feeds the ViT: the frame in [-1, 1]
    (TF.to_tensor(img).sub_(0.5).div_(0.5)), bicubic to 224 (here 28), back to [0, 1], OpenAI mean/std."""
    x = images.permute(0, 3, 1, 2).sub(0.5).div(0.5)
    x = F.interpolate(x, size=(28, 28), mode="bicubic", align_corners=False)
    return (x.mul(0.5).add(0.5) - MEAN) / STD


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    torch.manual_seed(0)
    cfg = CLIPVisionConfig(hidden_size=40, intermediate_size=96, num_hidden_layers=3, num_attention_heads=2,
                           image_size=28, patch_size=14, hidden_act="gelu", layer_norm_eps=1e-5, projection_dim=16)
    model = CLIPVisionModelWithProjection(cfg).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    tmp = tmp_path_factory.mktemp("clip")
    sd = {k: v.contiguous() for k, v in model.state_dict().items() if not k.endswith("position_ids")}
    # ComfyUI's clip_vision_h.safetensors: transformers names under vision_model. plus visual_projection.weight
    comfy = {(k if k.startswith(("vision_model.", "visual_projection.")) else f"vision_model.{k}"): v
             for k, v in sd.items()}
    assert "visual_projection.weight" in comfy and "vision_model.pre_layrnorm.weight" in comfy
    save_file(comfy, tmp / "clip_vision_h.safetensors")
    model.save_pretrained(tmp / "transformers")
    return model, tmp


def test_encode_matches_transformers_penultimate_states(reference):
    model, tmp = reference
    images = torch.rand(2, 37, 53, 3, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = model(pixel_values=official_pixels(images), output_hidden_states=True).hidden_states[-2]
    for src, heads in ((tmp / "clip_vision_h.safetensors", 2), (tmp / "transformers", None)):
        enc = load_clip_vision(src, dtype=torch.float32, num_heads=heads)
        out = enc.encode(images)
        assert out.shape == (2, 5, 40) and out.dtype == torch.float32  # 1 + (28/14)^2 tokens
        assert (out - expected).abs().max().item() <= 1e-5


def test_default_head_count_is_vit_h():
    """Without a config.json the head count follows ViT-H/14 (width 1280 -> 16 heads of 80)."""
    from wan_core.i2v.clip_vision import _config_from_shapes
    from wan_core.checkpoint import open_checkpoint

    shapes = {"vision_model.embeddings.patch_embedding.weight": torch.empty(1280, 3, 14, 14, device="meta"),
              "vision_model.embeddings.position_embedding.weight": torch.empty(257, 1280, device="meta"),
              "vision_model.encoder.layers.31.mlp.fc1.weight": torch.empty(5120, 1280, device="meta"),
              "vision_model.encoder.layers.0.mlp.fc1.weight": torch.empty(5120, 1280, device="meta")}
    cfg = _config_from_shapes(open_checkpoint(shapes), None)
    assert (cfg.num_attention_heads, cfg.num_hidden_layers, cfg.image_size, cfg.hidden_act) == (16, 32, 224, "gelu")


def test_not_a_clip_file_is_refused(tmp_path):
    save_file({"blocks.0.self_attn.q.weight": torch.zeros(2, 2), "head.modulation": torch.zeros(1, 2, 2)},
              tmp_path / "dit.safetensors")
    with pytest.raises(CheckpointError, match="not a CLIP vision model.*clip_vision_h") as info:
        load_clip_vision(tmp_path / "dit.safetensors")
    assert "\n" not in str(info.value)


def test_bad_image_shape_is_one_line(reference):
    _model, tmp = reference
    enc = load_clip_vision(tmp / "transformers")
    with pytest.raises(ValueError, match=r"IMAGE \[N, H, W, 3\]"):
        enc.encode(torch.rand(3, 32, 32))
