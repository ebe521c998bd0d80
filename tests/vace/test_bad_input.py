"""Bad VACE input: one-line ValueErrors naming the input and what was expected, raised before any encoding."""
from __future__ import annotations

import pytest
import torch

from wan_core.vace import fit_reference, max_reference_images, vace_context
from wan_core.vae import TINY_VAE22, WAN21_VAE, WanVAE, build_model


class NoEncode:
    """Stands in for a Wan 2.1 VAE whose encode must not be reached."""

    config = WAN21_VAE

    def encode(self, *args, **kwargs):
        raise AssertionError("encode reached with bad input")


def v(*shape, value=None):
    return torch.zeros(*shape) if value is None else torch.full(shape, value)


NAN = float("nan")
CASES = [
    (dict(frames=v(1, 3, 8, 16, 16)), "frames: VACE needs 4n\\+1 frames .* got 8 \\(nearest valid: 5 or 9\\)"),
    (dict(frames=v(1, 3, 5, 24, 16)), "frames: VACE needs height and width that are multiples of 16, got 24x16"),
    (dict(frames=v(1, 5, 16, 16, 3)), "frames: expected a video \\[B, 3, T, H, W\\]"),
    (dict(frames=v(1, 3, 5, 16, 16).long()), "frames: expected floating-point"),
    (dict(frames=v(1, 3, 5, 16, 16, value=255.0)), "frames: expected values in \\[-1, 1\\], got \\[255, 255\\]"),
    (dict(frames=v(1, 3, 5, 16, 16, value=NAN)), "frames: .* NaN"),
    (dict(frames=v(1, 3, 5, 16, 16), masks=v(1, 1, 9, 16, 16)), "masks: expected the frames' batch, length and size"),
    (dict(frames=v(1, 3, 5, 16, 16), masks=v(1, 1, 5, 32, 16)), "masks: expected the frames' batch"),
    (dict(frames=v(1, 3, 5, 16, 16), masks=v(2, 1, 5, 16, 16)), "masks: expected the frames' batch"),
    (dict(frames=v(1, 3, 5, 16, 16), masks=v(1, 5, 16, 16)), "masks: expected \\[B, 1, T, H, W\\]"),
    (dict(frames=v(1, 3, 5, 16, 16), masks=v(1, 3, 5, 16, 16)), "masks: expected \\[B, 1, T, H, W\\]"),
    (dict(frames=v(1, 3, 5, 16, 16), masks=v(1, 1, 5, 16, 16, value=255.0)), "masks: expected values in \\[0, 1\\]"),
    (dict(frames=v(1, 3, 5, 16, 16), masks=v(1, 1, 5, 16, 16, value=-0.1)), "masks: expected values in \\[0, 1\\]"),
    (dict(frames=v(1, 3, 5, 16, 16), masks=v(1, 1, 5, 16, 16, value=NAN)), "masks .* NaN"),
    (dict(masks=v(1, 1, 6, 16, 16)), "masks: VACE needs 4n\\+1 frames"),
    (dict(), "size: expected \\(frames, height, width\\)"),
    (dict(size=(5, 16, 20)), "size: VACE needs height and width"),
    (dict(frames=v(1, 3, 5, 16, 16), size=(5, 16, 16)), "size, batch: give them only when neither"),
    (dict(frames=v(1, 3, 5, 16, 16), batch=2), "size, batch: give them only when neither"),
    (dict(size=(5, 16, 16), batch=0), "batch: expected a positive int"),
    (dict(frames=v(1, 3, 5, 16, 16), ref_images=v(1, 3, 16, 16)), "ref_images: expected a list with one entry per"),
    (dict(frames=v(2, 3, 5, 16, 16), ref_images=[[v(3, 16, 16)]]), "ref_images: expected a list .* \\(2\\), .* 1 entr"),
    (dict(frames=v(1, 3, 5, 16, 16), ref_images=[[v(16, 16, 3)]]), "ref_images\\[0\\]\\[0\\]: expected an RGB image"),
    (dict(frames=v(1, 3, 5, 16, 16), ref_images=[[v(4, 16, 16)]]), "ref_images\\[0\\]\\[0\\]: expected an RGB image"),
    (dict(frames=v(1, 3, 5, 16, 16), ref_images=[v(2, 4, 16, 16)]), "ref_images\\[0\\]\\[0\\]: expected an RGB"),
    (dict(frames=v(1, 3, 5, 16, 16), ref_images=[[v(3, 16, 16, value=NAN)]]), "ref_images\\[0\\]\\[0\\]: .* NaN"),
    (dict(frames=v(1, 3, 5, 16, 16), ref_images=[[v(3, 16, 16, value=200.0)]]),
     "ref_images\\[0\\]\\[0\\]: expected values in \\[-1, 1\\]"),
    (dict(frames=v(1, 3, 5, 16, 16), ref_images=[v(3, 3, 16, 16)]),
     "ref_images: at most 2 reference images for a 5-frame video .* got 3"),
    (dict(frames=v(2, 3, 5, 16, 16), ref_images=[[v(3, 16, 16)], []]),
     "same number of reference images, got \\[0, 1\\]"),
    (dict(frames=v(1, 3, 5, 16, 16), ref_images=["image.png"]),
     "ref_images\\[0\\]: expected .* \\(load image files first\\), got str"),
    (dict(size=5), "size: expected \\(frames, height, width\\)"),
]


@pytest.mark.parametrize("kwargs, match", CASES, ids=[m[:40] for _, m in CASES])
def test_bad_input_is_one_line_and_named(kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        vace_context(NoEncode(), **kwargs)
    assert "\n" not in str(info.value)


def test_other_vae_is_refused():
    vae22 = WanVAE(build_model(TINY_VAE22))
    with pytest.raises(ValueError, match="vae: VACE needs the Wan 2.1 VAE \\(16 channels, 8x spatial\\), got 48"):
        vace_context(vae22, v(1, 3, 5, 32, 32))


def test_soft_masks_bool_masks_and_resampling_overshoot_are_accepted(vae):
    frames = v(1, 3, 1, 16, 16, value=1.2)  # bicubic overshoot: passed on, as the official loader does
    soft = vace_context(vae, frames, v(1, 1, 1, 16, 16, value=0.5)).context
    hard = vace_context(vae, frames, torch.zeros(1, 1, 1, 16, 16, dtype=torch.bool)).context
    assert torch.equal(soft[:, :32], hard[:, :32])  # 0.5 is not > 0.5: both all-inactive splits
    assert torch.all(soft[:, 32:] == 0.5) and torch.all(hard[:, 32:] == 0)


def test_reference_cap_and_fitting():
    assert [max_reference_images(f) for f in (1, 2, 21)] == [1, 2, 21]
    img = torch.rand(3, 16, 16) * 2 - 1
    assert fit_reference(img, 16, 16) is img
    wide = fit_reference(img, 16, 32)  # scale 1: centred, white bars left and right
    assert torch.equal(wide[:, :, 8:24], img) and torch.all(wide[:, :, :8] == 1) and torch.all(wide[:, :, 24:] == 1)
