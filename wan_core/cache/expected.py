"""Expected DiT evaluations of a cache setting before anything runs (the canvas estimate shows these).

Pure Python, mirrored in ``web/wancore_estimate.js`` (``expectedEvaluations``; a test keeps the two equal).
``off`` / ``exact`` / ``calibrate`` compute every pass and ``wan``'s count follows from its schedule exactly; the
threshold methods depend on the content, so they get the published speed-up as the expectation and the
forced passes (those a huge threshold still computes) as the floor.
"""
from __future__ import annotations

import math

from .config import METHODS, WAN_ATTENTION_INTERVAL, WAN_END, WAN_START
from .published import (
    EASYCACHE_RETENTION,
    MAGCACHE_DEFAULTS,
    MODEL_1_3B,
    MODEL_14B,
    PUBLISHED_SPEEDUP,
    TEACACHE_FORCE_LAST,
    TEACACHE_RETENTION_STEPS,
)
from .report import attention_share
from .schedule import Window, step_index, wan_cfg_interval

__all__ = ["expected_evaluations"]

_MODELS = {"1.3B": MODEL_1_3B, "14B": MODEL_14B}


def _forced(method: str, steps: int, model: str, start: float | None, end: float | None, branch: int) -> int:
    """Passes of one branch (0 cond, 1 uncond) that a huge threshold still computes (simulated)."""
    k = math.inf
    if method == "magcache":
        d = MAGCACHE_DEFAULTS[_MODELS.get(model, MODEL_1_3B)]
        calls = int(2 * steps * (start if start is not None else d["retention"]))
        first = min(steps, max(0, math.ceil((calls - branch) / 2)))
        stop = step_index(end, steps) if end is not None else steps
        k = int(d["max_skips"])
    elif method == "teacache":
        first = step_index(start, steps) if start is not None else min(steps, TEACACHE_RETENTION_STEPS["e"])
        stop = step_index(end, steps) if end is not None else steps - int(TEACACHE_FORCE_LAST["e"])
    else:  # easycache: also needs two computed steps to know its rate
        first = step_index(start if start is not None else EASYCACHE_RETENTION, steps)
        stop = step_index(end, steps) if end is not None else steps - 1
    need = 2 if method == "easycache" else 1
    computed = skipped = 0
    for i in range(steps):
        if first <= i < stop and computed >= need and skipped < k:
            skipped += 1
        else:
            computed += 1
            skipped = 0
    return computed


def expected_evaluations(method: str = "exact", steps: int = 30, guidance: float = 5.0, model: str = "1.3B",
                         tokens: int = 0, start: float | None = None, end: float | None = None) -> dict:
    """``total`` passes, ``expected`` computed ones, ``minimum`` (forced), ``exact`` (True when the count does
    not depend on the content), ``attention_reused`` (passes whose self-attention is reused, ``wan``) and
    ``work`` (expected DiT work / uncached, with the self-attention share at ``tokens`` when given)."""
    if method not in METHODS:
        raise ValueError(f"cache: unknown method {method!r}; valid: {', '.join(METHODS)}")
    branches = 1 if guidance in (0, 1) else 2
    total = steps * branches
    expected, minimum, exact, reused = total, total, True, 0
    if method == "wan":
        first = WAN_START if start is None else start
        last = WAN_END if end is None else end
        cfg = Window.of(first, last, steps, wan_cfg_interval(steps))
        attn = Window.of(first, last, steps, WAN_ATTENTION_INTERVAL)
        uncond = [branches == 2 and not cfg.reuses(i) for i in range(steps)] if branches == 2 else [False] * steps
        expected = minimum = steps + sum(uncond)
        reused = sum(attn.reuses(i) for i in range(steps))  # the first branch runs every step
        if branches == 2:
            reused += sum(attn.reuses(i) and uncond[i] and uncond[attn.anchor(i)] for i in range(steps))
    elif method in ("teacache", "magcache", "easycache"):
        exact = False
        minimum = sum(_forced(method, steps, model, start, end, b) for b in range(branches))
        minimum = min(total, minimum)
        expected = max(minimum, round(total / PUBLISHED_SPEEDUP[method]))
    dims = {"1.3B": (1536, 8960), "14B": (5120, 13824)}.get(model, (1536, 8960))
    share = attention_share(dims[0], dims[1], tokens) if tokens else 0.0
    work = (expected - reused * share) / total if total else 1.0
    return {"total": total, "expected": expected, "minimum": minimum, "exact": exact, "attention_reused": reused,
            "work": work}
