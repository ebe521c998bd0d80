"""Task helpers: frames + masks for extend / first-last frame / inpaint / outpaint / reference-only."""
from __future__ import annotations

import pytest
import torch

from wan_core.vace import extend_clip, first_last_frame, fold_mask, inpaint, outpaint, reference_only, vace_context
from wan_core.vace.checks import resolve_video
from wan_core.vace.tasks import EXTEND_FILL, INPAINT_FILL, OUTPAINT_FILL


def rand(*shape, seed=0):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def test_fill_colours_are_the_preprocessors_greys_and_black():
    assert EXTEND_FILL == 0.0 and OUTPAINT_FILL == -1.0
    assert abs(INPAINT_FILL - 0.5 / 127.5) < 1e-12


def test_extend_clip_keeps_the_head_and_masks_the_rest():
    head = rand(2, 3, 3, 16, 32)
    inp = extend_clip(head, 9)
    assert inp.frames.shape == (2, 3, 9, 16, 32) and inp.masks.shape == (2, 1, 9, 16, 32)
    assert torch.equal(inp.frames[:, :, :3], head) and torch.all(inp.frames[:, :, 3:] == 0)
    assert torch.all(inp.masks[:, :, :3] == 0) and torch.all(inp.masks[:, :, 3:] == 1)


@pytest.mark.parametrize("which", ["first", "last", "both"])
def test_first_last_frame(which):
    first, last = rand(1, 3, 16, 16, seed=1), rand(1, 3, 16, 16, seed=2)
    inp = first_last_frame(first if which != "last" else None, last if which != "first" else None, 5)
    kept = {"first": [0], "last": [4], "both": [0, 4]}[which]
    for i in range(5):
        assert torch.all(inp.masks[:, :, i] == (0 if i in kept else 1))
        if i not in kept:
            assert torch.all(inp.frames[:, :, i] == 0)
    if which != "last":
        assert torch.equal(inp.frames[:, :, 0], first)
    if which != "first":
        assert torch.equal(inp.frames[:, :, 4], last)


def test_inpaint_paints_the_hole_and_keeps_soft_masks():
    video = rand(1, 3, 5, 16, 16)
    mask = torch.zeros(1, 1, 1, 16, 16)
    mask[..., 4:12, 4:12] = 0.8
    mask[..., 0, 0] = 0.3  # soft but below 0.5: kept, the value stays in the masks
    inp = inpaint(video, mask)
    assert inp.masks.shape == (1, 1, 5, 16, 16) and torch.equal(inp.masks[:, :, 2], mask[:, :, 0])
    hole = torch.zeros(16, 16, dtype=torch.bool)
    hole[4:12, 4:12] = True
    assert torch.all(inp.frames[..., hole] == INPAINT_FILL)
    assert torch.equal(inp.frames[..., ~hole], video[..., ~hole])


def test_outpaint_pads_to_a_bigger_canvas():
    video = rand(1, 3, 5, 16, 16)
    inp = outpaint(video, top=8, bottom=8, left=16, right=0)
    assert inp.frames.shape == (1, 3, 5, 32, 32)
    assert torch.equal(inp.frames[..., 8:24, 16:32], video)
    assert torch.all(inp.masks[..., 8:24, 16:32] == 0)
    assert float(inp.masks.sum()) == 5 * (32 * 32 - 16 * 16)
    assert torch.all(inp.frames[..., :8, :] == OUTPAINT_FILL)
    with pytest.raises(ValueError, match=r"outpaint canvas \(video \+ padding\): .*multiples of 16, got 24x16"):
        outpaint(video, top=8)
    with pytest.raises(ValueError, match="non-negative ints"):
        outpaint(video, top=-16, bottom=16)


def test_reference_only_is_what_vace_context_uses_without_frames():
    inp = reference_only(5, 16, 32, batch=2)
    frames, masks = resolve_video(None, None, (5, 16, 32), 2)
    assert torch.equal(inp.frames, frames) and torch.equal(inp.masks, masks)
    assert inp.frames.shape == (2, 3, 5, 16, 32) and torch.all(inp.frames == 0) and torch.all(inp.masks == 1)


def test_task_output_feeds_vace_context(vae):
    ctx = vace_context(vae, **vars(extend_clip(rand(1, 3, 2, 16, 16), 5)))
    assert ctx.context.shape == (1, 96, 2, 2, 2)
    # nearest-exact picks pixel frames 1 and 3: kept, generated
    assert torch.all(ctx.context[:, 32:, 0] == 0) and torch.all(ctx.context[:, 32:, 1] == 1)
    # one kept frame: pixel frame 0 is never picked, the mask channels say "generate" (the official recipe's loss)
    assert torch.all(fold_mask(extend_clip(rand(1, 3, 1, 16, 16), 5).masks) == 1)


@pytest.mark.parametrize("call, match", [
    (lambda: extend_clip(rand(1, 3, 9, 16, 16), 9), "head: expected 1 to 8 frames"),
    (lambda: extend_clip(rand(1, 3, 16, 16), 9), r"head: expected a clip \[B, 3, K, H, W\]"),
    (lambda: extend_clip(rand(1, 3, 2, 16, 16), 8), "length: VACE needs 4n\\+1 frames"),
    (lambda: first_last_frame(None, None, 9), "at least one image"),
    (lambda: first_last_frame(rand(1, 3, 16, 16), rand(1, 3, 32, 16), 9), "same shape"),
    (lambda: first_last_frame(rand(1, 3, 16, 24), None, 9), "first: VACE needs height and width"),
    (lambda: inpaint(rand(1, 3, 5, 16, 16), torch.ones(1, 1, 5, 8, 8)), "masks: expected the frames' batch"),
    (lambda: reference_only(6, 16, 16), "reference_only: VACE needs 4n\\+1 frames"),
])
def test_bad_task_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
