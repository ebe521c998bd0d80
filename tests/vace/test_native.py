"""ComfyUI's native VACE conditioning (``WanVaceToVideo``) <-> our 96-channel context: a round trip, and the node's
own arithmetic (restated here from ComfyUI 0.3.64 comfy_extras/nodes_wan.py in float64) converted equals
``vace_context`` for binary masks and differs for soft ones (it splits without binarising)."""
from __future__ import annotations

import pytest
import torch

from wan_core.latent_format import LATENTS_MEAN
from wan_core.vace import fold_mask, from_native, from_native_conditioning, to_native, vace_context


def rel_err(a, b) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


def comfy_node(vae64, control: torch.Tensor, mask: torch.Tensor, reference: torch.Tensor | None) -> dict:
    """WanVaceToVideo's entries for one video: ``control`` [T, H, W, 3] and ``mask`` [T, H, W, 1] in [0, 1] (already
    at the target size), ``reference`` [1, H, W, 3] or None; ComfyUI's VAE.encode maps [0, 1] images to 2x - 1."""
    def encode(images):  # [T, H, W, 3] in [0, 1] -> raw latents [1, 16, T', h, w]
        with torch.no_grad():
            return vae64.model.encode_full((images.double() * 2 - 1).permute(3, 0, 1, 2)[None])

    c = control.double() - 0.5
    m = mask.double()
    latent = torch.cat([encode(c * (1 - m) + 0.5), encode(c * m + 0.5)], dim=1)
    t, h, w = mask.shape[:3]
    folded = m.view(t, h // 8, 8, w // 8, 8).permute(2, 4, 0, 1, 3).reshape(64, t, h // 8, w // 8)
    folded = torch.nn.functional.interpolate(folded[None], size=((t - 1) // 4 + 1, h // 8, w // 8),
                                             mode="nearest-exact")
    if reference is not None:
        ref = encode(reference)
        mean = torch.tensor(LATENTS_MEAN, dtype=torch.float64).view(1, 16, 1, 1, 1).expand_as(ref)  # process_out(0)
        latent = torch.cat([torch.cat([ref, mean], dim=1), latent], dim=2)
        folded = torch.cat([torch.zeros_like(folded[:, :, :1]), folded], dim=2)
    return {"vace_frames": [latent], "vace_mask": [folded], "vace_strength": [0.7]}


def inputs(soft: bool):
    gen = torch.Generator().manual_seed(11)
    control = torch.rand(5, 16, 32, 3, generator=gen)
    mask = torch.rand(5, 16, 32, 1, generator=gen)
    mask = mask if soft else (mask > 0.5).double()
    reference = torch.rand(1, 16, 32, 3, generator=gen)
    return control, mask, reference


def ours(vae, control, mask, reference):
    frames = control.permute(3, 0, 1, 2)[None].float() * 2 - 1
    masks = mask.permute(3, 0, 1, 2)[None].float()
    return vace_context(vae, frames, masks, [[reference[0].permute(2, 0, 1).float() * 2 - 1]])


def test_native_node_with_binary_mask_converts_to_our_context(vae, vae64):
    control, mask, reference = inputs(soft=False)
    ((context, strength),) = from_native_conditioning(comfy_node(vae64, control, mask, reference))
    assert strength == 0.7
    assert rel_err(context, ours(vae, control, mask, reference).context) <= 1e-4


def test_native_node_soft_mask_differs_from_the_official_split(vae, vae64):
    control, mask, reference = inputs(soft=True)
    ((context, _),) = from_native_conditioning(comfy_node(vae64, control, mask, reference))
    official = ours(vae, control, mask, reference).context
    assert rel_err(context[:, 32:], official[:, 32:]) <= 1e-6  # the mask channels agree (both keep it as given)
    assert rel_err(context[:, :32, 1:], official[:, :32, 1:]) > 1e-2  # the latents do not: no binarising


def test_round_trip_through_native_entries(vae):
    gen = torch.Generator().manual_seed(2)
    frames = torch.rand(2, 3, 1, 16, 16, generator=gen) * 2 - 1
    ctx = vace_context(vae, frames, torch.rand(2, 1, 1, 16, 16, generator=gen), [[torch.zeros(3, 16, 16)]] * 2)
    native = to_native(ctx.context, 0.5)
    assert native["vace_frames"][0].shape == (2, 32, 2, 2, 2) and native["vace_mask"][0].shape == (2, 64, 2, 2, 2)
    mean = torch.tensor(LATENTS_MEAN).view(1, 16, 1, 1)
    assert torch.allclose(native["vace_frames"][0][:, 16:32, 0], mean.expand(2, 16, 2, 2))  # zeros -> the means
    ((back, s),) = from_native(native["vace_frames"], native["vace_mask"], native["vace_strength"])
    assert s == 0.5 and rel_err(back, ctx.context) <= 1e-6


def test_chained_entries_and_comfy_defaults():
    frames = [torch.randn(1, 32, 3, 2, 2), torch.randn(1, 32, 3, 2, 2)]
    pairs = from_native(frames)
    assert [s for _, s in pairs] == [1.0, 1.0]
    assert all(torch.equal(c[:, 32:], torch.ones(1, 64, 3, 2, 2)) for c, _ in pairs)
    assert from_native_conditioning({"pooled_output": None}) == []
    masks = [fold_mask(torch.ones(1, 1, 9, 16, 16))] * 2
    assert [s for _, s in from_native(frames, masks, [0.3, 2.0])] == [0.3, 2.0]


@pytest.mark.parametrize("args, match", [
    (([torch.randn(1, 16, 3, 2, 2)],), r"vace_frames\[0\]: expected raw latents \[B, 32"),
    (([torch.randn(1, 32, 3, 2, 2)], [torch.ones(1, 64, 2, 2, 2)]), r"vace_mask\[0\]: expected the frames' F, h, w"),
    (([torch.randn(1, 32, 3, 2, 2)], [torch.ones(1, 4, 3, 2, 2)]), r"vace_mask\[0\]: expected \[B, 64"),
    (([torch.randn(1, 32, 3, 2, 2)], None, [1.0, 2.0]), "expected lists of one equal length"),
    (([],), "expected lists of one equal length"),
    (([torch.full((1, 32, 3, 2, 2), float("nan"))],), "NaN"),
])
def test_bad_native_input(args, match):
    with pytest.raises(ValueError, match=match):
        from_native(*args)


def test_to_native_refuses_other_tensors():
    with pytest.raises(ValueError, match=r"context: expected a VACE context \[B, 96"):
        to_native(torch.zeros(1, 32, 3, 2, 2))
