"""Deterministic noise: a seeded CPU generator, float32 N(0, I), same seed -> same noise."""
from __future__ import annotations

import pytest
import torch

from wan_core.sampling import make_noise

SHAPE = (1, 16, 3, 6, 10)


def test_same_seed_same_noise_and_different_seeds_differ():
    a, b, c = make_noise(42, SHAPE), make_noise(42, SHAPE), make_noise(43, SHAPE)
    assert a.shape == SHAPE and a.dtype == torch.float32
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def test_noise_is_drawn_in_float32_on_cpu_before_the_move():
    # the values do not depend on the requested device/dtype: they are cast after drawing
    assert torch.equal(make_noise(7, SHAPE, device="cpu", dtype=torch.float64), make_noise(7, SHAPE).double())
    assert torch.equal(make_noise(7, SHAPE, dtype=torch.bfloat16), make_noise(7, SHAPE).bfloat16())


def test_noise_is_standard_normal():
    noise = make_noise(0, (4, 16, 9, 32, 32))
    assert abs(noise.mean().item()) < 0.01 and abs(noise.std().item() - 1) < 0.01


def test_batch_noise_is_one_draw_of_the_full_shape():
    # a batch is drawn in one call (as ComfyUI does), so item 0 of a batch of 2 is the batch-1 noise
    assert torch.equal(make_noise(5, (2,) + SHAPE[1:])[:1], make_noise(5, SHAPE))


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5, True])
def test_bad_seeds_are_rejected(seed):
    with pytest.raises(ValueError, match="seed"):
        make_noise(seed, SHAPE)


def test_bad_shape_is_rejected():
    with pytest.raises(ValueError, match="shape"):
        make_noise(1, (1, 16, 0, 4, 4))


def test_matches_comfyui_noise_for_the_same_seed():
    # ComfyUI (comfy/sample.py prepare_noise): generator = torch.manual_seed(seed), then
    # torch.randn(latent.size(), dtype=float32, generator=generator, device="cpu")
    for seed in (0, 123456789, 2**40 + 3):
        with torch.random.fork_rng(devices=[]):
            generator = torch.manual_seed(seed)
            reference = torch.randn(SHAPE, dtype=torch.float32, generator=generator, device="cpu")
        assert torch.equal(make_noise(seed, SHAPE), reference)
