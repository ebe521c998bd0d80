"""WanCore NAG -> WanCore Sampler at guidance 1 (docs/lora.md section 6): off at scale 1 (same latent bit for bit),
a different finite latent otherwise, refused with CFG."""
from __future__ import annotations

from importlib import import_module
from types import SimpleNamespace

import pytest
import torch

from wan_core.demo import tiny_random_models


@pytest.fixture(scope="module")
def node(pack):
    names = ("sampler", "conditioning", "latent")
    return SimpleNamespace(**{n: import_module(f"{pack.__name__}.nodes.{n}") for n in names})


def test_nag_at_guidance_one(node):
    dit, _vae, te = tiny_random_models(seed=0)
    (embeds,) = node.conditioning.text_encode(te, "a fox", "blurry, static")
    (lat,) = node.latent.empty_latent(64, 64, 5, 1)

    def run(e, guidance=1.0):
        return node.sampler.sample(dit, e, lat, seed=2, steps=4, guidance=guidance, shift=5.0, solver="euler",
                                   schedule="lightx2v_distill")[0]["samples"]

    plain = run(embeds)
    (off,) = node.sampler.nag_embeds(embeds, scale=1.0)
    (on,) = node.sampler.nag_embeds(embeds)
    assert torch.equal(run(off), plain)
    guided = run(on)
    assert torch.isfinite(guided).all() and not torch.allclose(guided, plain, atol=1e-4)
    with pytest.raises(ValueError, match="NAG applies the negative prompt at guidance 1, but guidance is 5"):
        run(on, guidance=5.0)
