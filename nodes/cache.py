"""Cache node: picks a diffusion cache (wan_core.cache; docs/caches.md) for WanCoreSampler's optional ``cache``.

-1 in threshold / start / end means "the method's default" (the published one for TeaCache, MagCache and
EasyCache, the Wan report-style window for ``wan``); the sampler reports what the cache did as progress text.
"""
from __future__ import annotations

from wan_core.cache import (
    ATTENTION_CHOICES,
    DESCRIPTIONS,
    METHODS,
    TEACACHE_MODES,
    CacheConfig,
    Calibration,
)

from .declare import Input, NodeSpec, Output

DEFAULT = -1.0  # widget value meaning "the method's default"


def _optional(value: float) -> float | None:
    return None if value == DEFAULT else value


def build(method: str = "wan", threshold: float = DEFAULT, start: float = DEFAULT, end: float = DEFAULT,
          attention: str = "extrapolate", teacache_mode: str = "e", calibration: str = "") -> CacheConfig:
    """The ``CacheConfig`` for the node's widget values (raises ``ValueError`` with a one-line message)."""
    cal = Calibration.from_json(calibration) if calibration and calibration.strip() else None
    return CacheConfig.preset(method, threshold=_optional(threshold), start=_optional(start), end=_optional(end),
                              attention=attention, teacache_mode=teacache_mode, calibration=cal)


def make_cache(method: str = "wan", threshold: float = DEFAULT, start: float = DEFAULT, end: float = DEFAULT,
               attention: str = "extrapolate", teacache_mode: str = "e", calibration: str = ""):
    return (build(method, threshold, start, end, attention, teacache_mode, calibration),)


def validate_cache(method: str = "wan", threshold: float = DEFAULT, start: float = DEFAULT, end: float = DEFAULT,
                   attention: str = "extrapolate", teacache_mode: str = "e", calibration: str = "") -> bool | str:
    """Pre-queue check: the same one-line message sampling would give, before anything is queued."""
    problems = CACHE.range_problems(threshold=threshold, start=start, end=end)
    if problems:
        return "; ".join(problems)
    for name, value in (("start", start), ("end", end)):
        if value is not None and value != DEFAULT and value < 0:
            return f"{name}={value}: -1 (the method's default) or a fraction of the steps from 0 to 1"
    if threshold is not None and threshold != DEFAULT and threshold < 0:
        return f"threshold={threshold}: -1 (the method's default) or >= 0 (0 never reuses)"
    try:
        build(method, threshold, start, end, attention, teacache_mode, calibration or "")
    except (ValueError, TypeError) as e:
        return str(e)
    return True


_METHOD_HELP = "; ".join(f"{m}: {DESCRIPTIONS[m]}" for m in METHODS)

CACHE = NodeSpec(
    node_id="WanCoreCache", display_name="WanCore Cache", category="WanCore/sampling",
    description="Diffusion cache for WanCore Sampler's optional 'cache' input: skips or reuses part of the DiT "
                "work between sampling steps. Without it the sampler uses 'exact' (same output). The sampler "
                "shows 'cache <method>: <computed>/<total> DiT evaluations' when it finishes.",
    inputs=(
        Input("method", "COMBO", default="wan", options=METHODS, tooltip=_METHOD_HELP),
        Input("threshold", "FLOAT", default=DEFAULT, min=-1.0, max=100.0, step=0.01,
              tooltip="teacache / magcache / easycache: -1 = published default (teacache 0.08 for 1.3B, 0.2 for "
                      "14B; magcache 0.12 / 0.24; easycache 0.05); 0 never reuses; higher = faster, lossier"),
        Input("start", "FLOAT", default=DEFAULT, min=-1.0, max=1.0, step=0.01,
              tooltip="fraction of the steps before which every step is computed; -1 = the method's default "
                      "(wan 0.2, magcache 0.2, easycache 0.2, teacache: first step)"),
        Input("end", "FLOAT", default=DEFAULT, min=-1.0, max=1.0, step=0.01,
              tooltip="fraction of the steps from which every step is computed again; -1 = the method's default "
                      "(1.0; teacache and easycache compute the last step)"),
        Input("attention", "COMBO", default="extrapolate", options=ATTENTION_CHOICES, advanced=True,
              tooltip="wan: self-attention between computed steps linearly extrapolated from the last two "
                      "(default), reused as is (half the memory, less accurate), or off"),
        Input("teacache_mode", "COMBO", default="e", options=TEACACHE_MODES, advanced=True,
              tooltip="teacache indicator: e = timestep embedding (published default), e0 = time projection "
                      "(use_ret_steps: first 5 steps computed)"),
        Input("calibration", "STRING", default="", multiline=True, optional=True, advanced=True,
              tooltip="teacache / magcache on models without published numbers: paste the text a 'calibrate' "
                      "run shows (or MagCache's list of ratios)"),
    ),
    outputs=(Output("WANCORE_CACHE", "cache"),),
    fn=make_cache,
    validate=validate_cache,
)

NODES = (CACHE,)
