"""Cache settings as data: a method (preset) and its few knobs, checked when built, with one-line errors.

``CacheConfig.preset("wan")`` is what the CLI's ``--cache wan`` and the ComfyUI node's default build; every
field left None takes the method's published (or, for ``wan``, our) default, resolved for the model and the
step count when a sampling run starts (``session.start_session``).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from typing import Literal, cast, get_args

from .calibration import Calibration

__all__ = [
    "ATTENTION_CHOICES",
    "CacheAttention",
    "CacheMethod",
    "CachePreset",
    "DESCRIPTIONS",
    "METHODS",
    "PRESETS",
    "TEACACHE_MODES",
    "TeaCacheMode",
    "WAN_END",
    "WAN_START",
    "CacheConfig",
]

CachePreset = Literal["off", "exact", "wan", "teacache", "magcache", "easycache"]
CacheMethod = Literal[CachePreset, "calibrate"]
CacheAttention = Literal["extrapolate", "reuse", "off"]
TeaCacheMode = Literal["e", "e0"]
# the same choices as tuples, for validation and messages
PRESETS: tuple[str, ...] = get_args(CachePreset)
METHODS: tuple[str, ...] = get_args(CacheMethod)
ATTENTION_CHOICES: tuple[str, ...] = get_args(CacheAttention)
TEACACHE_MODES: tuple[str, ...] = get_args(TeaCacheMode)
# The Wan cache's window (fractions of the steps): CFG and attention reuse from 20 % of the steps to the end.
WAN_START = 0.2
WAN_END = 1.0
WAN_ATTENTION_INTERVAL = 2

# What each method does and costs, in the words the docs, the node tooltip and the CLI help use.
DESCRIPTIONS = {
    "off": "no caching: every DiT pass computed (the uncached sampler)",
    "exact": "text K/V computed once per prompt: identical output, a little faster (default)",
    "wan": "exact + the Wan report's CFG cache and attention cache: ~1.6-2x less DiT work, small detail changes",
    "teacache": "exact + TeaCache (published Wan 2.1 1.3B/14B coefficients): ~2x, may soften motion",
    "magcache": "exact + MagCache (published Wan 2.1 1.3B/14B ratios): ~2-2.8x, may soften detail",
    "easycache": "exact + EasyCache (no calibration): ~2.2-2.4x, may soften detail",
    "calibrate": "one uncached run that measures MagCache ratios and TeaCache coefficients for this model",
}


def _number(method: str, name: str, value, low: float, high: float, hint: str, *, integer: bool = False,
            low_open: bool = False) -> None:
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
    if ok and integer:
        ok = float(value).is_integer()
    if ok:
        ok = (low < value if low_open else low <= value) and value <= high
    if not ok:
        lo = f"> {low:g}" if low_open else f">= {low:g}"
        rng = f"{lo}" if high == math.inf else f"{lo} and <= {high:g}"
        kind = "an integer" if integer else "a finite number"
        raise ValueError(f"cache {method}: {name}={value!r} must be {kind} {rng} ({hint})")


@dataclass(frozen=True)
class CacheConfig:
    """A diffusion-cache setting. ``method`` in ``METHODS``; None fields take the method's default.

    threshold: TeaCache / MagCache / EasyCache reuse threshold (>= 0; 0 never skips; larger = faster, lossier).
    start, end: fractions of the steps (0 <= start < end <= 1): the window where the method may reuse; steps
    before ``start`` and from ``end`` on always compute. text_kv: the exact text-KV cache (every method but off).
    cfg_interval: ``wan``: unconditional pass every N steps inside the window (None: ``max(2, round(steps/10))``).
    attention / attention_interval: ``wan``: self-attention "extrapolate" (default) | "reuse" (half the memory,
    less accurate) | "off", computed every N steps.
    teacache_mode: "e" (timestep embedding, published default) | "e0" (time projection, ``use_ret_steps``).
    coefficients: TeaCache polynomial (highest degree first) instead of the published / calibrated one.
    max_skips: MagCache's K, the most consecutive reused steps. calibration: a ``Calibration`` (MagCache ratios,
    TeaCache coefficients) for models without published tables. alpha_low / alpha_high: the CFG cache's
    FasterCache band weights.
    """

    method: CacheMethod = "exact"
    threshold: float | None = None
    start: float | None = None
    end: float | None = None
    text_kv: bool = True
    cfg_interval: int | None = None
    attention: CacheAttention = "extrapolate"
    attention_interval: int = WAN_ATTENTION_INTERVAL
    teacache_mode: TeaCacheMode = "e"
    coefficients: tuple[float, ...] | None = None
    max_skips: int | None = None
    calibration: Calibration | None = None
    alpha_low: float = 1.1
    alpha_high: float = 1.1

    def __post_init__(self):
        m = self.method
        if not isinstance(m, str) or m not in METHODS:
            raise ValueError(f"cache: unknown method {m!r}; valid: {', '.join(METHODS)}")
        if self.threshold is not None:
            _number(m, "threshold", self.threshold, 0.0, math.inf,
                    "0 never reuses; larger reuses more; the published defaults are in docs/caches.md")
        for name in ("start", "end"):
            value = getattr(self, name)
            if value is not None:
                _number(m, name, value, 0.0, 1.0, "a fraction of the sampling steps, 0 = the first step")
        if self.start is not None and self.end is not None and self.start >= self.end:
            raise ValueError(f"cache {m}: start={self.start} is not before end={self.end}; both are fractions of "
                             f"the steps with 0 <= start < end <= 1")
        if self.cfg_interval is not None:
            _number(m, "cfg_interval", self.cfg_interval, 1, 1000, "1 = never estimate the unconditional pass",
                    integer=True)
        _number(m, "attention_interval", self.attention_interval, 1, 1000, "1 = never reuse self-attention",
                integer=True)
        if self.attention not in ATTENTION_CHOICES:
            raise ValueError(f"cache {m}: attention={self.attention!r}; valid: {', '.join(ATTENTION_CHOICES)}")
        if self.teacache_mode not in TEACACHE_MODES:
            raise ValueError(f"cache {m}: teacache_mode={self.teacache_mode!r}; valid: {', '.join(TEACACHE_MODES)}"
                             f" (e: timestep embedding, e0: time projection)")
        if self.max_skips is not None:
            _number(m, "max_skips", self.max_skips, 1, 1000, "MagCache's K, consecutive reused steps",
                    integer=True)
        if self.coefficients is not None:
            coefs = tuple(self.coefficients)
            if not coefs or not all(isinstance(c, numbers.Real) and not isinstance(c, bool) and math.isfinite(c)
                                    for c in coefs):
                raise ValueError(f"cache {m}: coefficients={self.coefficients!r} must be finite numbers, highest "
                                 f"degree first (TeaCache's numpy poly1d order)")
            object.__setattr__(self, "coefficients", tuple(float(c) for c in coefs))
        for name in ("alpha_low", "alpha_high"):
            _number(m, name, getattr(self, name), 0.0, 10.0, "FasterCache's band weight, 1.1 by default",
                    low_open=True)
        if self.calibration is not None and not isinstance(self.calibration, Calibration):
            raise TypeError(f"cache {m}: calibration must be a Calibration (Calibration.from_json(text)), got "
                            f"{type(self.calibration).__name__}")
        if not isinstance(self.text_kv, bool):
            raise TypeError(f"cache {m}: text_kv must be True or False, got {self.text_kv!r}")

    @classmethod
    def preset(cls, name: str, **overrides) -> CacheConfig:
        """The preset ``name`` (``PRESETS`` or "calibrate") with optional field overrides; takes any string (from
        a widget or a command line): ``__post_init__`` refuses an unknown name with the valid ones."""
        return cls(method=cast(CacheMethod, name), **overrides)

    def replace(self, **changes) -> CacheConfig:
        return replace(self, **changes)

    @property
    def uses_text_kv(self) -> bool:
        return self.text_kv and self.method != "off"


def as_config(cache) -> CacheConfig:
    """``None`` -> the default (``exact``); a preset name -> its config; a ``CacheConfig`` as is."""
    if cache is None:
        return CacheConfig()
    if isinstance(cache, CacheConfig):
        return cache
    if isinstance(cache, str):
        return CacheConfig.preset(cache)
    raise TypeError(f"cache: expected a preset name ({', '.join(PRESETS)}) or a CacheConfig, got "
                    f"{type(cache).__name__}")
