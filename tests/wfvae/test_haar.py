"""The Haar transforms against an independent float64 naive formula (official filters: +-0.3536 in 3-D,
+-1/2 in 2-D)."""
from __future__ import annotations

import itertools

import torch

from wan_core.wfvae.haar import Haar2D, Haar3D, InverseHaar2D, InverseHaar3D


def sign(s: int, bits: tuple[int, ...]) -> int:
    """Subband ``s`` of the 3-D order (bit 0: W high, bit 1: H high, bit 2: T high); ``bits`` = (dt, dy, dx)."""
    dt, dy, dx = bits
    return (-1) ** ((s & 1) * dx + (s >> 1 & 1) * dy + (s >> 2 & 1) * dt)


def naive_haar3d(x: torch.Tensor) -> torch.Tensor:
    b, c, t, h, w = x.shape
    frames = [0] + list(range(t))  # the first frame pairs with itself
    out = torch.zeros(b, 8 * c, (t + 1) // 2, h // 2, w // 2, dtype=torch.float64)
    for s, ch, j, y, xx in itertools.product(range(8), range(c), range(out.shape[2]), range(h // 2), range(w // 2)):
        acc = 0.0
        for dt, dy, dx in itertools.product((0, 1), repeat=3):
            acc += sign(s, (dt, dy, dx)) * x[:, ch, frames[2 * j + dt], 2 * y + dy, 2 * xx + dx]
        out[:, s * c + ch, j, y, xx] = 0.3536 * acc
    return out


def naive_inverse3d(co: torch.Tensor) -> torch.Tensor:
    b, sc, t, h, w = co.shape
    c = sc // 8
    out = torch.zeros(b, c, 2 * t, 2 * h, 2 * w, dtype=torch.float64)
    for ch, tt, y, xx in itertools.product(range(c), range(2 * t), range(2 * h), range(2 * w)):
        bits = (tt % 2, y % 2, xx % 2)
        out[:, ch, tt, y, xx] = 0.3536 * sum(sign(s, bits) * co[:, s * c + ch, tt // 2, y // 2, xx // 2]
                                             for s in range(8))
    return out[:, :, 1:]


def naive_haar2d(x: torch.Tensor) -> torch.Tensor:
    b, c, t, h, w = x.shape
    out = torch.zeros(b, 4 * c, t, h // 2, w // 2, dtype=torch.float64)
    p, q, r, s_ = (x[..., 0::2, 0::2], x[..., 0::2, 1::2], x[..., 1::2, 0::2], x[..., 1::2, 1::2])
    for k, band in enumerate(((p + q + r + s_), (p + q - r - s_), (p - q + r - s_), (p - q - r + s_))):
        out[:, k * c:(k + 1) * c] = band / 2  # aa, ad (H high), da (W high), dd
    return out


def test_haar3d_matches_naive_formula():
    x = torch.randn(2, 3, 5, 4, 6, dtype=torch.float64)
    got = Haar3D().double()(x)
    assert torch.allclose(got, naive_haar3d(x), atol=1e-12)
    co = torch.randn(1, 16, 3, 2, 3, dtype=torch.float64)
    assert torch.allclose(InverseHaar3D().double()(co), naive_inverse3d(co), atol=1e-12)


def test_haar3d_round_trip_gain():
    """Analysis then synthesis returns the input times 8 * 0.3536**2 (the official constant is not 1/sqrt(8))."""
    x = torch.randn(1, 3, 9, 8, 8, dtype=torch.float64)
    back = InverseHaar3D().double()(Haar3D().double()(x))
    assert torch.allclose(back, x * 8 * 0.3536 ** 2, atol=1e-12)


def test_haar2d_matches_naive_formula_and_inverts():
    x = torch.randn(2, 3, 4, 6, 8, dtype=torch.float64)
    co = Haar2D().double()(x)
    assert torch.allclose(co, naive_haar2d(x), atol=1e-12)
    assert torch.allclose(InverseHaar2D().double()(co), x, atol=1e-12)
