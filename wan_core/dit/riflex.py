"""RIFLEx: the temporal RoPE change that lets a video DiT generate past its training length without repeating.

Zhao et al. 2025, "RIFLEx: a free lunch for length extrapolation in video diffusion transformers". A video DiT
repeats its content after the period of one temporal RoPE frequency, the *intrinsic* component k. RIFLEx lowers
that one frequency so that a single period covers the generated length: the k-th (1-based) temporal frequency
``theta^(-2(k-1)/d)`` becomes ``0.9 * 2*pi / L`` with L the latent frames generated (0.9 keeps the video inside
90 % of a period, the authors' margin). Nothing else changes. docs/long_video.md.

This module holds the setting (:class:`RIFLEx`), the paper's rule to identify k (:func:`identify_k`), the
resolution of a user setting ``"off" | "auto" | k`` for a model (:func:`resolve_riflex`) and the switch the
pipeline uses (:func:`use_riflex`); ``rope.rope_angles`` applies it.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch.nn as nn

from ..config import DiTConfig
from ..demo.model import DEMO_DIT
from ..variants import VARIANTS, Variant
from ..vae.config import PRESETS as VAE_PRESETS
from .moe import experts
from .runtime import runtime_of, update_runtime

MARGIN = 0.9  # the authors' factor: one period = L / 0.9 (riflex_utils.py; the paper's section 4)
UNKNOWN_TRAIN_LATENT_FRAMES = 21  # a model of unknown variant: Wan's 81 training frames (21 latent)


@dataclass(frozen=True)
class RIFLEx:
    """Lower temporal RoPE frequency ``k`` (1-based) to ``0.9 * 2*pi / length``; ``length``: latent frames of the
    generated video (of one window under context windows)."""

    k: int
    length: int

    def __post_init__(self):
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"RIFLEx k={self.k!r}: must be an integer >= 1 (a temporal RoPE frequency, 1-based)")
        if isinstance(self.length, bool) or not isinstance(self.length, int) or self.length < 1:
            raise ValueError(f"RIFLEx length={self.length!r}: must be an integer >= 1 latent frame")

    @property
    def frequency(self) -> float:
        """The new frequency (radians per latent frame) of component k."""
        return MARGIN * 2 * math.pi / self.length

    def check(self, temporal_dim: int) -> None:
        """One-line ValueError when k is outside the temporal RoPE's ``1..temporal_dim/2``."""
        check_k(self.k, temporal_dim)


def check_k(k: int, temporal_dim: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= temporal_dim // 2:
        raise ValueError(f"RIFLEx k={k!r} is outside the temporal RoPE's range 1..{temporal_dim // 2}")


def periods(theta: float, dim: int) -> list[int]:
    """Period ``round(2*pi / theta_j)`` in frames of each frequency ``theta_j = theta^(-2(j-1)/dim)``, j = 1..dim/2
    (the paper's Eq. 4)."""
    return [round(2 * math.pi * theta ** (2 * (j - 1) / dim)) for j in range(1, dim // 2 + 1)]


def identify_k(theta: float, dim: int, n: int) -> int:
    """The paper's identification rule (Eq. 7): the 1-based k whose period is closest to ``n``, the first
    repetition frame in latent frames (the first of equally close ones)."""
    diffs = [abs(p - n) for p in periods(theta, dim)]
    return diffs.index(min(diffs)) + 1


def _shape(c: DiTConfig) -> tuple:
    return c.dim, c.num_heads, c.num_layers, c.out_dim, c.rope_theta


def variant_of(config: DiTConfig) -> Variant | None:
    """The variants-table row with RIFLEx facts whose DiT has ``config``'s shape (width, heads, blocks, output
    channels, RoPE base); None for a model of unknown variant. The Wan 14B rows share one shape and one k."""
    for v in VARIANTS.values():
        row = DEMO_DIT if v.name == "wancore-demo" else v.config
        if v.riflex is not None and row is not None and _shape(row) == _shape(config):
            return v
    return None


def auto_k(config: DiTConfig) -> tuple[int, int]:
    """``(k, training latent frames)`` for ``config``: the table's k and the row's frames, or for an unknown
    model the paper's rule with N = 21 latent frames."""
    v = variant_of(config)
    if v is None or v.riflex is None:
        n = UNKNOWN_TRAIN_LATENT_FRAMES
        return identify_k(config.rope_theta, config.rope_dims[0], n), n
    return v.riflex.k, VAE_PRESETS[v.vae].latent_frames(v.sampling.frames)


def parse_setting(value: str | int) -> str | int:
    """``"off"``, ``"auto"`` or an integer k (``"6"`` accepted) -> the setting; one-line ValueError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("off", "auto"):
        return text
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"RIFLEx setting {value!r}: expected auto, off or an integer k") from None


def resolve_riflex(setting: str | int, config: DiTConfig, length: int) -> RIFLEx | None:
    """The RIFLEx for a run of ``length`` latent frames of a model with ``config``, or None (nothing changes).

    ``off``: None. ``auto``: the model's k (:func:`auto_k`) when ``length`` exceeds its training length, else
    None (at or below the training length the model needs no extrapolation, and the output stays as today).
    An integer k: always applied, refused (one line) outside ``1..d_t/2``."""
    chosen = parse_setting(setting)
    if chosen == "off":
        return None
    if isinstance(chosen, str):  # auto
        k, trained = auto_k(config)
        return RIFLEx(k, length) if length > trained else None
    check_k(chosen, config.rope_dims[0])
    return RIFLEx(chosen, length)


def _dits(model: nn.Module) -> list[nn.Module]:
    """The DiTs whose forward reads the setting: a Wan 2.2 two-expert model's experts, else the model itself."""
    return [dit for _, dit in experts(model)]


def set_riflex(model: nn.Module, riflex: RIFLEx | None) -> None:
    """Attach ``riflex`` to ``model`` (a ``WanDiT`` or two-expert ``WanMoE``) until changed; None = off."""
    for dit in _dits(model):
        if riflex is not None:
            config: DiTConfig = dit.config  # type: ignore[assignment]  # a WanDiT's
            riflex.check(config.rope_dims[0])
        update_runtime(dit, riflex=riflex)


@contextmanager
def use_riflex(model: nn.Module, riflex: RIFLEx | None) -> Iterator[None]:
    """Run ``model`` with ``riflex`` inside the block; each DiT gets its previous setting back afterwards."""
    before = [(dit, runtime_of(dit).riflex) for dit in _dits(model)]
    set_riflex(model, riflex)
    try:
        yield
    finally:
        for dit, previous in before:
            update_runtime(dit, riflex=previous)
