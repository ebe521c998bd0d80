"""Adaptive gradient clipping, v1.5 rule (docs/algorithms.md section 1.7), on one process (2 processes:
test_distributed.py).

References: the rule's arithmetic written out by hand / as a float64 loop here, float64 norms.
"""
import math
import os

import pytest
import torch

from wan_core.train.grad_clip import (AdaptiveGradClipper, GradientSpikeError, global_grad_norm,
                                      read_spike_marker)


def _param_with_grad_norm(norm, n=6, seed=0):
    g = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    p = torch.nn.Parameter(torch.zeros(n))
    p.grad = (g / g.norm() * norm).float()
    return p


def test_statistics_match_hand_computation():
    c = AdaptiveGradClipper()
    r = c.update(0.5)
    assert r.status == "init" and c.mean == 1.0 and c.var == 0.0          # min(3 * 0.5, 1.0)
    r = c.update(0.4)                                                      # tau = 1.0 -> normal
    assert r.status == "normal" and r.threshold == 1.0
    assert c.mean == pytest.approx(0.99 * 1.0 + 0.01 * 0.4, abs=1e-15)                 # 0.994
    assert c.var == pytest.approx(0.01 * (0.994 - 0.4) ** 2, abs=1e-15)                 # 0.00352836
    r = c.update(0.3)
    tau = 0.994 + 3 * math.sqrt(0.00352836)
    assert r.threshold == pytest.approx(tau, rel=1e-12)
    mean3 = 0.99 * 0.994 + 0.01 * 0.3
    assert c.mean == pytest.approx(mean3, rel=1e-12)
    assert c.var == pytest.approx(0.99 * 0.00352836 + 0.01 * (mean3 - 0.3) ** 2, rel=1e-12)

    # a long sequence against a float64 loop of the rule
    norms = [0.2 + 0.05 * math.sin(k) for k in range(200)]
    c = AdaptiveGradClipper()
    mean, var = -1e6, 0.0
    for g in norms:
        c.update(g)
        if mean < 0:
            mean, var = min(3 * g, 1.0), 0.0
        elif g <= mean + 3 * math.sqrt(var):
            mean = 0.99 * mean + 0.01 * g
            var = 0.99 * var + 0.01 * (mean - g) ** 2
    assert c.mean == pytest.approx(mean, rel=1e-12) and c.var == pytest.approx(var, rel=1e-12)


def test_spike_is_clipped_to_mean_plus_3_std_and_leaves_the_ema():
    c = AdaptiveGradClipper()
    for k in range(300):                                  # settle on norms around 0.3
        c.clip_([_param_with_grad_norm(0.3 + 0.02 * math.cos(0.7 * k), seed=k)], step=k)
    mean, var = c.mean, c.var
    tau = mean + 3 * math.sqrt(var)
    assert 0.3 < tau < 1.0
    p = _param_with_grad_norm(2.0, seed=999)             # tau < 2.0 <= max(mean + 5 std, 5.0)
    direction = p.grad / p.grad.norm()
    r = c.clip_([p], step=300)
    assert r.clipped and r.threshold == pytest.approx(tau, rel=1e-12)
    assert float(p.grad.double().norm()) == pytest.approx(tau, rel=1e-5)
    assert torch.allclose(p.grad / p.grad.norm(), direction, atol=1e-6)
    assert (c.mean, c.var) == (mean, var)                 # spikes do not update the statistics
    assert c.num_clipped == 1
    q = _param_with_grad_norm(0.95 * tau, seed=5)        # just below: untouched, statistics move
    before = q.grad.clone()
    assert c.clip_([q], step=301).status == "normal"
    assert torch.equal(q.grad, before) and c.mean != mean


def test_first_steps_follow_the_reference_cap():
    c = AdaptiveGradClipper()
    p = _param_with_grad_norm(3.0)
    before = p.grad.clone()
    assert c.clip_([p]).status == "init" and torch.equal(p.grad, before) and c.mean == 1.0
    p = _param_with_grad_norm(3.0)
    r = c.clip_([p])                                      # tau = 1.0 (var 0): clipped to norm 1
    assert r.clipped and float(p.grad.norm()) == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 6.0])
def test_nan_or_extreme_spike_stops_with_marker(tmp_path, bad):
    marker = tmp_path / "ckpt" / "spike_marker.json"
    c = AdaptiveGradClipper(marker_path=marker)
    for k in range(20):
        c.clip_([_param_with_grad_norm(0.3, seed=k)], step=k)
    state = c.state_dict()
    p = torch.nn.Parameter(torch.zeros(4))
    p.grad = torch.tensor([bad, 0.0, 0.0, 0.0])
    before = p.grad.clone()
    with pytest.raises(GradientSpikeError, match="step 20") as info:
        c.clip_([p], step=20)
    err = info.value
    assert err.step == 20 and err.marker_path == os.fspath(marker)
    assert "resume" in str(err)
    assert c.state_dict() == state                        # nothing learned from the bad step
    assert torch.equal(p.grad, before) or math.isnan(bad)  # not clipped
    m = read_spike_marker(marker)
    assert m["step"] == 20 and m["resume_data_step"] == 21
    if bad == 6.0:                                        # extreme: above max(mean + 5 std, 5.0)
        assert err.threshold == pytest.approx(5.0)


def test_global_norm_matches_float64():
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.zeros(s)) for s in [(3, 4), (7,), (2, 2, 2)]]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(torch.bfloat16).float()
    params.append(torch.nn.Parameter(torch.zeros(2)))      # no grad: ignored
    ref = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params[:3]))
    assert float(global_grad_norm(params)) == pytest.approx(ref, rel=1e-6)
    model = torch.nn.Linear(3, 2)
    model.weight.grad = torch.ones(2, 3)
    model.bias.grad = torch.ones(2)
    assert float(global_grad_norm(model)) == pytest.approx(math.sqrt(8), rel=1e-6)
    with pytest.raises(RuntimeError, match="torch.distributed"):
        global_grad_norm(params, sharded=True)
