"""Image-to-video nodes (docs/i2v.md section 7): WanCoreCLIPVisionLoader opens only names of models/clip_vision,
WanCoreImageToVideo -> WanCoreSampler gives the pipeline's video, ComfyUI's native CLIP_VISION_OUTPUT is accepted
where the tensors match, and a missing image is refused before sampling."""
from __future__ import annotations

from importlib import import_module
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from wan_core.config import DIT_PRESETS
from wan_core.demo import tiny_random_models
from wan_core.dit.model import WanDiT
from wan_core.pipeline import GenerationConfig, WanPipeline

CLIP = 24


@pytest.fixture
def node(pack, models_dir):
    from transformers import CLIPVisionConfig, CLIPVisionModel

    (models_dir / "clip_vision").mkdir()
    torch.manual_seed(0)
    clip = CLIPVisionModel(CLIPVisionConfig(hidden_size=CLIP, intermediate_size=48, num_hidden_layers=2,
                                            num_attention_heads=2, image_size=28, patch_size=14, hidden_act="gelu"))
    clip.save_pretrained(models_dir / "clip_vision" / "tiny_clip")  # a transformers folder (config.json)
    names = ("host", "sampler", "conditioning", "i2v")
    return SimpleNamespace(**{n: import_module(f"{pack.__name__}.nodes.{n}") for n in names}, models=models_dir)


def test_clip_vision_names_come_from_the_folder_list(node, tmp_path):
    spec = node.i2v.CLIP_VISION_LOADER
    assert node.host.list_models("clip_vision")[0] == "tiny_clip"  # (then the file inside the folder)
    assert spec.validate(clip_name="tiny_clip") is True
    outside = tmp_path / "clip_vision_h.safetensors"
    save_file({"x": torch.zeros(1)}, outside)
    for name in (str(outside), "../clip_vision_h.safetensors"):
        message = spec.validate(clip_name=name)
        assert isinstance(message, str) and "not one of the available files in models/clip_vision" in message
        with pytest.raises(node.host.NotInList):
            spec.run(clip_name=name)


def _models(seed: int = 0):
    dit, vae, te = tiny_random_models(seed=seed)
    torch.manual_seed(seed + 1)
    i2v = WanDiT(DIT_PRESETS["tiny"].replace(text_dim=dit.config.text_dim, in_dim=36, image_dim=CLIP)).eval()
    return i2v, vae, te


def test_image_to_video_then_sampler_equals_the_pipeline(node):
    dit, vae, te = _models()
    (clip,) = node.i2v.CLIP_VISION_LOADER.run(clip_name="tiny_clip", dtype="fp32")
    image = torch.rand(1, 40, 56, 3, generator=torch.Generator().manual_seed(4))
    cond, latent = node.i2v.IMAGE_TO_VIDEO.run(vae=vae, start_image=image, width=64, height=48, frames=5,
                                               clip_vision=clip)
    assert latent["samples"].shape == (1, 16, 2, 6, 8) and cond.image_latent.shape == (1, 20, 2, 6, 8)
    (embeds,) = node.conditioning.text_encode(te, "a fox", "")
    (out,) = node.sampler.sample(dit, embeds, latent, seed=3, steps=2, guidance=3.0, solver="euler",
                                 image_cond=cond)
    pipe = WanPipeline(dit, vae, te, clip_vision=clip)
    cfg = GenerationConfig(width=64, height=48, frames=5, steps=2, guidance=3.0, solver="euler", seed=3)
    with torch.no_grad():
        ref = pipe.sample_latents(embeds["cond"], embeds["uncond"], cfg, image=pipe.image_condition(image, cfg))
    torch.testing.assert_close(out["samples"], ref, rtol=1e-5, atol=1e-5)

    # ComfyUI's native CLIP Vision Encode output, where its tensors equal ours, gives the same conditioning
    native = SimpleNamespace(penultimate_hidden_states=clip.encode(image))
    cond2, _ = node.i2v.IMAGE_TO_VIDEO.run(vae=vae, start_image=image, width=64, height=48, frames=5,
                                           clip_vision_output=native)
    assert torch.equal(cond2.clip_tokens, cond.clip_tokens) and torch.equal(cond2.image_latent, cond.image_latent)


def test_sampler_refuses_missing_or_mismatched_image_before_sampling(node):
    dit, vae, te = _models()
    (embeds,) = node.conditioning.text_encode(te, "a fox", "")
    image = torch.rand(1, 48, 64, 3)
    cond, latent = node.i2v.IMAGE_TO_VIDEO.run(vae=vae, start_image=image, width=64, height=48, frames=5)
    calls = []
    handle = dit.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(ValueError, match="image-to-video model: give it a start image"):
            node.sampler.sample(dit, embeds, latent, steps=1, guidance=1.0)
        with pytest.raises(ValueError, match="needs the CLIP vision encoding"):
            node.sampler.sample(dit, embeds, latent, steps=1, guidance=1.0, image_cond=cond)
        bigger = {"samples": torch.zeros(1, 16, 2, 8, 8)}
        with pytest.raises(ValueError, match="made for 64x48, 5 frames") as info:
            node.sampler.sample(WanDiT(DIT_PRESETS["tiny"].replace(text_dim=dit.config.text_dim, in_dim=36)),
                                embeds, bigger, steps=1, guidance=1.0, image_cond=cond)
        assert "\n" not in str(info.value)
    finally:
        handle.remove()
    assert not calls
