"""Flow-matching objective (Wan report section 4.2.2, docs/algorithms.md section 7) in the sampler's convention
(docs/wan_spec.md section 6.1).

References: hand computation in Python floats, the logit-normal distribution's moments by float64
quadrature and its CDF in closed form, an analytic single-point velocity field, plain Euler written here.
"""
import math

import numpy as np
import pytest
import torch
from torch import nn

from wan_core.train.loss import (flow_matching_loss, make_flow_matching_batch, sample_timesteps, shift_sigma,
                                 sigma_to_wan_t, wan_t_to_sigma)


def test_loss_equals_hand_computation():
    # x1 = data, x0 = noise, report time t; model: v = 0.5 * x + timestep / 1000 (so the timestep matters)
    x1 = [[0.3, -1.2], [2.0, 0.5]]
    x0 = [[-0.7, 0.4], [1.1, -2.2]]
    t = [0.25, 0.9]
    seen = {}

    def model(x, timestep, context):
        seen["timestep"] = timestep.clone()
        seen["context"] = context
        return 0.5 * x + (timestep / 1000.0)[:, None]

    loss = flow_matching_loss(model, torch.tensor(x1), "ctx", noise=torch.tensor(x0), t=torch.tensor(t))
    total = 0.0
    for b in range(2):
        sigma = 1.0 - t[b]
        for i in range(2):
            xt = t[b] * x1[b][i] + (1 - t[b]) * x0[b][i]          # report eq. (1)
            pred = 0.5 * xt + sigma                                  # model at timestep 1000 * sigma
            target = x0[b][i] - x1[b][i]                             # sampler velocity eps - data
            total += (pred - target) ** 2
    assert float(loss) == pytest.approx(total / 4, rel=1e-6)
    assert seen["context"] == "ctx"
    assert torch.allclose(seen["timestep"], torch.tensor([750.0, 100.0]))
    # the same number is the report's eq. (3) with u = -model: || u - (x1 - x0) ||^2
    report = 0.0
    for b in range(2):
        for i in range(2):
            xt = t[b] * x1[b][i] + (1 - t[b]) * x0[b][i]
            u = -(0.5 * xt + (1 - t[b]))
            report += (u - (x1[b][i] - x0[b][i])) ** 2
    assert float(loss) == pytest.approx(report / 4, rel=1e-6)



def test_weighted_loss_is_the_weighted_mean_of_the_squared_errors():
    g = torch.Generator().manual_seed(0)
    data, noise = torch.randn(2, 3, 2, 2, 2, generator=g), torch.randn(2, 3, 2, 2, 2, generator=g)
    t = torch.tensor([0.3, 0.8])
    weight = torch.rand(2, 1, 2, 2, 2, generator=g) * 4 + 0.5   # one weight per position, shared by the channels

    def model(x, timestep, context):
        return 0.7 * x - (timestep / 1000.0).view(-1, 1, 1, 1, 1)

    loss = flow_matching_loss(model, data, noise=noise, t=t, weight=weight)
    d, n, tt, w = data.double(), noise.double(), t.double().view(-1, 1, 1, 1, 1), weight.double()
    err2 = (0.7 * (tt * d + (1 - tt) * n) - (1 - tt) - (n - d)) ** 2
    ref = (w * err2).sum() / (w.expand_as(err2)).sum()                 # float64, written out
    assert float(loss) == pytest.approx(float(ref), rel=1e-5)
    plain = flow_matching_loss(model, data, noise=noise, t=t)
    assert float(flow_matching_loss(model, data, noise=noise, t=t, weight=torch.ones(2, 1, 2, 2, 2))) == \
        pytest.approx(float(plain), rel=1e-6)
    assert abs(float(loss) - float(plain)) > 1e-3                       # the weights changed the value
    with pytest.raises(ValueError, match=r"does not broadcast.*\[B, 1, F, H, W\]"):
        flow_matching_loss(model, data, noise=noise, t=t, weight=torch.ones(2, 1, 3, 2, 2))

def test_batch_matches_sampler_convention():
    g = torch.Generator().manual_seed(0)
    data, noise = torch.randn(3, 4, 2, generator=g), torch.randn(3, 4, 2, generator=g)
    t = torch.tensor([0.1, 0.5, 0.8])
    b = make_flow_matching_batch(data, noise, t)
    sigma = (1 - t)[:, None, None]
    assert torch.allclose(b.x_t, (1 - sigma) * data + sigma * noise)  # x_sigma, docs/wan_spec.md section 6.1
    assert torch.allclose(b.target, noise - data)                           # v = eps - x0
    assert torch.allclose(b.timestep, 1000 * (1 - t))
    assert torch.allclose(wan_t_to_sigma(t), 1 - t) and torch.allclose(sigma_to_wan_t(1 - t), t)
    with pytest.raises(ValueError, match="same shape"):
        make_flow_matching_batch(data, noise[:, :3], t)


def _logit_normal_moments(mean, std):
    z = np.linspace(-12, 12, 200001)
    w = np.exp(-0.5 * z ** 2) / math.sqrt(2 * math.pi)
    t = 1 / (1 + np.exp(-(mean + std * z)))
    m = np.trapezoid(t * w, z)
    return m, math.sqrt(np.trapezoid((t - m) ** 2 * w, z))


def test_logit_normal_matches_distribution():
    n, mean, std = 200_000, 0.4, 0.8
    t = sample_timesteps(n, mean=mean, std=std, generator=torch.Generator().manual_seed(1)).double()
    ref_m, ref_s = _logit_normal_moments(mean, std)
    assert abs(float(t.mean()) - ref_m) < 4 * ref_s / math.sqrt(n)
    assert float(t.std()) == pytest.approx(ref_s, rel=0.01)
    logit = torch.log(t / (1 - t))
    assert abs(float(logit.mean()) - mean) < 4 * std / math.sqrt(n)
    assert float(logit.std()) == pytest.approx(std, rel=0.01)
    # the same seed gives the same samples, a different seed others
    a = sample_timesteps(64, mean=mean, std=std, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, sample_timesteps(64, mean=mean, std=std, generator=torch.Generator().manual_seed(7)))
    assert not torch.equal(a, sample_timesteps(64, mean=mean, std=std, generator=torch.Generator().manual_seed(8)))


def test_shifted_timesteps_follow_the_shifted_cdf():
    n, mean, std, s = 50_000, -0.3, 1.2, 3.0
    t = np.sort(sample_timesteps(n, mean=mean, std=std, shift=s,
                                 generator=torch.Generator().manual_seed(2)).double().numpy())
    # t' = 1 - S(1 - t) with S(sigma) = s sigma / (1 + (s-1) sigma); S^-1(y) = y / (s - (s-1) y)
    y = 1 - t
    sigma_pre = y / (s - (s - 1) * y)
    t_pre = 1 - sigma_pre
    z = (np.log(t_pre / (1 - t_pre)) - mean) / std
    cdf = 0.5 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in z]))
    ks = np.max(np.maximum(np.arange(1, n + 1) / n - cdf, cdf - np.arange(n) / n))
    assert ks < 1.63 / math.sqrt(n)                        # Kolmogorov-Smirnov at the 1 % level
    assert float(shift_sigma(torch.tensor(0.5), s)) == pytest.approx(0.75)   # 3*0.5/(1+2*0.5)
    # shift > 1 means noisier inputs on average
    plain = sample_timesteps(n, mean=mean, std=std, generator=torch.Generator().manual_seed(2))
    assert float(torch.from_numpy(t).mean()) < float(plain.mean())


def _euler(velocity, x, steps):
    # docs/wan_spec.md section 6.1: x_next = x + (sigma_next - sigma) * v(x, 1000 * sigma), sigma 1 -> 0
    sig = torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float64)
    for i in range(steps):
        ts = torch.full((x.shape[0],), 1000 * float(sig[i]))
        x = x + float(sig[i + 1] - sig[i]) * velocity(x, ts, None)
    return x


def test_exact_velocity_field_has_zero_loss_and_samples_the_data():
    # for a single data point x*, the exact sampler-convention field is v(x, sigma) = (x - x*) / sigma
    x_star = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64)

    def exact(x, ts, ctx):
        return (x - x_star) / (ts.double() / 1000)[:, None]

    def flipped(x, ts, ctx):
        return -exact(x, ts, ctx)

    data = x_star.repeat(64, 1)
    g = torch.Generator().manual_seed(3)
    assert float(flow_matching_loss(exact, data, generator=g)) < 1e-10   # float32 timesteps
    assert float(flow_matching_loss(flipped, data, generator=g)) > 1.0
    out = _euler(exact, torch.randn(16, 3, dtype=torch.float64, generator=g), 10)
    assert torch.allclose(out, x_star.expand(16, 3), atol=1e-9)


class MLPVelocity(nn.Module):
    """v(x, timestep): an MLP on [x, sin/cos features of sigma = timestep / 1000]."""

    def __init__(self, dim, hidden=128):
        super().__init__()
        self.register_buffer("freq", torch.arange(1, 9, dtype=torch.float32))
        self.net = nn.Sequential(nn.Linear(dim + 16, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                 nn.Linear(hidden, dim))

    def forward(self, x, timestep, context=None):
        s = (timestep.float() / 1000.0)[:, None]
        emb = torch.cat([torch.sin(math.pi * s * self.freq), torch.cos(math.pi * s * self.freq)], -1)
        return self.net(torch.cat([x.float(), emb], -1))


@pytest.fixture(scope="module")
def two_point_model():
    torch.manual_seed(0)
    points = torch.tensor([[1.5, -0.75, 1.2, 0.45], [-1.5, 0.75, -1.2, -0.45]])
    model = MLPVelocity(4)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    steps = 1500
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=5e-4)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        data = points[torch.randint(2, (128,), generator=g)]
        loss = flow_matching_loss(model, data, generator=g)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return model.eval(), points


def test_trained_model_is_sampled_onto_the_data(two_point_model):
    model, points = two_point_model
    x = torch.randn(512, 4, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        out = _euler(model, x, 40)
    dist = torch.cdist(out, points)
    nearest = dist.min(1).values
    q50, q95 = float(nearest.quantile(0.5)), float(nearest.quantile(0.95))
    assert q50 < 0.15 and q95 < 0.35, (q50, q95)             # the points are 4.3 apart
    frac = float((dist.argmin(1) == 0).float().mean())
    assert 0.3 < frac < 0.7, frac                           # both modes, roughly balanced
    # the same model run with the opposite orientation (integrating towards sigma = 1) goes elsewhere
    with torch.no_grad():
        wrong = _euler(lambda xx, ts, c: -model(xx, ts, c), x, 40)
    assert float(torch.cdist(wrong, points).min(1).values.median()) > 1.0


def test_trained_model_with_project_sampler(two_point_model):
    sampling = pytest.importorskip("wan_core.sampling.loop")
    schedule_mod = pytest.importorskip("wan_core.sampling.schedule")
    model, points = two_point_model
    schedule = schedule_mod.build_schedule(steps=30, shift=3.0, convention="official")
    x = torch.randn(256, 4, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        out = sampling.sample(lambda xx, sigma, ts: model(xx, ts.float(), None), x, schedule, "unipc")
    nearest = torch.cdist(out, points).min(1).values
    assert float(nearest.median()) < 0.2, float(nearest.median())
