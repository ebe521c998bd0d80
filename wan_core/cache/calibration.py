"""Calibration of the step-skipping caches for any model: MagCache's magnitude ratios and TeaCache's polynomial.

One uncached sampling run (cache method ``calibrate``) records, per CFG branch and step, on the residual of the
block stack ``R_i`` (its output minus its input):

* MagCache (docs/algorithms.md section 4.3): ``gamma_i = mean over tokens of |R_i|_2 / |R_{i-1}|_2`` (norm
  over channels), 1.0 for the first step, as ``magcache_calibration`` in MagCache4Wan2.1 does;
* TeaCache (4.2): pairs (relative L1 change of the indicator ``e`` / ``e0``, relative L1 change of ``R``) between
  consecutive steps, fitted with a degree-4 polynomial (``numpy.polyfit``; TeaCache fits its published
  coefficients the same way, on the model output).

A ``Calibration`` carries the model it was measured on, so a table is never applied to another model, and
round-trips through JSON (the text the ComfyUI node takes). MagCache's published format, a flat list of
``2 * steps`` ratios with cond and uncond interleaved, is accepted too.
"""
from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field

import torch

from ..config import DIT_PRESETS, DiTConfig
from ..estimate import MAX_STEPS
from .published import MAGCACHE_RATIOS, MAGCACHE_STEPS, MODEL_1_3B, MODEL_14B

__all__ = ["FORMAT", "Calibration", "Calibrator", "ModelSignature", "published_model", "relative_l1"]

FORMAT = "wancore.cache.calibration/1"
_SIGNATURE_FIELDS = ("dim", "ffn_dim", "num_layers", "num_heads")


@dataclass(frozen=True)
class ModelSignature:
    """What a calibration is valid for: the DiT's widths and depth (and its preset name, for messages)."""

    name: str
    dim: int
    ffn_dim: int
    num_layers: int
    num_heads: int

    @classmethod
    def of(cls, config: DiTConfig) -> ModelSignature:
        return cls(published_model(config) or config.name, config.dim, config.ffn_dim, config.num_layers,
                   config.num_heads)

    def same_model(self, other: ModelSignature) -> bool:
        return all(getattr(self, f) == getattr(other, f) for f in _SIGNATURE_FIELDS)

    def describe(self) -> str:
        return f"{self.name} (dim {self.dim}, {self.num_layers} blocks)"


def published_model(config: DiTConfig | None) -> str | None:
    """``"wan2.1-t2v-1.3b"`` / ``"wan2.1-t2v-14b"`` when ``config`` has a released T2V model's shapes, else None."""
    if config is None:
        return None
    for name in (MODEL_1_3B, MODEL_14B):
        ref = DIT_PRESETS[name]
        if all(getattr(config, f) == getattr(ref, f) for f in _SIGNATURE_FIELDS + ("in_dim", "out_dim")):
            return name
    return None


def relative_l1(current: torch.Tensor, previous: torch.Tensor) -> float:
    """``mean|current - previous| / mean|previous|`` as a Python float (TeaCache's and EasyCache's measure)."""
    return ((current - previous).abs().mean() / previous.abs().mean()).item()


@dataclass(frozen=True)
class Calibration:
    """Ratios and coefficients measured on one model.

    ``mag_cond`` / ``mag_uncond``: MagCache ratio per step (first = 1.0 padding); ``mag_uncond`` is empty when
    the run had no unconditional branch. ``teacache``: mode ("e" | "e0") -> polynomial coefficients, highest
    degree first. ``model`` None: a bare published-format list whose model is unknown (used as given)."""

    model: ModelSignature | None
    steps: int
    mag_cond: tuple[float, ...]
    mag_uncond: tuple[float, ...] = ()
    teacache: dict[str, tuple[float, ...]] = field(default_factory=dict)

    @classmethod
    def published(cls, model: str) -> Calibration:
        """MagCache's published table for ``model`` (``published_model`` name)."""
        ratios = MAGCACHE_RATIOS[model]
        return cls(ModelSignature.of(DIT_PRESETS[model]), MAGCACHE_STEPS, tuple(ratios[0::2]), tuple(ratios[1::2]))

    @classmethod
    def from_interleaved(cls, ratios, model: ModelSignature | None = None) -> Calibration:
        """MagCache's published layout: ``2 * steps`` ratios, cond and uncond interleaved (cond first)."""
        values = _floats(ratios, "MagCache ratio table")
        if len(values) % 2 or len(values) < 4:
            raise ValueError(f"MagCache ratio table: {len(values)} values; expected 2 x steps (cond and uncond "
                             f"interleaved, at least 4), e.g. 100 for the published 50-step tables")
        return cls(model, len(values) // 2, tuple(values[0::2]), tuple(values[1::2]))

    # ---------------------------------------------------------------- JSON
    def to_json(self) -> str:
        data = {"format": FORMAT,
                "model": None if self.model is None else self.model.__dict__,
                "steps": self.steps,
                "mag_ratios": {"cond": list(self.mag_cond), "uncond": list(self.mag_uncond)},
                "teacache": {k: list(v) for k, v in self.teacache.items()}}
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        """Parse a calibration (``to_json``) or a published-format list of ratios; one-line errors otherwise."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"cache calibration: not JSON ({e.msg} at character {e.pos}); paste the text a "
                             f"'calibrate' run reports, or MagCache's list of 2 x steps ratios") from None
        except RecursionError:
            raise ValueError("cache calibration: JSON nested too deeply; paste the text a 'calibrate' run "
                             "reports, or MagCache's list of 2 x steps ratios") from None
        if isinstance(data, list):
            return cls.from_interleaved(data)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"cache calibration: expected an object with \"format\": \"{FORMAT}\" (the text a "
                             f"'calibrate' run reports) or a list of MagCache ratios")
        try:
            model = data.get("model")
            sig = None if model is None else ModelSignature(**{k: model[k] for k in ("name",) + _SIGNATURE_FIELDS})
            steps = _steps(data["steps"])
            mag = data.get("mag_ratios") or {}
            cond = _floats(mag.get("cond", []), "MagCache cond ratios")
            uncond = _floats(mag.get("uncond", []), "MagCache uncond ratios")
            tea = {str(k): tuple(_floats(v, f"TeaCache {k} coefficients")) for k, v in
                   (data.get("teacache") or {}).items()}
        except (KeyError, TypeError) as e:
            raise ValueError(f"cache calibration: missing or malformed field {e}; use the text a 'calibrate' "
                             f"run reports") from None
        if len(cond) != steps or len(uncond) not in (0, steps):
            raise ValueError(f"cache calibration: {len(cond)} cond / {len(uncond)} uncond MagCache ratios for "
                             f"{steps} steps; each branch needs one ratio per step")
        return cls(sig, steps, tuple(cond), tuple(uncond), tea)

    def check_model(self, config: DiTConfig, what: str) -> None:
        """Refuse a calibration measured on another model (one line naming both)."""
        if self.model is not None and not self.model.same_model(ModelSignature.of(config)):
            raise ValueError(f"{what}: the table was measured on {self.model.describe()} but the model is "
                             f"{ModelSignature.of(config).describe()}; run method 'calibrate' on this model "
                             f"(or use the published table of a Wan 2.1 T2V 1.3B / 14B model)")


def _steps(value) -> int:
    """The calibration's step count: an integer from 1 to ``MAX_STEPS`` (1e400 or 2.5 are refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or not (
            1 <= value <= MAX_STEPS) or int(value) != value:
        raise ValueError(f"cache calibration: \"steps\": {value!r} must be an integer from 1 to {MAX_STEPS}")
    return int(value)


def _floats(values, what: str) -> list[float]:
    if not isinstance(values, (list, tuple)):
        raise ValueError(f"{what}: expected a list of numbers, got {type(values).__name__}")  # noqa: TRY004 - user JSON
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{what}: {v!r} is not a finite number")
        out.append(float(v))
    return out


class Calibrator:
    """Block-stack policy of the ``calibrate`` method: computes every step and records the measurements.

    Same interface as ``TeaCache`` / ``MagCache`` (``should_compute`` / ``computed``); ``result`` builds the
    ``Calibration``. Tensors: ``e [b, D]``, ``e0 [b, 6, D]``, residual ``[b, L, D]`` (rows of one branch)."""

    def __init__(self):
        self._last: dict[str, dict] = {}
        self.ratios: dict[str, list[float]] = {}
        self.samples: dict[str, list[tuple[float, float]]] = {"e": [], "e0": []}

    def should_compute(self, branch: str, step: int, e: torch.Tensor, e0: torch.Tensor) -> bool:
        st = self._last.setdefault(branch, {})
        st["e_now"], st["e0_now"] = e.float().clone(), e0.float().clone()
        return True

    def residual(self, branch: str) -> torch.Tensor:
        raise RuntimeError("the calibrate method computes every step; nothing is reused")

    def computed(self, branch: str, step: int, residual: torch.Tensor) -> None:
        st = self._last[branch]
        r = residual.float()
        prev = st.get("residual")
        ratios = self.ratios.setdefault(branch, [])
        if prev is None:
            ratios.append(1.0)
        else:
            ratios.append((r.norm(dim=-1) / prev.norm(dim=-1)).mean().item())
            out_change = relative_l1(r, prev)
            for mode in ("e", "e0"):
                self.samples[mode].append((relative_l1(st[mode + "_now"], st[mode + "_prev"]), out_change))
        st["residual"], st["e_prev"], st["e0_prev"] = r, st["e_now"], st["e0_now"]

    def result(self, config: DiTConfig, steps: int) -> Calibration:
        import numpy as np

        tea = {}
        for mode, pairs in self.samples.items():
            if len(pairs) >= 2:
                x, y = np.array(pairs, dtype=np.float64).T
                with warnings.catch_warnings():  # few or repeated points: a poorly conditioned but usable fit
                    warnings.simplefilter("ignore")
                    tea[mode] = tuple(float(c) for c in np.polyfit(x, y, min(4, len(pairs) - 1)))
        cond = self.ratios.get("cond") or self.ratios.get("uncond", [])  # guidance 0 runs only uncond
        return Calibration(ModelSignature.of(config), steps, tuple(cond), tuple(self.ratios.get("uncond", ())), tea)
