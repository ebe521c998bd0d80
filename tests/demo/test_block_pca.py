"""The block-PCA code the VAE stage can distil from: checked against a per-block float64 loop and numpy's SVD."""
import numpy as np
import pytest
import torch

from wan_core.demo import train as T
from wan_core.demo._trainable import autograd_safe_vae
from wan_core.demo.block_pca import blocks, fit_block_pca, unblock
from wan_core.demo.model import DEMO_VAE
from wan_core.vae.model import WanVAEModel


def _videos(n=6, frames=9, h=16, w=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(n, 3, 1, h // 4, w // 4, generator=g)  # smooth-ish content: PCA has structure to find
    v = torch.nn.functional.interpolate(base.expand(-1, -1, frames, -1, -1), size=(frames, h, w), mode="trilinear")
    return (v * 2 - 1 + 0.05 * torch.randn(n, 3, frames, h, w, generator=g)).clamp(-1, 1)


def test_blocks_round_trip_and_follow_the_vaes_grouping():
    v = _videos(2)
    first, rest = blocks(v)
    assert first.shape == (2, 2, 3, 3 * 64) and rest.shape == (2, 2, 2, 3, 3 * 4 * 64)
    assert torch.equal(unblock(first, rest), v)
    # latent frame 1, block (1, 2) holds video frames 1-4, pixels [8:16, 16:24]
    assert torch.equal(rest[1, 0, 1, 2], v[1, :, 1:5, 8:16, 16:24].reshape(-1))


def test_code_matches_a_per_block_float64_reference():
    vids = _videos(6)
    pca = fit_block_pca(list(vids), z_dim=5)
    x = _videos(1, seed=3)
    got = pca.code(x)  # [1, 5, 3, 2, 3]
    assert got.shape == (1, 5, 3, 2, 3)
    xd = x.double()
    for f in range(3):
        for i in range(2):
            for j in range(3):
                if f == 0:
                    vec = xd[0, :, 0, 8 * i:8 * i + 8, 8 * j:8 * j + 8]
                    mean, basis, scale = pca.mean0, pca.basis0, pca.scale0
                else:
                    vec = xd[0, :, 1 + 4 * (f - 1):5 + 4 * (f - 1), 8 * i:8 * i + 8, 8 * j:8 * j + 8]
                    mean, basis, scale = pca.mean, pca.basis, pca.scale
                want = (vec.reshape(-1) - mean.double()) @ basis.double().T / scale.double()
                torch.testing.assert_close(got[0, :, f, i, j].double(), want, rtol=1e-4, atol=1e-4)


def test_fit_finds_the_leading_principal_subspace_with_unit_coefficients():
    vids = _videos(8)
    pca = fit_block_pca(list(vids), z_dim=6)
    rows = blocks(vids)[1].reshape(-1, 3 * 4 * 64).double().numpy()
    centred = rows - rows.mean(0)
    s = np.linalg.svd(centred, compute_uv=False)
    captured = (centred @ pca.basis.double().numpy().T) ** 2
    np.testing.assert_allclose(captured.sum(0) / (len(rows) - 1), s[:6] ** 2 / (len(rows) - 1), rtol=1e-3)
    np.testing.assert_allclose(pca.basis.double() @ pca.basis.double().T, np.eye(6), atol=1e-5)
    c = pca.code(vids)
    torch.testing.assert_close(c[:, :, 1:].transpose(0, 1).flatten(1).std(1), torch.ones(6), rtol=1e-3, atol=1e-3)
    # each direction's largest entry is positive: the fit does not depend on the eigen-solver's sign choice
    assert bool((pca.basis.gather(1, pca.basis.abs().argmax(1, keepdim=True)) > 0).all())


def test_decode_is_the_least_squares_inverse():
    vids = _videos(6)
    pca = fit_block_pca(list(vids), z_dim=4)
    x = _videos(2, seed=5)
    c = pca.code(x)
    torch.testing.assert_close(pca.code(pca.decode(c)), c, rtol=1e-4, atol=1e-4)  # a projection
    inside = pca.decode(torch.randn(c.shape, generator=torch.Generator().manual_seed(2)))  # a video in the span
    torch.testing.assert_close(pca.decode(pca.code(inside)), inside, rtol=1e-4, atol=1e-4)
    assert float(((pca.decode(c) - x) ** 2).mean()) > 1e-4  # a video outside it is only approximated


def test_shapes_the_vae_cannot_code_are_refused():
    pca = fit_block_pca(list(_videos(4)), z_dim=3)
    with pytest.raises(ValueError, match="1 \\+ 4n"):
        pca.code(torch.zeros(1, 3, 6, 16, 16))
    with pytest.raises(ValueError, match="multiples of 8"):
        pca.code(torch.zeros(1, 3, 5, 12, 16))
    with pytest.raises(ValueError, match=r"\[B, 3, T, H, W\]"):
        pca.code(torch.zeros(3, 5, 16, 16))


def test_the_distillation_term_adds_its_weight_times_the_code_losses():
    torch.manual_seed(0)
    model = WanVAEModel(DEMO_VAE)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("gamma"):
                p.fill_(1.0)
    x = _videos(1, frames=5, h=16, w=16)
    pca = fit_block_pca(list(_videos(4, frames=5, h=16, w=16)), z_dim=16)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.0)  # the weights stay put: every call sees the same model
    gen = lambda: torch.Generator().manual_seed(1)  # noqa: E731
    with autograd_safe_vae():  # training goes through the out-of-place forward, as the VAE stage's
        plain, _ = T._reconstruction_step(model, x, opt, params, 0.0, 1.0, 1.0, True, gen())
        mixed, _ = T._reconstruction_step(model, x, opt, params, 0.0, 1.0, 1.0, True, gen(), pca=pca, pca_weight=0.5)
    with torch.no_grad():
        c = pca.code(x)
        z = model.encode_chunk(x, None)
        distill = torch.mean((z - c) ** 2) + torch.mean((model.decoder(model.conv2(c)) - x) ** 2)
    torch.testing.assert_close(mixed, plain + 0.5 * distill, rtol=1e-4, atol=1e-5)
    assert float(distill) > 0.01 * float(plain)  # the term is not negligible: the check can fail
