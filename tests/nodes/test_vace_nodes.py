"""WanCore VACE node (docs/vace.md section 3): a chain carries two inputs with their own strengths and the
reference frames; the sampler gives the pipeline's latents with the references trimmed; native WanVaceToVideo
conditioning is accepted; a control video of another size or length is fitted and said; bad graphs are refused
before the DiT runs."""
from __future__ import annotations

from importlib import import_module
from types import SimpleNamespace

import pytest
import torch

from wan_core.config import DIT_PRESETS
from wan_core.demo import tiny_random_models
from wan_core.dit.model import WanDiT
from wan_core.pipeline import GenerationConfig, WanPipeline
from wan_core.vace import VaceRequest, to_native, vace_context

from ..vace.helpers import vace_dit

SIZE = {"width": 16, "height": 16, "length": 5}


@pytest.fixture(scope="module")
def setup(pack):
    node = SimpleNamespace(**{n: import_module(f"{pack.__name__}.nodes.{n}") for n in ("sampler", "vace")})
    _, vae, _ = tiny_random_models(seed=0)
    g = torch.Generator().manual_seed(1)
    embeds = {"cond": [torch.randn(6, 32, generator=g)], "uncond": [torch.randn(4, 32, generator=g)]}
    images = {"ref": torch.rand(1, 24, 16, 3, generator=g), "video": torch.rand(5, 16, 16, 3, generator=g),
              "masks": (torch.rand(5, 16, 16, generator=g) > 0.5).float()}
    return node, vace_dit(7), vae, embeds, images


def test_chain_carries_two_inputs_and_the_sampler_trims(setup, shown):
    node, dit, vae, embeds, im = setup
    e1, _, trim1 = node.vace.VACE.run(embeds=embeds, vae=vae, **SIZE, strength=1.2, reference_image=im["ref"])
    e2, latent, trim = node.vace.VACE.run(embeds=e1, vae=vae, **SIZE, strength=0.7, control_video=im["video"],
                                          control_masks=im["masks"])
    request = e2["vace"]
    assert (trim1, trim) == (1, 1) and [s for _, s in request.inputs] == [1.2, 0.7] and "vace" not in embeds
    assert latent["samples"].shape == (1, 16, 1 + 2, 2, 2)
    # independently: the official contexts of each input, the control's reference slot empty
    refs = [[im["ref"][0].permute(2, 0, 1) * 2 - 1]]
    ref_ctx = vace_context(vae, None, None, refs, size=(5, 16, 16))
    frames = im["video"].permute(3, 0, 1, 2)[None] * 2 - 1
    control = vace_context(vae, frames, im["masks"][None, None])
    torch.testing.assert_close(request.inputs[0][0], ref_ctx.context)
    assert not request.inputs[1][0][:, :, :1].any()
    torch.testing.assert_close(request.inputs[1][0][:, :, 1:], control.context)

    (out,) = node.sampler.sample(dit, e2, latent, seed=2, steps=2, guidance=3.0, solver="euler")
    assert out["samples"].shape == (1, 16, 2, 2, 2)  # the video's latent frames: the reference trimmed
    cfg = GenerationConfig(width=16, height=16, frames=5, steps=2, guidance=3.0, solver="euler", seed=2)
    expected = VaceRequest(((ref_ctx.context, 1.2), (torch.cat([torch.zeros_like(control.context[:, :, :1]),
                                                                control.context], 2), 0.7)), 1)
    with torch.no_grad():
        ref = WanPipeline(dit).sample_latents(embeds["cond"], embeds["uncond"], cfg, vace=expected)
    torch.testing.assert_close(out["samples"], ref, rtol=1e-5, atol=1e-5)


def test_native_conditioning_is_accepted(setup):
    node, dit, vae, embeds, im = setup
    ctx = vace_context(vae, im["video"].permute(3, 0, 1, 2)[None] * 2 - 1).context
    conditioning = [[torch.zeros(1, 6, 32), to_native(ctx, 0.8)]]  # what WanVaceToVideo's positive output holds
    latent = {"samples": torch.zeros(1, 16, 2, 2, 2)}
    (out,) = node.sampler.sample(dit, embeds, latent, seed=2, steps=1, guidance=3.0, vace_conditioning=conditioning)
    cfg = GenerationConfig(width=16, height=16, frames=5, steps=1, guidance=3.0, seed=2)
    with torch.no_grad():
        ref = WanPipeline(dit).sample_latents(embeds["cond"], embeds["uncond"], cfg,
                                              vace=VaceRequest(((ctx, 0.8),)))
    torch.testing.assert_close(out["samples"], ref, rtol=1e-5, atol=1e-5)
    e1, _, _ = node.vace.VACE.run(embeds=embeds, vae=vae, **SIZE)
    with pytest.raises(ValueError, match="already carry VACE inputs"):
        node.sampler.sample(dit, e1, latent, steps=1, vace_conditioning=conditioning)
    with pytest.raises(ValueError, match="has no VACE entries"):
        node.sampler.sample(dit, embeds, latent, steps=1, vace_conditioning=[[torch.zeros(1, 6, 32), {}]])


def test_control_video_of_another_size_is_fitted_and_said(setup, shown):
    node, _, vae, embeds, im = setup
    wide = torch.rand(3, 16, 32, 3)  # 3 frames of 32x16: cropped to the middle 16x16, padded to 5 frames
    e, latent, trim = node.vace.VACE.run(embeds=embeds, vae=vae, **SIZE, control_video=wide)
    assert trim == 0 and latent["samples"].shape == (1, 16, 2, 2, 2)
    text = "\n".join(shown)
    assert "32x16 resized to the run's 16x16" in text and "3 frames padded to the run's 5" in text
    frames = torch.cat([wide[:, :, 8:24].permute(3, 0, 1, 2)[None] * 2 - 1, torch.zeros(1, 3, 2, 16, 16)], 2)
    masks = torch.ones(1, 1, 5, 16, 16)
    torch.testing.assert_close(e["vace"].inputs[0][0], vace_context(vae, frames, masks).context)


def test_bad_graphs_are_refused_before_the_dit_runs(setup):
    node, dit, vae, embeds, im = setup
    e1, latent, _ = node.vace.VACE.run(embeds=embeds, vae=vae, **SIZE, reference_image=im["ref"])
    t2v = WanDiT(DIT_PRESETS["tiny"]).eval()
    calls = []
    hooks = [m.register_forward_pre_hook(lambda *a: calls.append(1)) for m in (dit, t2v)]
    try:
        with pytest.raises(ValueError, match="has no VACE blocks"):
            node.sampler.sample(t2v, e1, latent, steps=1)
        with pytest.raises(ValueError, match="is a VACE model: give VACE inputs"):
            node.sampler.sample(dit, embeds, {"samples": torch.zeros(1, 16, 2, 2, 2)}, steps=1)
        with pytest.raises(ValueError, match="to fit the VACE context"):
            node.sampler.sample(dit, e1, {"samples": torch.zeros(1, 16, 4, 2, 2)}, steps=1)
        with pytest.raises(ValueError, match="give every VACE input the same width, height and length"):
            node.vace.VACE.run(embeds=e1, vae=vae, width=32, height=16, length=5)
    finally:
        for h in hooks:
            h.remove()
    assert not calls
