"""WanCoreLoRA (docs/lora.md section 4): names from models/loras only, chained LoRAs with their own strengths
on one shared DiT, a strength change without reloading, and the sampler putting each output's stack on the
weights before it runs."""
from __future__ import annotations

from importlib import import_module
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from wan_core.demo import tiny_random_models

from ..lora.helpers import official_file, random_lora


@pytest.fixture
def node(pack, models_dir):
    (models_dir / "loras").mkdir()
    cfg = tiny_random_models(seed=0)[0].config
    save_file(official_file(random_lora(cfg, seed=1)), models_dir / "loras" / "style.safetensors")
    save_file(official_file(random_lora(cfg, seed=2, rank=2)), models_dir / "loras" / "motion.safetensors")
    names = ("host", "sampler", "conditioning", "latent", "lora")
    return SimpleNamespace(**{n: import_module(f"{pack.__name__}.nodes.{n}") for n in names},
                           spec=import_module(f"{pack.__name__}.nodes.lora").LORA, models=models_dir)


def test_lora_names_come_from_the_folder_list(node, tmp_path):
    assert node.host.list_models("loras") == ["motion.safetensors", "style.safetensors"]
    assert node.spec.validate(lora_name="style.safetensors") is True
    outside = tmp_path / "outside.safetensors"
    save_file({"x": torch.zeros(1)}, outside)
    for name in (str(outside), "../outside.safetensors", str(tmp_path / "missing.safetensors")):
        message = node.spec.validate(lora_name=name)
        assert isinstance(message, str) and message.startswith("lora_name: ")
        assert "not one of the available files in models/loras" in message
        with pytest.raises(node.host.NotInList):
            node.spec.run(model=tiny_random_models(seed=0)[0], lora_name=name)


def _sample(node, dit, te, steps=2):
    (embeds,) = node.conditioning.text_encode(te, "a fox", "")
    (lat,) = node.latent.empty_latent(64, 64, 5, 1)
    return node.sampler.sample(dit, embeds, lat, seed=3, steps=steps, guidance=1.0, solver="euler")[0]["samples"]


def test_chained_loras_views_and_strength_change(node):
    dit, _vae, te = tiny_random_models(seed=0)
    weights = {k: v.clone() for k, v in dit.state_dict().items()}
    plain = _sample(node, dit, te)
    (a,) = node.spec.run(model=dit, lora_name="style.safetensors", strength=1.0)
    (ab,) = node.spec.run(model=a, lora_name="motion.safetensors", strength=0.5, mode="unmerged")
    assert all(torch.equal(weights[k], v) for k, v in dit.state_dict().items())  # nothing applied yet
    out_ab = _sample(node, ab, te)
    out_a = _sample(node, a, te)
    (a_zero,) = node.spec.run(model=dit, lora_name="style.safetensors", strength=0.0)
    assert torch.equal(_sample(node, a_zero, te), plain)
    assert not torch.equal(out_a, plain) and not torch.equal(out_ab, out_a)
    assert torch.equal(_sample(node, ab, te), out_ab)  # back and forth on one loaded DiT
    assert torch.equal(_sample(node, dit, te), plain)
    assert all(torch.equal(weights[k], v) for k, v in dit.state_dict().items())


def test_a_lora_for_another_model_is_refused_by_name(node):
    save_file({"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight": torch.randn(2, 8),
               "lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight": torch.randn(8, 2)},
              node.models / "loras" / "flux_detail.safetensors")
    with pytest.raises(ValueError, match=r"flux_detail\.safetensors: a LoRA for Flux"):
        node.spec.run(model=tiny_random_models(seed=0)[0], lora_name="flux_detail.safetensors")
    # refused before queueing too, from the header's key names
    assert node.spec.validate(lora_name="flux_detail.safetensors") == \
        "lora_name: flux_detail.safetensors: a LoRA for Flux, not for the Wan DiT"
