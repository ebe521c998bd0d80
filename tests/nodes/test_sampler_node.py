"""Node functions called directly (no ComfyUI): sampling with the interrupt flag, and the text-to-latent chain."""
from __future__ import annotations

import pytest
import torch

from wan_core.demo import tiny_random_models


@pytest.fixture(scope="module")
def tiny():
    return tiny_random_models(seed=0)


@pytest.fixture(scope="module")
def node(pack):
    """The pack's node modules by short name (``node.sampler``, ``node.host``, ...), imported as ComfyUI does."""
    from importlib import import_module
    from types import SimpleNamespace

    names = ("host", "sampler", "conditioning", "latent", "vae", "models")
    return SimpleNamespace(**{n: import_module(f"{pack.__name__}.nodes.{n}") for n in names})


def test_interrupt_stops_within_one_step(node, tiny):
    host = node.host
    sampler = node.sampler
    conditioning = node.conditioning
    latent = node.latent
    dit, _vae, te = tiny
    (embeds,) = conditioning.text_encode(te, "a fox", "")
    (lat,) = latent.empty_latent(64, 64, 5, 1)
    calls = []

    def hook(module, args, out):
        calls.append(1)
        if len(calls) == 3:  # third forward = step 2's cond pass
            host.request_interrupt()

    handle = dit.register_forward_hook(hook)
    try:
        with pytest.raises(host.Interrupted):
            sampler.sample(dit, embeds, lat, seed=1, steps=10, guidance=5.0)
    finally:
        handle.remove()
        host.clear_interrupt()
    # step 2 (cond + uncond) finishes, the check before step 3 stops: 4 forwards of the 20 a full run needs
    assert len(calls) == 4


def test_chain_produces_frames(node, tiny):
    sampler = node.sampler
    conditioning = node.conditioning
    latent = node.latent
    vae_nodes = node.vae
    dit, vae, te = tiny
    (embeds,) = conditioning.text_encode(te, "a fox", "blurry")
    (lat,) = latent.empty_latent(64, 48, 9, 2)
    (out,) = sampler.sample(dit, embeds, lat, seed=3, steps=2)
    assert out["samples"].shape == (2, 16, 3, 6, 8)
    (images,) = vae_nodes.decode(vae, out)
    assert images.shape == (18, 48, 64, 3) and images.dtype == torch.float32
    assert 0.0 <= images.min() and images.max() <= 1.0
    # the encode node round-trips the shape
    (enc,) = vae_nodes.encode(vae, images[:9])
    assert enc["samples"].shape == (1, 16, 3, 6, 8)


def test_bad_canvas_inputs_name_the_input(node, tiny):
    latent = node.latent
    assert "frames=80" in latent.validate_size(832, 480, 80) and "77 or 81" in latent.validate_size(832, 480, 80)
    assert "width=830" in latent.validate_size(830, 480, 81)
    assert latent.validate_size(832, 480, 81) is True
    with pytest.raises(ValueError, match="frames=80"):
        latent.empty_latent(832, 480, 80)


def test_model_loader_errors(node, models_dir):
    from safetensors.torch import save_file

    from wan_core import CheckpointError

    models = node.models
    with pytest.raises(ValueError, match=r"'nope.safetensors' is not one of the available files in "
                                         r"models/diffusion_models"):
        models.load_model("nope.safetensors")
    save_file({"decoder.upsamples.0.residual.0.gamma": torch.ones(4, 1, 1, 1),
               "encoder.conv1.weight": torch.zeros(4, 3, 3, 3, 3)}, models_dir / "diffusion_models" / "vae.safetensors")
    with pytest.raises(CheckpointError, match="looks like a Wan 2.1 video VAE"):
        models.load_model("vae.safetensors")
