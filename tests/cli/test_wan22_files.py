"""What a Wan 2.2 file is, from its header (docs/wan22.md section 5): the TI2V-5B DiT (48 channels), the Wan 2.2
VAE (usable, picked from a models folder only for a 48-channel DiT) and the A14B experts named by their files."""
from __future__ import annotations

import pytest

from safetensors.torch import save_file

from wan_core.config import DiTConfig
from wan_core.demo import random_vae_model
from wan_core.dit.model import WanDiT
from wan_core.cli.model_files import expert_from_name, find_model, identify
from wan_core.vae import TINY_VAE, TINY_VAE22


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    (root / "vae").mkdir()
    (root / "diffusion_models").mkdir()
    dit48 = WanDiT(DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32, in_dim=48, out_dim=48))
    sd48 = {k: v.contiguous() for k, v in dit48.state_dict().items()}
    save_file(sd48, root / "diffusion_models" / "ti2v.safetensors")
    for name, cfg in (("wan_2.1_vae", TINY_VAE), ("wan2.2_vae", TINY_VAE22)):
        sd = random_vae_model(cfg, 0).state_dict()
        save_file({k: v.contiguous() for k, v in sd.items()}, root / "vae" / f"{name}.safetensors")
    return root


def test_ti2v_dit_and_wan22_vae_are_usable(folder):
    dit = identify(folder / "diffusion_models" / "ti2v.safetensors", "dit")
    assert dit.ok and dit.channels == 48 and "Wan 2.2 48-channel DiT" in dit.what
    vae = identify(folder / "vae" / "wan2.2_vae.safetensors", "vae")
    assert vae.ok and vae.channels == 48


def test_folder_search_picks_the_vae_of_the_dits_channels(folder):
    assert find_model(folder, "vae").path.name == "wan_2.1_vae.safetensors"
    assert find_model(folder, "vae", channels=48).path.name == "wan2.2_vae.safetensors"


def test_expert_from_name():
    assert expert_from_name("models/wan2.2_t2v_high_noise_14B_fp8_scaled.safetensors") == "high"
    assert expert_from_name("Wan2.2-T2V-A14B/low_noise_model") == "low"
    assert expert_from_name("wan2.1_t2v_14B_bf16.safetensors") is None


def test_expert_named_in_what(tmp_path):
    dit = WanDiT(DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32))
    path = tmp_path / "wan2.2_t2v_low_noise_tiny.safetensors"
    save_file({k: v.contiguous() for k, v in dit.state_dict().items()}, path)
    assert "low-noise expert" in identify(path, "dit").what

