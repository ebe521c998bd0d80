"""WanCore Native RIFLEx without ComfyUI (nodes/native/riflex_patch.py; docs/long_video.md).

ComfyUI's native Wan model builds its RoPE with ``rope_embedder`` (``EmbedND``); the stand-in below computes what
it computes (per axis ``theta^(-2j/d)``, rotation matrices ``[[cos, -sin], [sin, cos]]``, axes concatenated,
``[B, 1, N, d/2, 2, 2]``). The patch's frame-axis component k is checked against a float64 hand computation and
against ``wan_core``'s own RoPE with the same RIFLEx; everything else must stay bit-identical.
"""
from __future__ import annotations

import copy
import math

import pytest
import torch

from nodes import native
from nodes.native import RiflexEmbedder
from nodes.native.riflex_patch import EMBEDDER
from wan_core.config import DIT_PRESETS
from wan_core.dit.riflex import RIFLEx
from wan_core.dit.rope import rope_angles

AXES = (44, 42, 42)


class EmbedND(torch.nn.Module):  # stands for comfy.ldm.flux.layers.EmbedND (written from its definition)
    def __init__(self, axes_dim=AXES, theta=10000.0):
        super().__init__()
        self.axes_dim, self.theta = list(axes_dim), theta

    def forward(self, ids):
        parts = []
        for i, d in enumerate(self.axes_dim):
            omega = self.theta ** -(torch.arange(0, d, 2, dtype=torch.float64) / d)
            ang = ids[..., i].to(torch.float32).to(torch.float64)[..., None] * omega
            rot = torch.stack([ang.cos(), -ang.sin(), ang.sin(), ang.cos()], dim=-1)
            parts.append(rot.view(*rot.shape[:-1], 2, 2).to(torch.float32))
        return torch.cat(parts, dim=-3).unsqueeze(1)


def grid_ids(f, h, w, t_start=0):
    """Token positions ``[1, f*h*w, 3]`` in (frame, row, column) order, as the native ``rope_encode`` builds them."""
    t, y, x = torch.meshgrid(torch.arange(t_start, t_start + f), torch.arange(h), torch.arange(w), indexing="ij")
    return torch.stack([t, y, x], dim=-1).reshape(1, -1, 3).float()


class WanModel(torch.nn.Module):  # stands for comfy.ldm.wan.model.WanModel, Wan 2.1 T2V 1.3B widths
    def __init__(self):
        super().__init__()
        self.dim, self.num_heads, self.out_dim = 1536, 12, 16
        self.blocks = torch.nn.ModuleList(torch.nn.Identity() for _ in range(30))
        self.patch_embedding = torch.nn.Conv3d(16, 1536, (1, 2, 2), device="meta")
        self.rope_embedder = EmbedND()


WanModel.__module__ = "comfy.ldm.wan.model"


class FakePatcher:
    """The part of ComfyUI's ModelPatcher the RIFLEx patch uses: clone, object patches (applied when loaded)."""

    def __init__(self, diffusion_model):
        self.model = type("BaseModel", (), {})()
        self.model.diffusion_model = diffusion_model
        self.model_options = {"transformer_options": {}}
        self.object_patches: dict = {}

    def clone(self):
        n = FakePatcher(self.model.diffusion_model)
        n.model_options = copy.deepcopy(self.model_options)
        n.object_patches = dict(self.object_patches)
        return n

    def add_object_patch(self, name, obj):
        self.object_patches[name] = obj

    def get_model_object(self, name):
        if name in self.object_patches:
            return self.object_patches[name]
        obj = self.model
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj


def config():
    return DIT_PRESETS["wan2.1-t2v-1.3b"]


@pytest.mark.parametrize("k,frames", [(6, 30), (1, 8), (22, 5)])
def test_component_k_matches_a_float64_hand_computation(k, frames):
    original = EmbedND()
    ids = grid_ids(frames, 2, 3)
    plain, out = original(ids), RiflexEmbedder(original, k, config())(ids)
    assert out.shape == plain.shape == (1, 1, frames * 6, 64, 2, 2)
    changed = (out != plain).any(dim=(0, 1, 2, 4, 5)).nonzero().flatten().tolist()
    assert changed == ([k - 1] if frames > 1 else [])  # the other 63 components bit-identical
    for n in range(ids.shape[1]):
        a = float(ids[0, n, 0]) * 0.9 * 2 * math.pi / frames  # float64
        want = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64)
        assert (out[0, 0, n, k - 1].double() - want).abs().max().item() <= 2.0 ** -24  # float32 rounding
    # the same angles as wan_core's RoPE with RIFLEx (the core and the native patch agree)
    core = rope_angles((frames, 2, 3), AXES, riflex=RIFLEx(k, frames))[:, k - 1]
    assert (out[0, 0, :, k - 1, 1, 0].double() - core.sin()).abs().max().item() <= 2.0 ** -24


def test_auto_changes_nothing_up_to_the_training_length():
    original = EmbedND()
    patched = RiflexEmbedder(original, "auto", config())
    for frames in (1, 17, 21):  # up to 21 latent frames (81 frames) Wan needs no extrapolation
        ids = grid_ids(frames, 2, 2)
        assert torch.equal(patched(ids), original(ids))
    ids = grid_ids(30, 2, 2)
    assert patched.riflex_for(ids) == RIFLEx(6, 30)
    assert not torch.equal(patched(ids), original(ids))
    # a context window's call sees the window: its own frames, wherever its positions start
    assert patched.riflex_for(grid_ids(17, 1, 1, t_start=40)) is None
    assert RiflexEmbedder(original, 6, config()).riflex_for(grid_ids(17, 1, 1, t_start=40)) == RIFLEx(6, 17)


def test_node_patches_a_clone_and_never_the_input():
    dm = WanModel()
    model = FakePatcher(dm)
    before = copy.deepcopy(model.model_options)
    (patched,) = native.patch_riflex(model, 0)
    assert patched is not model and model.object_patches == {} and model.model_options == before
    embedder = patched.object_patches[EMBEDDER]
    assert EMBEDDER == "diffusion_model.rope_embedder"
    assert isinstance(embedder, RiflexEmbedder) and embedder.setting == "auto"
    assert embedder.original is dm.rope_embedder and isinstance(dm.rope_embedder, EmbedND)  # model untouched
    (again,) = native.patch_riflex(patched, 4)  # a second RIFLEx replaces the first, never stacks
    second = again.object_patches[EMBEDDER]
    assert second.setting == 4 and second.original is dm.rope_embedder
    assert patched.object_patches[EMBEDDER] is embedder


def test_node_refusals_are_one_line():
    with pytest.raises(ValueError, match=r"^WanCore Native RIFLEx: RIFLEx k=23 is outside the temporal RoPE's "
                                         r"range 1\.\.22$"):
        native.patch_riflex(FakePatcher(WanModel()), 23)

    class Flux(torch.nn.Module):
        blocks = ()

    Flux.__module__ = "comfy.ldm.flux.model"
    with pytest.raises(ValueError, match="works on native Wan 2.1/2.2 models only; this MODEL is "
                                         "comfy.ldm.flux.model.Flux"):
        native.patch_riflex(FakePatcher(Flux()), 0)
    assert native.validate_riflex(0) is True and native.validate_riflex(6) is True
    assert "k=23" in native.validate_riflex(23)
    assert native.RIFLEX in native.NODES and native.RIFLEX.node_id == "WanCoreNativeRIFLEx"
    assert native.RIFLEX.category == native.CATEGORY
