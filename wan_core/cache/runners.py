"""How each cache method builds its runner for one sampling run: a table, one builder per method.

A builder reads the run's facts (:class:`RunFacts`: the resolved ``CacheConfig``, the step count, the branches
the guidance needs, the model's config and its published table, the calibration) and puts its parts on the
session: the CFG cache and attention cache (``wan``), a block-stack policy (``teacache``, ``magcache``,
``calibrate``) or a whole-model policy (``easycache``). ``off`` and ``exact`` build nothing here (``exact``'s
text-KV cache is the session's own). Every error a setting can cause is raised by its builder, before the
first step.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .attention_cache import AttentionCache
from .calibration import Calibration, Calibrator
from .cfg_cache import CFGCache
from .config import WAN_END, WAN_START, CacheConfig
from .easycache import EasyCache
from .magcache import MagCache, nearest_resample
from .published import (
    EASYCACHE_RETENTION,
    EASYCACHE_THRESHOLD,
    MAGCACHE_DEFAULTS,
    MODEL_1_3B,
    TEACACHE_COEFFICIENTS,
    TEACACHE_FORCE_LAST,
    TEACACHE_RETENTION_STEPS,
    TEACACHE_THRESHOLD,
)
from .schedule import Window, step_index, wan_cfg_interval
from .teacache import TeaCache

if TYPE_CHECKING:
    from .session import CacheSession

__all__ = ["METHOD_RUNNERS", "MethodRunner", "RunFacts"]


@dataclass(frozen=True)
class RunFacts:
    """What a method's builder reads about the run."""

    config: CacheConfig
    steps: int
    branches: tuple[str, ...]
    dit_config: Any  # a DiTConfig, or None for a model without the DiT hooks
    model: str | None  # the published table's model name (``published_model``), None when there is none
    calibration: Calibration | None


@dataclass(frozen=True)
class MethodRunner:
    """A cache method: whether it needs the DiT hooks for ``config``, and how it builds its parts."""

    needs_dit: Callable[[CacheConfig], bool]
    build: Callable[[CacheSession, RunFacts], None]


def _no_table(method: str, what: str, config) -> ValueError:
    name = getattr(config, "name", "?")
    dims = f"dim {getattr(config, 'dim', '?')}, {getattr(config, 'num_layers', '?')} blocks"
    return ValueError(f"cache {method}: no published {what} for this model ({name}, {dims}); they exist for Wan "
                      f"2.1 T2V 1.3B and 14B only: run method 'calibrate' on this model once and pass its "
                      f"calibration")


def _nothing(session: CacheSession, run: RunFacts) -> None:
    """``off`` and ``exact``: no policy (``exact``'s text-KV cache is set up with the session)."""


def _wan(session: CacheSession, run: RunFacts) -> None:
    """The Wan report's CFG cache (with both branches) and attention cache (unless ``attention`` is off)."""
    config, steps = run.config, run.steps
    interval = config.cfg_interval or wan_cfg_interval(steps)
    first = WAN_START if config.start is None else config.start
    last = WAN_END if config.end is None else config.end
    if len(run.branches) == 2:
        session.cfg_cache = CFGCache(Window.of(first, last, steps, interval), config.alpha_low,
                                     config.alpha_high, on_estimate=session._estimated)
    if config.attention != "off":
        session.attention = AttentionCache(Window.of(first, last, steps, config.attention_interval),
                                           config.attention, evaluated=session.evaluates)


def _teacache_coefficients(run: RunFacts) -> Sequence[float]:
    """The polynomial: given, from the calibration, or the published one; a one-line error otherwise."""
    config, cal, mode = run.config, run.calibration, run.config.teacache_mode
    if config.coefficients is not None:
        return config.coefficients
    if cal is not None and mode in cal.teacache:
        return cal.teacache[mode]
    if run.model is not None:
        return TEACACHE_COEFFICIENTS[mode][run.model]
    if cal is not None:
        raise ValueError(f"cache teacache: the calibration has no coefficients for mode {mode!r} (it has: "
                         f"{', '.join(cal.teacache) or 'none'}); run method 'calibrate' again")
    raise _no_table("teacache", "TeaCache coefficients", run.dit_config)


def _teacache(session: CacheSession, run: RunFacts) -> None:
    config, steps, mode, model = run.config, run.steps, run.config.teacache_mode, run.model
    coefs = _teacache_coefficients(run)
    threshold = config.threshold if config.threshold is not None else \
        TEACACHE_THRESHOLD[mode].get(model or MODEL_1_3B, TEACACHE_THRESHOLD[mode][MODEL_1_3B])
    first = step_index(config.start, steps) if config.start is not None else \
        min(steps, TEACACHE_RETENTION_STEPS[mode])
    stop = step_index(config.end, steps) if config.end is not None else steps - int(TEACACHE_FORCE_LAST[mode])
    session.block_policy = TeaCache(coefs, threshold, mode, first, stop)


def _magcache(session: CacheSession, run: RunFacts) -> None:
    config, steps, model, cal = run.config, run.steps, run.model, run.calibration
    if cal is None:
        if model is None:
            raise _no_table("magcache", "MagCache ratios", run.dit_config)
        cal = Calibration.published(model)
    cond = list(cal.mag_cond)
    uncond = list(cal.mag_uncond) or cond  # a table measured at guidance 1 serves both branches
    if cal.steps != steps:
        cond, uncond = nearest_resample(cond, steps), nearest_resample(uncond, steps)
    defaults = MAGCACHE_DEFAULTS.get(model or MODEL_1_3B, MAGCACHE_DEFAULTS[MODEL_1_3B])
    threshold = config.threshold if config.threshold is not None else defaults["threshold"]
    max_skips = config.max_skips if config.max_skips is not None else int(defaults["max_skips"])
    retention = config.start if config.start is not None else defaults["retention"]
    stop = step_index(config.end, steps) if config.end is not None else steps
    session.block_policy = MagCache(cond, uncond, threshold, max_skips, int(2 * steps * retention), stop)


def _easycache(session: CacheSession, run: RunFacts) -> None:
    config, steps = run.config, run.steps
    threshold = config.threshold if config.threshold is not None else EASYCACHE_THRESHOLD
    first = step_index(config.start if config.start is not None else EASYCACHE_RETENTION, steps)
    stop = step_index(config.end, steps) if config.end is not None else steps - 1
    session.model_policy = EasyCache(threshold, first, stop)


def _calibrate(session: CacheSession, run: RunFacts) -> None:
    session.block_policy = session.calibrator = Calibrator()


def _never(config: CacheConfig) -> bool:
    return False


def _always(config: CacheConfig) -> bool:
    return True


def _wan_needs_dit(config: CacheConfig) -> bool:
    """The CFG cache works on any model; the attention cache runs inside the DiT's blocks."""
    return config.attention != "off"


METHOD_RUNNERS: dict[str, MethodRunner] = {
    "off": MethodRunner(_never, _nothing),
    "exact": MethodRunner(_never, _nothing),
    "wan": MethodRunner(_wan_needs_dit, _wan),
    "teacache": MethodRunner(_always, _teacache),
    "magcache": MethodRunner(_always, _magcache),
    "easycache": MethodRunner(_always, _easycache),
    "calibrate": MethodRunner(_always, _calibrate),
}
