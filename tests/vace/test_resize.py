"""resize_crop / resize_mask: the official loader's cover-scale + centre crop, frames and batch items kept apart."""
from __future__ import annotations

import torch

from wan_core.vace import resize_crop, resize_mask


def test_same_size_is_untouched():
    video = torch.rand(1, 3, 5, 16, 32)
    assert resize_crop(video, 16, 32) is video


def test_cover_scale_one_is_a_centre_crop():
    video = torch.rand(2, 3, 5, 16, 48)  # scale max(16/16, 16/48) = 1: no resampling, columns 16..31 kept
    assert torch.allclose(resize_crop(video, 16, 16), video[..., 16:32], atol=1e-6)
    tall = torch.rand(1, 3, 1, 40, 16)  # rows (40 - 16) // 2 = 12 .. 27
    assert torch.allclose(resize_crop(tall, 16, 16), tall[..., 12:28, :], atol=1e-6)


def test_frames_and_batch_items_stay_apart():
    values = torch.arange(2 * 5, dtype=torch.float32).view(2, 1, 5, 1, 1) / 10
    video = values.expand(2, 3, 5, 24, 40).contiguous()  # every frame a different constant
    out = resize_crop(video, 16, 16)  # scale max(16/40, 16/24) = 2/3 -> 16x27, crop
    assert out.shape == (2, 3, 5, 16, 16)
    assert torch.allclose(out, values.expand_as(out), atol=1e-5)


def test_resize_mask_clamps_the_bicubic_overshoot():
    mask = torch.zeros(1, 1, 1, 16, 16)
    mask[..., 8:] = 1.0
    raw = resize_crop(mask, 48, 48)
    assert float(raw.max()) > 1.0 or float(raw.min()) < 0.0  # bicubic overshoots a step edge
    out = resize_mask(mask, 48, 48)
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0
    assert torch.equal(out, raw.clamp(0, 1))
