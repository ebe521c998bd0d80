"""``vace_context`` equals the official VACE recipe (float64 re-statement in official_recipe.py): rel <= 1e-4."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from official_recipe import fold_mask_loops, nearest_exact_indices, official_context  # noqa: E402

from wan_core.progress import Interrupted  # noqa: E402
from wan_core.vace import fold_mask, vace_context  # noqa: E402

REL = 1e-4


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-12))


def soft_masks(batch: int, t: int, h: int, w: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    m = torch.rand(batch, 1, t, h, w, generator=gen)
    m[..., :3, :3] = 0.5  # exactly 0.5 is inactive (the split is strict: mask > 0.5)
    return m


def video(batch: int, t: int, h: int, w: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(batch, 3, t, h, w, generator=gen) * 2 - 1


def test_nearest_exact_picks_pixel_frames_1_4_7():
    assert nearest_exact_indices(9, 3) == [1, 4, 7]
    mask = torch.arange(9.0).view(1, 1, 9, 1, 1).expand(1, 1, 9, 8, 8)
    assert fold_mask(mask)[0, :, :, 0, 0].unique(dim=0).tolist() == [[1.0, 4.0, 7.0]]


@pytest.mark.parametrize("t, h, w", [(9, 16, 32), (21, 32, 16)])
def test_fold_mask_equals_block_loops(t, h, w):
    masks = soft_masks(2, t, h, w, seed=t)
    ours = fold_mask(masks)
    for b in range(2):
        assert torch.equal(ours[b].double(), fold_mask_loops(masks[b].double()))


def test_fold_mask_is_pixel_unshuffle_order():
    masks = soft_masks(1, 5, 16, 16, seed=1)
    folded = fold_mask(masks)  # time picks of 5 -> 2: frames 1 and 3
    unshuffled = torch.nn.functional.pixel_unshuffle(masks[0, :, [1, 3]].transpose(0, 1), 8)  # [2, 64, h, w]
    assert torch.equal(folded[0], unshuffled.transpose(0, 1))


def test_context_with_masks_and_references_matches_official(vae, vae64):
    frames, masks = video(2, 9, 32, 32, seed=0), soft_masks(2, 9, 32, 32, seed=0)
    gen = torch.Generator().manual_seed(5)
    refs = [[torch.rand(3, 32, 32, generator=gen) * 2 - 1, torch.rand(3, 12, 20, generator=gen) * 2 - 1]
            for _ in range(2)]
    ctx = vace_context(vae, frames, masks, refs)
    assert ctx.context.shape == (2, 96, 2 + 3, 4, 4) and ctx.ref_frames == 2
    want = official_context(vae64, frames, masks, refs)
    assert rel_err(ctx.context, want) <= REL
    assert torch.equal(ctx.context[:, 16:32, :2], torch.zeros(2, 16, 2, 4, 4))  # references: zero reactive half
    assert torch.equal(ctx.context[:, 32:, :2], torch.zeros(2, 64, 2, 4, 4))  # and zero mask frames
    assert torch.equal(ctx.context[:, 32:, 2:], fold_mask(masks))  # the mask as given, not binarised


def test_defaults_match_official_all_ones_and_grey(vae, vae64):
    frames = video(1, 5, 16, 16, seed=2)
    ones = torch.ones(1, 1, 5, 16, 16)
    no_mask = vace_context(vae, frames)
    assert rel_err(no_mask.context, official_context(vae64, frames, ones, [[]])) <= REL
    grey = vace_context(vae, size=(5, 16, 16), batch=2)
    want = official_context(vae64, torch.zeros(2, 3, 5, 16, 16), torch.ones(2, 1, 5, 16, 16), [[], []])
    assert grey.context.shape == (2, 96, 2, 2, 2) and grey.ref_frames == 0
    assert rel_err(grey.context, want) <= REL


def test_masks_without_frames_use_a_grey_video(vae, vae64):
    masks = soft_masks(1, 5, 16, 16, seed=4)
    ctx = vace_context(vae, masks=masks)
    assert rel_err(ctx.context, official_context(vae64, torch.zeros(1, 3, 5, 16, 16), masks, [[]])) <= REL


def test_trim_and_shapes(vae):
    ref = torch.zeros(3, 16, 16)
    ctx = vace_context(vae, size=(9, 16, 16), ref_images=[[ref]])
    assert ctx.latent_shape == (4, 2, 2) and ctx.video_frames == 9
    latents = torch.randn(1, 16, 4, 2, 2)
    assert torch.equal(ctx.trim(latents), latents[:, :, 1:])
    with pytest.raises(ValueError, match="latents: expected \\[B, C, 4, 2, 2\\]"):
        ctx.trim(torch.randn(1, 16, 3, 2, 2))


def test_progress_counts_every_encoded_frame_and_interrupt_stops(vae):
    seen = []
    vace_context(vae, video(1, 5, 16, 16, 0), ref_images=[[torch.zeros(3, 16, 16)]],
                 progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (5, 5) and [d for d, _ in seen] == sorted(d for d, _ in seen)  # 2 parts x 2 frames + 1 ref
    with pytest.raises(Interrupted):
        vace_context(vae, video(1, 5, 16, 16, 0), interrupt=lambda: True)
