"""Sampler and VAE nodes check their LATENT inputs before any work: rank, channels against the connected model
(naming both files' channel counts), NaN/Inf values; a NaN run stops with the step number (issue 10)."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

import wan_core
from wan_core.demo import random_vae_model, tiny_random_models
from wan_core.numerics import NonFiniteError
from wan_core.vae.config import TINY_VAE_1RES


@pytest.fixture(scope="module")
def tiny():
    return tiny_random_models(seed=0)


@pytest.fixture(scope="module")
def node(pack):
    from importlib import import_module
    from types import SimpleNamespace

    return SimpleNamespace(**{n: import_module(f"{pack.__name__}.nodes.{n}")
                              for n in ("sampler", "conditioning", "latent", "vae")})


@pytest.fixture(scope="module")
def embeds(node, tiny):
    return node.conditioning.text_encode(tiny[2], "a fox", "")[0]


def dit_calls(dit):
    calls = []
    return calls, dit.register_forward_hook(lambda *a: calls.append(1))


def test_nan_latent_with_denoise_below_one_is_named_not_called_empty(node, tiny, embeds):
    dit = tiny[0]
    z = torch.randn(1, 16, 2, 4, 4)
    z[0, 5, 1, 2, 3] = float("nan")
    calls, handle = dit_calls(dit)
    try:
        with pytest.raises(NonFiniteError, match=r"^latent: 1 of 512 values are NaN/Inf"):
            node.sampler.sample(dit, embeds, {"samples": z}, steps=3, denoise=0.5)
    finally:
        handle.remove()
    assert calls == []


def test_empty_latent_values_are_not_used_at_full_denoise(node, tiny, embeds):
    z = torch.full((1, 16, 2, 4, 4), float("nan"))  # only the shape of a text-to-video canvas is used
    (out,) = node.sampler.sample(tiny[0], embeds, {"samples": z}, steps=1, denoise=1.0)
    assert torch.isfinite(out["samples"]).all()


def test_latent_of_wrong_rank_or_channels_names_the_model(node, tiny, embeds, tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "wan_tiny_dit.safetensors"
    save_file(tiny[0].state_dict(), path)
    dit = wan_core.load_dit(path, config=tiny[0].config)
    with pytest.raises(ValueError, match=r"^latent: expected a Wan video latent .* got shape \[16, 2, 4, 4\]"):
        node.sampler.sample(dit, embeds, {"samples": torch.zeros(16, 2, 4, 4)})
    with pytest.raises(ValueError, match=r"^latent: 48 latent channels \(shape \[1, 48, 2, 4, 4\]\), but the "
                                         r"diffusion model 'wan_tiny_dit.safetensors' works on 16-channel latents"):
        node.sampler.sample(dit, embeds, {"samples": torch.zeros(1, 48, 2, 4, 4)})


def test_nan_weights_stop_the_sampler_node_at_step_one(node, tiny, embeds):
    dit = tiny[0]
    bad = type(dit)(dit.config)
    bad.load_state_dict(dit.state_dict())
    with torch.no_grad():
        bad.head.head.weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteError, match=r"^step 1/4 \(sigma 1\): the model produced NaN/Inf"):
        node.sampler.sample(bad, embeds, {"samples": torch.zeros(1, 16, 2, 4, 4)}, steps=4)


def test_decode_node_checks_channels_against_the_vae_and_values(node, tiny, tmp_path):
    save_file(random_vae_model(TINY_VAE_1RES).state_dict(), tmp_path / "vae_4ch.safetensors")
    vae4 = wan_core.load_vae(tmp_path / "vae_4ch.safetensors")
    z = torch.zeros(1, 16, 2, 4, 4)
    with pytest.raises(ValueError, match=r"^samples: 16 latent channels \(shape \[1, 16, 2, 4, 4\]\), but the VAE "
                                         r"'vae_4ch.safetensors' decodes 4-channel latents"):
        node.vae.decode(vae4, {"samples": z})
    z[0, 0, 0, 0, :2] = float("inf")
    with pytest.raises(NonFiniteError, match=r"^samples: 2 of 512 values are NaN/Inf"):
        node.vae.decode(tiny[1], {"samples": z})
    with pytest.raises(ValueError, match=r"^samples: expected a Wan video latent"):
        node.vae.decode(tiny[1], {"samples": z[0]})


def test_encode_node_refuses_non_finite_frames(node, tiny):
    image = torch.rand(5, 16, 16, 3)
    image[2, 3, 4, 0] = float("nan")
    with pytest.raises(NonFiniteError, match=r"^image: 1 of 3840 values are NaN/Inf"):
        node.vae.encode(tiny[1], image)
