"""Wan 2.2: the A14B two-expert (mixture-of-experts) model, expert switching inside one sampler run, and the
TI2V-5B latent geometry (48 channels, 4 x 16 x 16 compression). docs/wan22.md sections 1, 4 and 5.

``WanMoE(high, low, boundary)`` is called like one DiT: ``moe(x, t, context)`` runs the high-noise expert for
timesteps ``t >= boundary * 1000`` and the low-noise one below (Wan2.2 wan/text2video.py lines 186-191 and
306, 342-344; diffusers' ``WanPipeline`` with ``transformer_2`` + ``boundary_ratio`` does the same). Inside
``WanPipeline.sample_latents`` each expert gets its own guidance scale and its own diffusion-cache session
(``MoEGuidance``), so nothing a cache learnt from one expert is reused by the other.
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.nn as nn

from .sampling import ClassifierFreeGuidance

from .wan22_settings import I2V_A14B, NUM_TRAIN_TIMESTEPS, T2V_A14B, TI2V_5B  # noqa: F401 (re-exported)

EXPERTS = ("high", "low")


def is_moe(model) -> bool:
    return isinstance(model, WanMoE)


def _describe(model) -> str:
    source = str(getattr(model, "source", "") or "")
    return source.rsplit("/", 1)[-1] if source and not source.startswith("<") else type(model).__name__


class WanMoE(nn.Module):
    """Two experts of one architecture: ``high_noise`` for ``t >= boundary * 1000``, ``low_noise`` below.

    ``guidance``: ``(high, low)`` classifier-free guidance scales, or None for the sampler's one for both.
    ``offload_device``: when set (e.g. "cpu" while sampling on a GPU that cannot hold both experts), the
    inactive expert is moved there at the switch and only the active one stays on the compute device.
    """

    def __init__(self, high: nn.Module, low: nn.Module, boundary: float = T2V_A14B["boundary"],
                 guidance: tuple[float, float] | None = None, offload_device: torch.device | str | None = None):
        super().__init__()
        check_experts(high, low)
        if not 0.0 < float(boundary) < 1.0:
            raise ValueError(f"boundary={boundary!r}: must lie between 0 and 1 (a fraction of the 1000 training "
                             f"timesteps; T2V-A14B 0.875, I2V-A14B 0.9)")
        if guidance is not None and not all(0 <= float(g) < float("inf") for g in guidance):
            raise ValueError(f"guidance={guidance!r}: per-expert guidance scales must be finite numbers >= 0")
        self.high_noise = high
        self.low_noise = low
        self.boundary = float(boundary)
        self.guidance = None if guidance is None else (float(guidance[0]), float(guidance[1]))
        self.offload_device = offload_device
        self.source = f"{getattr(high, 'source', '<model>')} + {getattr(low, 'source', '<model>')}"

    @property
    def config(self):
        return self.high_noise.config

    @property
    def dtype(self) -> torch.dtype:
        return cast(torch.dtype, self.high_noise.dtype)

    @property
    def device(self) -> torch.device:
        return cast(torch.device, self.high_noise.device)

    @property
    def boundary_timestep(self) -> float:
        return self.boundary * NUM_TRAIN_TIMESTEPS

    def expert_name(self, t: float) -> str:
        """"high" when ``t >= boundary * 1000`` (official comparison, text2video.py line 186), else "low"."""
        return "high" if float(t) >= self.boundary_timestep else "low"

    def expert(self, name: str) -> nn.Module:
        return self.high_noise if name == "high" else self.low_noise

    def guidance_for(self, name: str, default: float) -> float:
        return default if self.guidance is None else self.guidance[EXPERTS.index(name)]

    def activate(self, name: str, device: torch.device | str | None = None) -> nn.Module:
        """Make expert ``name`` ready on ``device`` (default: where the other one is) and, with
        ``offload_device``, move the other one there. Returns the expert."""
        from .memory.offload import move  # a block-swapped expert moves its resident parts only

        active, other = self.expert(name), self.expert("low" if name == "high" else "high")
        target = torch.device(device) if device is not None else cast(torch.device, other.device)
        if self.offload_device is not None:
            move(other, self.offload_device)
        if getattr(active, "device", target) != target:
            move(active, target)
        return active

    def forward(self, x: torch.Tensor, t, context, **kwargs) -> torch.Tensor:
        """``x [B, C, F, H, W]``, ``t`` scalar, ``[B]`` or ``[B, L]``: the expert of the largest timestep."""
        t_max = float(torch.as_tensor(t).max())
        return self.expert(self.expert_name(t_max))(x, t, context, **kwargs)


def check_experts(high: nn.Module, low: nn.Module) -> None:
    """Both experts must take the same latents and text: one-line ``ValueError`` naming both otherwise."""
    a, b = getattr(high, "config", None), getattr(low, "config", None)
    if a is None or b is None:
        return
    for field, what in (("in_dim", "latent channels in"), ("out_dim", "latent channels out"),
                        ("text_dim", "text width"), ("patch_size", "patch size")):
        va, vb = getattr(a, field, None), getattr(b, field, None)
        if va != vb:
            raise ValueError(f"the high-noise expert {_describe(high)} and the low-noise expert {_describe(low)} "
                             f"differ in {what} ({va} vs {vb}); use the two experts of one Wan 2.2 A14B model")


class MoEGuidance:
    """Velocity function for a ``WanMoE``: one ``ClassifierFreeGuidance`` per expert, each with its own
    guidance scale and cache session; the expert of each step is fixed from the schedule's timesteps before
    the step runs (``begin_step``), and the switch is recorded in ``switch_step``."""

    def __init__(self, moe: WanMoE, guides: dict[str, ClassifierFreeGuidance], timesteps: Sequence[float],
                 device: torch.device | str | None = None):
        self.moe, self.guides, self.timesteps = moe, guides, [float(t) for t in timesteps]
        self.device = device
        self.active: str | None = None
        self.switch_step: int | None = None  # first step run by the low-noise expert
        self.steps: list[str] = []  # expert name per step

    def begin_step(self, step: int, num_steps: int, sigma: float) -> None:
        name = self.moe.expert_name(self.timesteps[step])
        if name != self.active:
            if self.active is not None and self.switch_step is None:
                self.switch_step = step
            self.moe.activate(name, self.device)
            self.active = name
        self.steps.append(name)
        self.guides[name].begin_step(step, num_steps, sigma)

    def __call__(self, x: torch.Tensor, sigma: float, timestep: torch.Tensor) -> torch.Tensor:
        name = self.active or self.moe.expert_name(float(timestep.max()))
        return self.guides[name](x, sigma, timestep)


class MoECacheReport:
    """The two experts' cache reports as one (``text()`` as ``CacheReport.text``)."""

    def __init__(self, reports: dict[str, Any]):
        self.reports = reports

    def text(self) -> str:
        return "; ".join(f"{name}-noise expert: {r.text()}" for name, r in self.reports.items())

    def line(self) -> str:
        return "; ".join(f"{name}-noise expert: {r.line()}" for name, r in self.reports.items())


@contextlib.contextmanager
def attached(sessions: dict[str, Any], moe: WanMoE):
    """Each expert's cache session attached to that expert for the run."""
    with contextlib.ExitStack() as stack:
        for name, session in sessions.items():
            stack.enter_context(session.attached(moe.expert(name)))
        yield


# ---------------------------------------------------------------------------------------------- latent geometry
def latent_geometry(dit=None, vae=None) -> tuple[int, int, int]:
    """(channels, temporal factor, spatial factor) of the latents a DiT / VAE works on: Wan 2.1 and the A14B
    experts (16, 4, 8); TI2V-5B and the Wan 2.2 VAE (48, 4, 16)."""
    vae_cfg = getattr(vae, "config", None)
    if vae_cfg is not None and hasattr(vae_cfg, "z_dim"):
        return int(vae_cfg.z_dim), int(vae_cfg.temporal_factor), int(vae_cfg.spatial_factor)
    cfg = getattr(dit, "config", None)
    channels = int(getattr(cfg, "out_dim", 16)) if cfg is not None else 16
    return channels, 4, 16 if channels == 48 else 8


def pixel_multiple(dit=None, vae=None) -> int:
    """Width/height multiple: the VAE's spatial factor times the DiT's 2x2 patch (16 for Wan 2.1, 32 for 5B)."""
    return 2 * latent_geometry(dit, vae)[2]


# ---------------------------------------------------------------------------------- TI2V-5B first-frame conditioning
def first_frame_timesteps(timestep: torch.Tensor, grid: tuple[int, int, int]) -> torch.Tensor:
    """Per-token timesteps ``[B, L]`` for a first-frame-conditioned latent: 0 on the tokens of latent frame 0,
    the step's ``timestep [B]`` elsewhere, tokens in (f, h, w) order (Wan2.2 wan/textimage2video.py lines
    573-578, ``mask2[0][0][:, ::2, ::2] * timestep``; any batch size, where the official code takes one)."""
    f, h, w = grid
    mask = torch.ones(f, h * w, dtype=torch.float32, device=timestep.device)
    mask[0] = 0
    return (mask.flatten()[None] * timestep.to(torch.float32)[:, None]).to(timestep.dtype)


class FirstFrameGuidance:
    """Wraps a velocity function for TI2V-5B image-to-video: the model always sees latent frame 0 replaced by the
    image's normalised latent ``z0 [1 or B, C, 1, h, w]`` at timestep 0 on its tokens (docs/wan22.md section 2);
    the solver's own frame 0 is discarded and replaced at the end (``finish``), as the official code and
    diffusers' ``expand_timesteps`` path do after every step."""

    def __init__(self, inner, z0: torch.Tensor, patch_size: tuple[int, int, int]):
        self.inner, self.z0, self.patch = inner, z0, patch_size

    def begin_step(self, step: int, num_steps: int, sigma: float) -> None:
        if hasattr(self.inner, "begin_step"):
            self.inner.begin_step(step, num_steps, sigma)

    def conditioned(self, x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        x[:, :, :1] = self.z0.to(x)
        return x

    def __call__(self, x: torch.Tensor, sigma: float, timestep: torch.Tensor) -> torch.Tensor:
        grid = tuple(s // p for s, p in zip(x.shape[2:], self.patch))
        t = first_frame_timesteps(timestep, grid)  # type: ignore[arg-type]
        return self.inner(self.conditioned(x), sigma, t)

    @property
    def steps(self) -> list[str]:
        return list(getattr(self.inner, "steps", []))


def check_first_frame(z: torch.Tensor, shape: tuple[int, ...], name: str) -> None:
    """The first-frame latent must be ``[1 or B, C, 1, h, w]`` of the video's latent size (one line otherwise)."""
    b, c, _, h, w = shape
    if z.dim() != 5 or z.shape[1] != c or z.shape[2] != 1 or tuple(z.shape[3:]) != (h, w) or z.shape[0] not in (1, b):
        raise ValueError(f"{name}: the start image's latent has shape {list(z.shape)}, expected [1, {c}, 1, {h}, {w}] "
                         f"(encode the image at the video's width and height)")
