"""Models that cannot work together are refused before any work (no prompt encoded, no sampling step): a VAE
whose latent channels differ from the DiT's, a DiT that is not a 16-channel text-to-video model, a text encoder
of another width; the message names both files and their numbers."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

import wan_core
from wan_core.config import DIT_PRESETS
from wan_core.demo import random_vae_model, tiny_random_models
from wan_core.dit.model import WanDiT
from wan_core.pipeline import GenerationConfig, WanPipeline
from wan_core.vae.config import TINY_VAE_1RES

DIT_CFG = DIT_PRESETS["tiny"]


@pytest.fixture(scope="module")
def tiny():
    return tiny_random_models(seed=0)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("chan")
    torch.manual_seed(0)
    save_file(WanDiT(DIT_CFG).state_dict(), root / "wan_dit_16ch.safetensors")
    save_file(WanDiT(DIT_CFG.replace(in_dim=48, out_dim=48)).state_dict(), root / "wan_dit_48ch.safetensors")
    save_file(random_vae_model(TINY_VAE_1RES).state_dict(), root / "vae_4ch.safetensors")
    return root


class Spy:
    """Counts calls of a model's forward (the DiT) or ``encode`` (the text encoder)."""

    def __init__(self, te):
        self.te, self.calls = te, 0
        self.text_dim = te.text_dim

    def encode(self, texts):
        self.calls += 1
        return self.te.encode(texts)


def dit_calls(dit):
    calls = []
    return calls, dit.register_forward_hook(lambda *a: calls.append(1))


def test_vae_with_other_latent_channels_is_refused_before_anything_runs(tiny, files):
    _, _, te = tiny
    dit = wan_core.load_dit(files / "wan_dit_16ch.safetensors", config=DIT_CFG.replace(text_dim=te.text_dim))
    vae = wan_core.load_vae(files / "vae_4ch.safetensors")
    spy = Spy(te)
    calls, handle = dit_calls(dit)
    try:
        with pytest.raises(ValueError) as e:
            WanPipeline(dit, vae, spy)(GenerationConfig(prompt="a fox", width=32, height=32, frames=5, steps=2))
    finally:
        handle.remove()
    msg = str(e.value)
    assert "the diffusion model 'wan_dit_16ch.safetensors' works on 16-channel latents" in msg
    assert "the VAE 'vae_4ch.safetensors' has 4 latent channels" in msg
    assert str(files) not in msg  # file names, not the server's folders
    assert spy.calls == 0 and calls == []


def test_sample_latents_checks_the_vae_before_the_first_step(tiny, files):
    dit, _, _ = tiny
    vae = wan_core.load_vae(files / "vae_4ch.safetensors")
    calls, handle = dit_calls(dit)
    emb = [torch.zeros(3, dit.config.text_dim)]
    try:
        with pytest.raises(ValueError, match="16-channel latents but the VAE 'vae_4ch.safetensors' has 4"):
            WanPipeline(dit, vae).sample_latents(emb, emb, GenerationConfig(width=32, height=32, frames=5, steps=2))
    finally:
        handle.remove()
    assert calls == []


def test_dit_with_other_latent_channels_is_refused(tiny, files):
    _, vae, _ = tiny
    dit = wan_core.load_dit(files / "wan_dit_48ch.safetensors", config=DIT_CFG.replace(in_dim=48, out_dim=48))
    emb = [torch.zeros(3, DIT_CFG.text_dim)]
    # a 48-channel DiT is Wan 2.2 TI2V-5B: it needs the Wan 2.2 VAE (docs/wan22.md section 5)
    with pytest.raises(ValueError, match=r"'wan_dit_48ch.safetensors' works on 48-channel latents but the VAE.* has "
                                         r"16 latent channels; .*TI2V-5B: wan2.2_vae, 48 channels"):
        WanPipeline(dit, vae).sample_latents(emb, None, GenerationConfig(width=32, height=32, frames=5, steps=2,
                                                                         guidance=1.0))


def test_text_encoder_of_another_width_is_refused_before_encoding(tiny):
    dit, vae, te = tiny
    narrow = WanDiT(dit.config.replace(text_dim=te.text_dim * 2))
    spy = Spy(te)
    with pytest.raises(ValueError, match=rf"produces {te.text_dim}-wide embeddings but the diffusion model expects "
                                         rf"{te.text_dim * 2}"):
        WanPipeline(narrow, vae, spy)(GenerationConfig(prompt="a fox", width=32, height=32, frames=5, steps=2))
    assert spy.calls == 0


def test_start_latent_with_other_channels_names_both(tiny):
    dit, vae, _ = tiny
    emb = [torch.zeros(3, dit.config.text_dim)]
    z = torch.zeros(1, 48, 2, 4, 4)
    with pytest.raises(ValueError, match=r"^start latent: 48 latent channels .* works on 16-channel latents"):
        WanPipeline(dit, vae).sample_latents(emb, emb, GenerationConfig(width=32, height=32, frames=5, steps=2,
                                                                        denoise=0.5), latent=z)
    with pytest.raises(ValueError, match=r"^latents to decode: 48 latent channels .* decodes 16-channel"):
        WanPipeline(vae=vae).decode(z)
    with pytest.raises(ValueError, match=r"^latents to decode: expected a Wan video latent .* shape \[16, 2, 4, 4\]"):
        WanPipeline(vae=vae).decode(z[0, :16])
