"""The shipped TeaCache / MagCache / EasyCache numbers equal an independent copy of the published ones
(``data/published_wan21.json``, which names the repository, commit and file of each), and the presets resolve
to them for the released Wan 2.1 T2V models."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from wan_core.cache import CacheConfig, Calibration, start_session
from wan_core.cache import published as P
from wan_core.config import DIT_PRESETS

COPY = json.loads((Path(__file__).parent / "data" / "published_wan21.json").read_text(encoding="utf-8"))
NAMES = {"1.3B": P.MODEL_1_3B, "14B": P.MODEL_14B}


class Stub:
    """What start_session reads from a WanDiT."""

    cache = None

    def __init__(self, model):
        self.config = DIT_PRESETS[model]

    def run_blocks(self, *args):
        raise AssertionError("not called")


def test_sources_are_named():
    for method in ("teacache", "magcache", "easycache"):
        assert "github.com" in COPY[method]["source"] and "@" in COPY[method]["source"]
    assert "7c10efc4702c" in P.TEACACHE_SOURCE and "df81cb181776" in P.MAGCACHE_SOURCE


@pytest.mark.parametrize("mode", ["e", "e0"])
@pytest.mark.parametrize("size", ["1.3B", "14B"])
def test_teacache_coefficients_are_the_published_ones(mode, size):
    assert list(P.TEACACHE_COEFFICIENTS[mode][NAMES[size]]) == COPY["teacache"]["coefficients"][mode][size]
    assert P.TEACACHE_RETENTION_STEPS[mode] == COPY["teacache"]["ret_steps"][mode]
    assert P.TEACACHE_FORCE_LAST[mode] == COPY["teacache"]["force_last"][mode]


@pytest.mark.parametrize("size", ["1.3B", "14B"])
def test_magcache_ratios_and_defaults_are_the_published_ones(size):
    ratios = COPY["magcache"]["ratios"][size]
    assert len(ratios) == 100
    assert list(P.MAGCACHE_RATIOS[NAMES[size]]) == ratios
    cal = Calibration.published(NAMES[size])
    assert (list(cal.mag_cond), list(cal.mag_uncond)) == (ratios[0::2], ratios[1::2])
    d = COPY["magcache"]["defaults"][size]
    assert P.MAGCACHE_DEFAULTS[NAMES[size]] == {"threshold": d["threshold"], "max_skips": d["max_skips"],
                                                 "retention": d["retention"]}


def test_easycache_defaults_are_the_published_ones():
    assert P.EASYCACHE_THRESHOLD == COPY["easycache"]["threshold"]
    assert P.EASYCACHE_RETENTION == COPY["easycache"]["ret_steps_of_50"] / 50


@pytest.mark.parametrize("size", ["1.3B", "14B"])
def test_presets_resolve_to_the_published_numbers(size):
    steps = 50
    tea = start_session("teacache", Stub(NAMES[size]), steps, 5.0).block_policy
    assert list(tea.coefficients) == COPY["teacache"]["coefficients"]["e"][size]
    assert (tea.first, tea.stop) == (1, 49)  # ret_steps 1*2 calls, cutoff 2*steps - 2 calls
    assert tea.threshold == P.TEACACHE_THRESHOLD["e"][NAMES[size]]
    e0 = start_session(CacheConfig.preset("teacache", teacache_mode="e0"), Stub(NAMES[size]), steps, 5.0).block_policy
    assert list(e0.coefficients) == COPY["teacache"]["coefficients"]["e0"][size]
    assert (e0.mode, e0.first, e0.stop) == ("e0", 5, 50)  # ret_steps 5*2 calls, cutoff 2*steps calls
    easy = start_session("easycache", Stub(NAMES[size]), steps, 5.0).model_policy
    assert (easy.threshold, easy.first, easy.stop) == (0.05, 10, 49)
