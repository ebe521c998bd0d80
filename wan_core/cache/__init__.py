"""Diffusion caches behind the sampler's hooks (docs/algorithms.md section 4; docs/caches.md).

One mechanism, several policies, picked by preset:

* ``off`` - nothing cached; ``exact`` (default) - every block's cross-attention K/V computed once per prompt;
* ``wan`` - the Wan report's CFG cache (FasterCache residual compensation) and attention cache;
* ``teacache`` / ``magcache`` / ``easycache`` - step skipping with the methods' published Wan 2.1 numbers;
* ``calibrate`` - measures MagCache ratios and TeaCache coefficients for any model.

Use::

    from wan_core.cache import CacheConfig
    pipe.sample_latents(cond, uncond, cfg, cache="wan")            # or CacheConfig.preset("teacache", threshold=0.1)
    print(pipe.cache_report.line())                                 # cache wan: 68/100 DiT evaluations

or, around your own sampling loop, ``session = start_session(cache, dit, steps, guidance)``, give
``ClassifierFreeGuidance`` ``cfg_cache=session.cfg_cache, branch_cache=session`` and sample inside
``with session.attached(dit):``; ``session.report`` holds the counts.
"""
from .calibration import Calibration, ModelSignature, published_model
from .config import (
    ATTENTION_CHOICES,
    DESCRIPTIONS,
    METHODS,
    PRESETS,
    TEACACHE_MODES,
    CacheConfig,
    as_config,
)
from .expected import expected_evaluations
from .report import CacheReport, attention_share
from .session import CacheSession, branches_for, start_session

__all__ = [
    "ATTENTION_CHOICES",
    "DESCRIPTIONS",
    "METHODS",
    "PRESETS",
    "TEACACHE_MODES",
    "CacheConfig",
    "CacheReport",
    "CacheSession",
    "Calibration",
    "ModelSignature",
    "as_config",
    "attention_share",
    "branches_for",
    "expected_evaluations",
    "published_model",
    "start_session",
]
