"""Each ``Literal`` alias of a string option names exactly the choices of the tuple the code validates against,
in the same order, so the type a signature shows and the values the code accepts cannot drift apart."""
import typing

import pytest

from wan_core import estimate
from wan_core.attention import dispatch, skiparse
from wan_core.cache import config as cache_config
from wan_core.dit import options as dit_options
from wan_core.quant import fp8
from wan_core.sampling import comfy_schedule, schedule, solver
from wan_core.text import rewrite
from wan_core.train import tail_init

PAIRS = [
    (dispatch.Attention, dispatch.ATTENTION_BACKENDS),
    (skiparse.Skiparse, skiparse.SCHEDULES),
    (skiparse.Skiparse, estimate.SKIPARSE),  # estimate.py keeps its own copy (it must not import torch)
    (skiparse.SkiparseMode, skiparse.MODES),
    (solver.Solver, solver.SOLVER_NAMES),
    (schedule.Convention, schedule.CONVENTIONS),
    (comfy_schedule.ComfyScheduler, comfy_schedule.COMFY_SCHEDULERS),
    (fp8.Gemm, fp8.GEMM_MODES),
    (dit_options.Weights, dit_options.WEIGHT_FORMATS),
    (fp8.Granularity, fp8.GRANULARITIES),
    (rewrite.Language, rewrite.LANGUAGES),
    (cache_config.CachePreset, cache_config.PRESETS),
    (cache_config.CacheMethod, cache_config.METHODS),
    (cache_config.CacheAttention, cache_config.ATTENTION_CHOICES),
    (cache_config.TeaCacheMode, cache_config.TEACACHE_MODES),
    (tail_init.InflateMode, tail_init.INFLATE_MODES),
]


@pytest.mark.parametrize("alias, choices", PAIRS, ids=[str(c) for _, c in PAIRS])
def test_literal_alias_equals_its_choices(alias, choices):
    assert typing.get_args(alias) == tuple(choices)


def test_builtin_attention_backends_are_registered():
    assert set(dispatch.ATTENTION_BACKENDS) <= set(dispatch.attention_backends())
