"""A WF-VAE through the nodes: the VAE loader lists and loads it from models/vae, WanCore VAE Encode / Decode
work with it (LATENTs marked with its format), and its latents are refused where a Wan DiT or the Wan VAE would
take them, in one line."""
from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from wan_core.config import DIT_PRESETS
from wan_core.demo import random_vae_model
from wan_core.dit.model import WanDiT
from wan_core.vae.config import PRESETS as VAE_PRESETS
from wan_core.vae.image import image_to_video, video_to_image
from wan_core.vae.loader import load_vae as load_wan_vae
from wan_core.wfvae.autoencoder import WFVAE
from wan_core.wfvae.config import TINY_WFVAE, config_from_shapes
from wan_core.wfvae.latent_format import FORMAT_KEY, latent_format
from wan_core.wfvae.model import build_model

from .test_parity import official

ROOT = Path(__file__).resolve().parents[2]
PACK = "custom_nodes_x_wancore_pack"  # the name tests/nodes/conftest.py loads the pack under (one copy)


@pytest.fixture(scope="module")
def node():
    if PACK not in sys.modules:
        spec = importlib.util.spec_from_file_location(PACK, ROOT / "__init__.py",
                                                      submodule_search_locations=[str(ROOT)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[PACK] = module
        spec.loader.exec_module(module)
    return SimpleNamespace(**{n: importlib.import_module(f"{PACK}.nodes.{n}")
                              for n in ("models", "vae", "sampler", "i2v", "extend", "host")})


@pytest.fixture
def vae_dir(tmp_path, monkeypatch):
    for sub in ("diffusion_models", "vae", "text_encoders"):
        (tmp_path / sub).mkdir()
    monkeypatch.setenv("WANCORE_MODELS_DIR", str(tmp_path))
    return tmp_path / "vae"


def test_loader_node_lists_and_loads_wfvae_files_and_folders(node, vae_dir):
    weights, kwargs, refs = official("4x8x8")
    torch.save({"state_dict": {"gen_model": weights}}, vae_dir / "wfvae_tiny.ckpt")
    (vae_dir / "osp13").mkdir()
    (vae_dir / "osp13" / "config.json").write_text(json.dumps({"_class_name": "WFVAEModel", **kwargs}))
    torch.save(weights, vae_dir / "osp13" / "merged.ckpt")
    listed = node.host.list_models("vae")
    assert {"wfvae_tiny.ckpt", "osp13"} <= set(listed)
    for name in ("wfvae_tiny.ckpt", "osp13"):
        assert node.models.validate_vae(name) is True
        (vae,) = node.models.load_vae(name, "fp32")
        assert isinstance(vae, WFVAE) and vae.config.latent_dim == 4
    assert vae.latent_format.scale == tuple(kwargs["scale"])  # the folder's config.json
    assert torch.allclose(vae.encode(refs["video"][:, :, :9]), refs["mean_9"], atol=1e-5)


@pytest.mark.parametrize("structure", ["4x8x8", "8x8x8"])
def test_encode_and_decode_nodes_with_a_wfvae(node, structure):
    weights, kwargs, refs = official(structure)
    vae = wan_core_load(weights)
    frames = 9
    image = video_to_image(refs["video"][:, :, :frames].clamp(-1, 1))  # [9, 8, 16, 3]
    (latent,) = node.vae.encode(vae, image, tiling="off")
    assert latent[FORMAT_KEY] == f"wfvae-{structure}-4ch" and latent["downscale_ratio_spacial"] == 8
    assert torch.allclose(latent["samples"], vae.encode(image_to_video(image)), atol=1e-6)  # raw, as ComfyUI's
    (frames_out,) = node.vae.decode(vae, latent, tiling="off")
    assert torch.allclose(frames_out, video_to_image(vae.decode(latent["samples"])), atol=1e-6)
    assert frames_out.shape == image.shape
    bad = image[:5] if structure == "8x8x8" else image[:4]
    with pytest.raises(ValueError, match=rf"^image: {bad.shape[0]} frames; the VAE needs {structure[0]}n\+1"):
        node.vae.encode(vae, bad)


def wan_core_load(weights: dict) -> WFVAE:
    import wan_core

    return wan_core.load_vae(weights)


@pytest.fixture(scope="module")
def wf16():
    """A random WF-VAE with 16 latent channels (as WF-VAE-L and Wan 2.1): channel counts cannot tell them apart."""
    torch.manual_seed(0)
    cfg = replace(TINY_WFVAE, latent_dim=16, base_channels=2, encoder_energy_flow=3, decoder_energy_flow=2)
    return WFVAE(build_model(cfg).eval())


def test_wfvae_latents_never_reach_a_wan_dit_or_the_wan_vae(node, wf16):
    (latent,) = node.vae.encode(wf16, torch.rand(5, 16, 16, 3), tiling="off")
    assert latent["samples"].shape == (1, 16, 2, 2, 2)
    dit = WanDiT(DIT_PRESETS["tiny"]).eval()  # 16-channel Wan DiT
    wan_vae = load_wan_vae(random_vae_model(VAE_PRESETS["tiny"]).state_dict())
    one_line = r"[^\n]*$"
    with pytest.raises(ValueError, match=r"^latent: a WF-VAE latent \(wfvae-4x8x8-16ch\), but Wan diffusion models"
                                         + one_line):
        node.sampler.sample(dit, {"cond": [], "uncond": []}, latent, steps=1)
    with pytest.raises(ValueError, match=r"^samples: a WF-VAE latent \(wfvae-4x8x8-16ch\); the Wan VAE" + one_line):
        node.vae.decode(wan_vae, latent)
    with pytest.raises(ValueError, match=r"^samples: a Wan latent \(no WF-VAE mark\), but this VAE is a "
                                         r"wfvae-4x8x8-16ch WF-VAE" + one_line):
        node.vae.decode(wf16, {"samples": latent["samples"]})
    with pytest.raises(ValueError, match=r"^latent: a WF-VAE latent" + one_line):
        node.extend.extend_video(dit, wan_vae, frames=9, latent=latent)
    with pytest.raises(ValueError, match=r"^vae: a WF-VAE \(wfvae-4x8x8-16ch\); Wan diffusion models need" + one_line):
        node.extend.extend_video(dit, wf16, frames=9, images=torch.rand(5, 16, 16, 3))
    with pytest.raises(ValueError, match=r"^vae: a WF-VAE" + one_line):
        node.i2v.image_to_video(wf16, torch.rand(1, 16, 16, 3), 16, 16, 5)


def test_latent_format_scale_and_shift_against_float64():
    weights, kwargs, _ = official("4x8x8")
    fmt = latent_format(config_from_shapes({k: tuple(v.shape) for k, v in weights.items()}, release=kwargs))
    assert fmt.scale == (0.5, 0.25, 2.0, 1.0) and fmt.shift == (0.1, -0.2, 0.0, 0.3)
    z = torch.randn(2, 4, 3, 2, 2, dtype=torch.float64)
    want = torch.empty_like(z)
    for c in range(4):  # the official pipelines: (z - shift) * scale after encode, per channel
        want[:, c] = (z[:, c] - fmt.shift[c]) * fmt.scale[c]
    assert torch.allclose(fmt.to_model(z), want, atol=1e-12)
    assert torch.allclose(fmt.from_model(want), z, atol=1e-12)
    assert fmt.process_in(z).equal(fmt.to_model(z))
    with pytest.raises(ValueError, match=r"have 4 channels in dim 1, got shape \[1, 16, 2\]"):
        fmt.to_model(torch.zeros(1, 16, 2))
