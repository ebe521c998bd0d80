"""WanCore Extend Video -> WanCore Sampler (extend input) -> WanCore Join Frames / Join Latents, called without
ComfyUI: registration, the previous frames kept bit for bit, the clip's head drawn as given, a latent chain equal
to the core's, the RIFLEx widget reaching the run, and one-line refusals."""
from __future__ import annotations

from importlib import import_module
from types import SimpleNamespace

import pytest
import torch

from wan_core.dit.riflex import RIFLEx
from wan_core.dit.runtime import runtime_of
from wan_core.extension import Extension, from_latent


@pytest.fixture(scope="module")
def node(pack):
    names = ("extend", "sampler", "conditioning", "latent", "host", "vae")
    return SimpleNamespace(**{n: import_module(f"{pack.__name__}.nodes.{n}") for n in names})




def _embeds(node, te):
    return node.conditioning.text_encode(te, "a fox", "")[0]


def test_nodes_are_registered(pack):
    cls = pack.NODE_CLASS_MAPPINGS["WanCoreExtendVideo"]
    assert cls.RETURN_TYPES == ("WANCORE_EXTENSION", "LATENT")
    assert set(cls.INPUT_TYPES()["optional"]) == {"images", "latent", "clip_vision", "clip_vision_output"}
    assert pack.NODE_CLASS_MAPPINGS["WanCoreJoinFrames"].RETURN_TYPES == ("IMAGE",)
    assert pack.NODE_CLASS_MAPPINGS["WanCoreJoinLatents"].RETURN_TYPES == ("LATENT",)
    sampler = pack.NODE_CLASS_MAPPINGS["WanCoreSampler"].INPUT_TYPES()["optional"]
    assert "extend" in sampler and sampler["riflex"][0][:3] == ["off", "auto", "1"]


def test_extend_images_keeps_the_frames_and_draws_the_head(node, tiny, shown):
    dit, vae, te = tiny
    g = torch.Generator().manual_seed(3)
    images = torch.rand(9, 48, 64, 3, generator=g)
    extension, latent = node.extend.extend_video(dit, vae, frames=13, overlap=5, images=images)
    assert latent["samples"].shape == (1, 16, 4, 6, 8)
    (out,) = node.sampler.sample(dit, _embeds(node, te), latent, seed=1, steps=2, extend=extension)
    torch.testing.assert_close(out["samples"][:, :, :2], extension.continuation.head, atol=1e-5, rtol=0)
    (clip,) = node.vae.decode(vae, out, tiling="off")
    (joined,) = node.extend.join_frames(extension, clip)
    assert joined.shape == (9 + 13 - 5, 48, 64, 3) and torch.equal(joined[:9], images)
    assert 0 <= joined.min() and joined.max() <= 1
    with pytest.raises(ValueError, match="use WanCore Join Frames"):
        node.extend.join_latent(extension, out)


def test_extend_latent_chain_equals_the_core(node, tiny, shown):
    dit, vae, te = tiny
    embeds = _embeds(node, te)
    (first,) = node.sampler.sample(dit, embeds, node.latent.empty_latent(64, 48, 9, 1)[0], seed=1, steps=2)
    extension, latent = node.extend.extend_video(dit, vae, frames=13, overlap=9, latent=first)
    cont = from_latent(dit, first["samples"], 13, Extension(overlap=9))
    assert torch.equal(extension.continuation.head, cont.head)  # anchor + the last 2 latent frames
    (second,) = node.sampler.sample(dit, embeds, latent, seed=2, steps=2, extend=extension)
    (chain,) = node.extend.join_latent(extension, second)
    assert chain["samples"].shape[2] == 3 + 4 - 3
    assert torch.equal(chain["samples"][:, :, :3], first["samples"])


def test_riflex_widget_reaches_the_run(node, tiny, shown, monkeypatch):
    dit, _vae, te = tiny
    seen = []
    forward = type(dit).forward

    def spy(self, *a, **k):
        seen.append(runtime_of(self).riflex)
        return forward(self, *a, **k)

    monkeypatch.setattr(type(dit), "forward", spy)
    node.sampler.sample(dit, _embeds(node, te), node.latent.empty_latent(64, 48, 17, 1)[0], steps=1, riflex="2")
    assert set(seen) == {RIFLEx(2, 5)}


@pytest.mark.parametrize("kwargs, message", [
    ({}, "connect either images"),
    ({"images": torch.rand(9, 48, 64, 3), "latent": {"samples": torch.zeros(1, 16, 3, 6, 8)}}, "not both"),
    ({"images": torch.rand(3, 48, 64, 3)}, "has 3 frames, fewer than the overlap of 5"),
    ({"images": torch.rand(9, 48, 64, 3), "frames": 5}, "ask for at least 9 frames"),
    ({"latent": {"samples": torch.zeros(1, 16, 3, 6, 8)}, "conditioning": "svi"}, "needs an image-to-video model"),
])
def test_extend_refusals_are_one_line(node, tiny, kwargs, message):
    dit, vae, _ = tiny
    kwargs = {"frames": 13, **kwargs}
    with pytest.raises(ValueError, match=message) as info:
        node.extend.extend_video(dit, vae, **kwargs)
    assert "\n" not in str(info.value)
    assert node.extend.validate_extend(frames=13, overlap=6) != True  # noqa: E712 (a message, not True)


def test_sampler_refuses_a_foreign_extension_and_double_conditioning(node, tiny, shown):
    dit, vae, te = tiny
    lat = node.latent.empty_latent(64, 48, 13, 1)[0]
    with pytest.raises(ValueError, match="Extend Video"):
        node.sampler.sample(dit, _embeds(node, te), lat, steps=1, extend="nonsense")
    extension, lat = node.extend.extend_video(dit, vae, frames=13, overlap=5, images=torch.rand(9, 48, 64, 3))
    with pytest.raises(ValueError, match="disconnect image_cond"):
        node.sampler.sample(dit, _embeds(node, te), lat, steps=1, extend=extension, image_cond=object())
