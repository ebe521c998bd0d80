"""The demo VAE's latent spectrum map: the covariance it produces (against a float64 reference) and its exact
fold into the VAE's ``conv1``/``conv2`` (encoding and decoding unchanged, the latents mapped)."""
import pytest
import torch

from wan_core import latent_format as LF
from wan_core.demo import data as D
from wan_core.demo import train as T
from wan_core.demo.model import DEMO_VAE
from wan_core.vae.model import WanVAEModel


def _correlated(c=6, n=4000, seed=0):
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(c, c, generator=g, dtype=torch.float64)
    scales = torch.tensor([10.0, 3.0, 1.0, 0.3, 0.1, 0.03], dtype=torch.float64)[:c]
    return mix @ (scales.view(-1, 1) * torch.randn(c, n, generator=g, dtype=torch.float64)) + 2.0


@pytest.mark.parametrize("power", [1.0, 0.5, 0.0])
def test_spectrum_map_raises_the_eigenvalues_to_the_power(power):
    z = _correlated()
    m, mu, lam = T.spectrum_map(z.float(), power)
    # reference: eigenvalues of the sample covariance, naive float64
    zc = z - z.mean(1, keepdim=True)
    ref = torch.linalg.eigvalsh(zc @ zc.T / (z.shape[1] - 1)).flip(0)
    torch.testing.assert_close(lam, ref, rtol=1e-4, atol=1e-6)
    y = m @ (z - mu.view(-1, 1))
    yc = y - y.mean(1, keepdim=True)
    cov = yc @ yc.T / (z.shape[1] - 1)
    got = torch.linalg.eigvalsh(cov).flip(0)
    want = ref ** power * z.shape[0] / (ref ** power).sum()
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-6)
    assert abs(float(torch.trace(cov)) - z.shape[0]) < 1e-3 * z.shape[0]
    # the eigenvectors stay: the map only rescales along them (symmetric, no rotation)
    torch.testing.assert_close(m, m.T)


@pytest.mark.parametrize("power", [1.0, 0.5])
def test_spectrum_map_gives_each_channel_its_variance(power):
    z = _correlated()
    v = torch.tensor([5.0, 2.0, 1.0, 0.5, 0.2, 0.1], dtype=torch.float64)
    m, mu, _ = T.spectrum_map(z.float(), power, channel_variances=v)
    y = m @ (z - mu.view(-1, 1))
    yc = y - y.mean(1, keepdim=True)
    cov = yc @ yc.T / (z.shape[1] - 1)  # naive float64
    want = v ** power * z.shape[0] / (v ** power).sum()
    torch.testing.assert_close(cov, torch.diag(want), rtol=0, atol=1e-3 * float(want.max()))
    # a per-channel scale after the symmetric whitening: channel c stays channel c as far as a whitening allows
    w = torch.diag(want.rsqrt()) @ m
    torch.testing.assert_close(w, w.T)
    zc = z - z.mean(1, keepdim=True)
    chol = torch.linalg.cholesky(zc @ zc.T / (z.shape[1] - 1))  # any whitening is Q chol^-1: the symmetric is closest
    eye = torch.eye(6, dtype=torch.float64)
    assert float((w - eye).norm()) < float((torch.linalg.inv(chol) - eye).norm())


def test_the_map_folds_into_the_vae_exactly():
    torch.manual_seed(0)
    model = WanVAEModel(DEMO_VAE).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("gamma"):
                p.fill_(1.0)
    before = WanVAEModel(DEMO_VAE).eval()
    before.load_state_dict(model.state_dict())
    video, _ = D.make_clip(D.TRAIN_SEED_LIMIT + 3, width=32, height=32, frames=9)
    x = video[None]
    a, b, summary = T.shape_latent_spectrum_(model, 0.5, clips=6)
    with torch.no_grad():
        z0, z1 = LF.to_model(before.encode_full(x)), LF.to_model(model.encode_full(x))
        # the map the function folded, recomputed from the same training clips
        clips = [LF.to_model(before.encode_full(D.render(D.clip_spec(s))[None]))[0].flatten(1)
                 for s in D.training_seeds(6)]
        m, mu, lam0 = T.spectrum_map(torch.cat(clips, 1), 0.5)
        want = torch.einsum("ij,bj...->bi...", m.float(), z0 - mu.float().view(1, -1, 1, 1, 1))
        torch.testing.assert_close(z1, want, rtol=1e-3, atol=1e-3 * float(want.abs().max()))
        # decoding the mapped latents gives what decoding the old ones gave
        d0 = before.decoder(before.conv2(LF.from_model(z0)))
        d1 = model.decoder(model.conv2(LF.from_model(z1)))
        torch.testing.assert_close(d1, d0, rtol=1e-3, atol=1e-4)
        # the returned map undoes the fold (what the decoder stage trains behind)
        inverse = torch.linalg.inv(a)
        T._fold_latent_map_(model, inverse, -inverse @ b)
        for (name, p0), p1 in zip(before.state_dict().items(), model.state_dict().values()):
            torch.testing.assert_close(p1, p0, rtol=1e-4, atol=1e-5, msg=name)
    torch.testing.assert_close(torch.tensor(summary["eigenvalues_before"], dtype=torch.float64), lam0,
                               rtol=0, atol=1e-4)  # rounded to 4 places
    # measured again after the fold: the square roots of the eigenvalues before, scaled to a trace of 16
    lam1 = torch.tensor(summary["eigenvalues_after"], dtype=torch.float64)
    torch.testing.assert_close(lam1, 16 * lam0.sqrt() / lam0.sqrt().sum(), rtol=0.01, atol=2e-4)
