"""Flow-matching training objective and logit-normal timestep sampling.

Implements the Wan report's objective (its section 4.2.2, eqs. 1-3; docs/algorithms.md section 7) in the orientation our
sampler uses (docs/wan_spec.md section 6.1).

Two conventions, one process (stated once, here):

* Wan report:  x_t = t * x1 + (1 - t) * x0,   x1 = data latent, x0 = noise,   v_t = dx_t/dt = x1 - x0.
* Sampler:     x_sigma = (1 - sigma) * data + sigma * eps,   v = eps - data,   DiT timestep = 1000 * sigma.

They are the same interpolation under ``sigma = 1 - t`` (so ``x_t == x_sigma`` with ``eps = x0``), and the
velocities differ only in sign: ``v_sampler = dx/dsigma = -(x1 - x0) = x0 - x1``.

Training target. The DiT is *sampled* with the sampler's convention (Euler from sigma = 1 to 0 with
``x_next = x + (sigma_next - sigma) * dit(x, 1000 * sigma, ctx)``), so it must be *trained* to predict the
sampler's velocity ``noise - data`` at timestep ``1000 * sigma``. The loss value is exactly the report's
eq. (3), ``|| u - (x1 - x0) ||^2`` averaged over elements, with ``u = -dit(x_t, 1000 * (1 - t), ctx)``;
training with ``+dit`` against ``x1 - x0`` would teach a model that the sampler integrates backwards.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

import torch

NUM_TRAIN_TIMESTEPS = 1000  # the DiT's timestep scale: timestep = 1000 * sigma (docs/wan_spec.md section 6.1)

VelocityModel = Callable[..., torch.Tensor]  # (x [B,C,F,H,W], timestep [B] on 0..1000, context) -> v


def wan_t_to_sigma(t: torch.Tensor) -> torch.Tensor:
    """Report time ``t`` (1 = data) -> sampler noise level ``sigma = 1 - t`` (1 = pure noise)."""
    return 1.0 - t


def sigma_to_wan_t(sigma: torch.Tensor) -> torch.Tensor:
    """Sampler noise level ``sigma`` -> report time ``t = 1 - sigma``."""
    return 1.0 - sigma


def shift_sigma(sigma: torch.Tensor, shift: float) -> torch.Tensor:
    """The sampler's time-SNR shift ``sigma' = s*sigma / (1 + (s - 1)*sigma)`` (docs/wan_spec.md section 6.1).

    ``shift > 1`` moves mass towards noisier inputs; ``shift = 1`` is the identity.
    """
    if shift <= 0:
        raise ValueError(f"shift must be > 0, got {shift}")
    if shift == 1.0:
        return sigma
    return shift * sigma / (1.0 + (shift - 1.0) * sigma)


def sample_timesteps(
    n: int,
    *,
    mean: float = 0.0,
    std: float = 1.0,
    shift: float = 1.0,
    generator: Optional[torch.Generator] = None,
    device: Union[str, torch.device, None] = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Logit-normal timesteps in the report's convention, optionally shifted.

    ``logit(t) ~ N(mean, std**2)``, i.e. ``t = sigmoid(mean + std * z)``, with ``t = 1`` the data end, so
    ``mean < 0`` favours noisy inputs. If ``shift != 1`` the sampler's shift is then applied to the noise
    level: ``sigma = shift_sigma(1 - t, shift)``, ``t = 1 - sigma``. Values are clamped to
    ``[eps, 1 - eps]`` to keep the sampler's ``1000 * sigma`` away from the exact end points.

    Returns a float32 tensor ``[n]`` on ``device`` (drawn on the CPU from ``generator`` for reproducibility).
    """
    if std <= 0:
        raise ValueError(f"std must be > 0, got {std}")
    z = torch.randn(n, generator=generator, dtype=torch.float64)
    t = torch.sigmoid(mean + std * z)
    if shift != 1.0:
        t = 1.0 - shift_sigma(1.0 - t, shift)
    t = t.clamp(eps, 1.0 - eps).to(torch.float32)
    return t.to(device) if device is not None else t


@dataclass
class FlowMatchingBatch:
    """Everything one flow-matching step feeds the model.

    ``x_t``: [B, C, ...] noisy input (= x_sigma); ``t``: [B] report time; ``sigma``: [B] = 1 - t;
    ``timestep``: [B] = 1000 * sigma (what the DiT receives); ``target``: [B, C, ...] = noise - data
    (the sampler's velocity, = -(x1 - x0) in the report's notation).
    """

    x_t: torch.Tensor
    t: torch.Tensor
    sigma: torch.Tensor
    timestep: torch.Tensor
    target: torch.Tensor


def _bcast(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return v.reshape(v.shape[0], *([1] * (like.dim() - 1))).to(like.dtype)


def make_flow_matching_batch(data: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> FlowMatchingBatch:
    """Build the model input and target from data latents, noise and report times.

    data, noise: [B, C, ...] (same shape); t: [B] in [0, 1] (report time, 1 = data).
    ``x_t = t*data + (1-t)*noise`` (eq. 1), target ``noise - data`` (sampler velocity, see module doc).
    """
    if data.shape != noise.shape:
        raise ValueError(f"data {tuple(data.shape)} and noise {tuple(noise.shape)} must have the same shape")
    if t.dim() != 1 or t.shape[0] != data.shape[0]:
        raise ValueError(f"t must be [B] with B = {data.shape[0]}, got {tuple(t.shape)}")
    tb = _bcast(t, data)
    x_t = tb * data + (1.0 - tb) * noise
    sigma = wan_t_to_sigma(t)
    return FlowMatchingBatch(
        x_t=x_t, t=t, sigma=sigma, timestep=NUM_TRAIN_TIMESTEPS * sigma, target=noise - data
    )


def flow_matching_loss(
    model: VelocityModel,
    data: torch.Tensor,
    context=None,
    *,
    noise: Optional[torch.Tensor] = None,
    t: Optional[torch.Tensor] = None,
    mean: float = 0.0,
    std: float = 1.0,
    shift: float = 1.0,
    generator: Optional[torch.Generator] = None,
    return_batch: bool = False,
    weight: Optional[torch.Tensor] = None,
):
    """Flow-matching MSE for a velocity model ``model(x [B,C,F,H,W], timestep [B] on 0..1000, context)``.

    data: [B, C, ...] clean latents (the report's x1). noise: same shape, default N(0, I) drawn from
    ``generator`` on the CPU. t: [B] report times, default ``sample_timesteps(B, mean, std, shift)``.
    Returns the scalar loss (float32, or float64 for float64 inputs)
    ``mean((model(x_t, 1000*(1-t), context) - (noise - data))**2)``
    (equal to the report's ``||u - (x1 - x0)||^2`` with ``u = -model``), and the
    :class:`FlowMatchingBatch` too if ``return_batch``.

    weight: optional per-element weights broadcastable to ``data`` (e.g. ``[B, 1, F, H, W]``); the loss is then
    the weighted mean ``sum(w * err**2) / sum(w)`` over the broadcast shape. Weights that depend on the clip
    (more weight where its objects are) tilt the learned velocity towards those regions: the minimiser becomes
    ``E[w v | x_t] / E[w | x_t]`` rather than ``E[v | x_t]``; a way to make small objects count, not an unbiased
    objective.
    """
    if weight is not None:  # before the model runs: a wrong shape costs no forward pass
        try:
            ok = torch.broadcast_shapes(tuple(weight.shape), tuple(data.shape)) == tuple(data.shape)
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(f"loss weight of shape {tuple(weight.shape)} does not broadcast to the latents' "
                             f"{tuple(data.shape)}; expected e.g. [B, 1, F, H, W]")
    if noise is None:
        noise = torch.randn(data.shape, generator=generator, dtype=torch.float32).to(data.device, data.dtype)
    if t is None:
        t = sample_timesteps(data.shape[0], mean=mean, std=std, shift=shift, generator=generator)
    t = t.to(data.device)
    batch = make_flow_matching_batch(data, noise, t)
    pred = model(batch.x_t, batch.timestep, context)
    if pred.shape != batch.target.shape:
        raise ValueError(
            f"model returned {tuple(pred.shape)}, expected the input's shape {tuple(batch.target.shape)}"
        )
    dtype = torch.promote_types(torch.promote_types(pred.dtype, batch.target.dtype), torch.float32)
    err2 = (pred.to(dtype) - batch.target.to(dtype)) ** 2
    if weight is None:
        loss = torch.mean(err2)
    else:
        w = torch.broadcast_to(weight.to(err2.device, dtype), err2.shape)
        loss = torch.sum(w * err2) / torch.sum(w).clamp_min(torch.finfo(dtype).tiny)
    return (loss, batch) if return_batch else loss

