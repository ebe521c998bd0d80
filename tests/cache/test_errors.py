"""Bad cache settings fail before sampling with one line naming the setting and the valid values."""
from __future__ import annotations

import math

import pytest
import torch

from wan_core.cache import CacheConfig, Calibration, start_session
from wan_core.config import DIT_PRESETS

from .helpers import run, tiny_dit


@pytest.fixture(scope="module")
def dit():
    return tiny_dit()


def one_line(excinfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("kwargs,words", [
    ({"method": "fastcache"}, ["unknown method 'fastcache'", "off, exact, wan, teacache, magcache, easycache"]),
    ({"method": "teacache", "threshold": -0.1}, ["threshold=-0.1", ">= 0", "0 never reuses"]),
    ({"method": "magcache", "threshold": math.nan}, ["threshold=nan", "finite"]),
    ({"method": "easycache", "threshold": math.inf}, ["threshold=inf"]),
    ({"method": "wan", "start": 0.6, "end": 0.4}, ["start=0.6 is not before end=0.4", "0 <= start < end <= 1"]),
    ({"method": "wan", "start": 0.5, "end": 0.5}, ["start=0.5 is not before end=0.5"]),
    ({"method": "wan", "end": 1.5}, ["end=1.5", "<= 1"]),
    ({"method": "wan", "cfg_interval": 0}, ["cfg_interval=0", ">= 1"]),
    ({"method": "wan", "attention": "always"}, ["attention='always'", "extrapolate, reuse, off"]),
    ({"method": "teacache", "teacache_mode": "x"}, ["teacache_mode='x'", "e, e0"]),
    ({"method": "magcache", "max_skips": 2.5}, ["max_skips=2.5", "integer"]),
])
def test_bad_settings_are_refused_when_built(kwargs, words):
    with pytest.raises(ValueError) as e:
        CacheConfig(**kwargs)
    for w in words:
        assert w in one_line(e)


def test_unknown_preset_through_the_pipeline_and_cli(dit, capsys):
    with pytest.raises(ValueError) as e:
        run(dit, "turbo", steps=2)
    assert "valid: off, exact, wan" in one_line(e)
    from wan_core.cli import main

    assert main(["generate", "--preset", "tiny-random", "--prompt", "x", "--out", "x.mp4", "--cache", "turbo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--cache" in err[0] and "invalid choice: 'turbo'" in err[0]


def test_magcache_tables_of_the_wrong_length_or_model(dit):
    with pytest.raises(ValueError) as e:
        Calibration.from_json("[1.0, 1.0, 0.99]")
    assert "3 values; expected 2 x steps" in one_line(e)
    with pytest.raises(ValueError) as e:
        Calibration.from_json('{"format": "wancore.cache.calibration/1", "model": null, "steps": 4, '
                              '"mag_ratios": {"cond": [1, 1, 1], "uncond": []}}')
    assert "3 cond / 0 uncond MagCache ratios for 4 steps" in one_line(e)
    with pytest.raises(ValueError) as e:
        Calibration.from_json("not json")
    assert "not JSON" in one_line(e)
    # the published 1.3B table on the tiny model: refused, naming both models, before anything runs
    calls = []
    handle = dit.register_forward_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(ValueError) as e:
            run(dit, CacheConfig.preset("magcache", calibration=Calibration.published("wan2.1-t2v-1.3b")), steps=2)
    finally:
        handle.remove()
    assert calls == []
    msg = one_line(e)
    assert "measured on wan2.1-t2v-1.3b (dim 1536, 30 blocks)" in msg and "dim 64, 2 blocks" in msg


@pytest.mark.parametrize("method,what", [("teacache", "TeaCache coefficients"), ("magcache", "MagCache ratios")])
def test_methods_without_numbers_for_the_model_say_how_to_get_them(dit, method, what):
    with pytest.raises(ValueError) as e:
        run(dit, method, steps=2)
    msg = one_line(e)
    assert f"no published {what}" in msg and "1.3B and 14B" in msg and "'calibrate'" in msg


def test_dit_level_caches_need_a_wancore_dit():
    def model(x, t, ctx):
        return torch.zeros_like(x)

    with pytest.raises(ValueError) as e:
        start_session("teacache", model, 10, 5.0)
    assert "needs a WanCore DiT" in one_line(e)
    session = start_session(CacheConfig.preset("wan", attention="off"), model, 10, 5.0)
    assert session.cfg_cache is not None and session.text_kv is None  # the CFG cache works on any model


def test_start_session_checks_the_step_count():
    class Stub:
        config = DIT_PRESETS["wan2.1-t2v-1.3b"]
        cache = None

        def run_blocks(self):
            pass

    with pytest.raises(ValueError) as e:
        start_session("wan", Stub(), 0, 5.0)
    assert "steps=0" in one_line(e)


@pytest.mark.parametrize("text, words", [
    ("[" * 200000 + "]" * 200000, "nested too deeply"),
    ('{"format": "wancore.cache.calibration/1", "model": null, "steps": 1e400, "mag_ratios": {"cond": [1.0]}}',
     '"steps": inf must be an integer from 1 to 1000'),
    ('{"format": "wancore.cache.calibration/1", "model": null, "steps": 2.5, "mag_ratios": {"cond": [1.0]}}',
     '"steps": 2.5 must be an integer'),
    ('{"format": "wancore.cache.calibration/1", "model": null, "steps": true, "mag_ratios": {"cond": [1.0]}}',
     '"steps": True must be an integer'),
    ('{"format": "wancore.cache.calibration/1", "model": null, "steps": 1e9, "mag_ratios": {"cond": [1.0]}}',
     'must be an integer from 1 to 1000'),
    ('{"format": "wancore.cache.calibration/1", "model": null, "steps": "4", "mag_ratios": {"cond": [1.0]}}',
     '"steps": \'4\' must be an integer'),
])
def test_hostile_calibration_text_is_a_one_line_value_error(text, words):
    """The node's calibration input comes from any API client: deep nesting and huge numbers end in a message."""
    from nodes.cache import validate_cache

    with pytest.raises(ValueError, match="cache calibration") as err:
        Calibration.from_json(text)
    assert words in str(err.value) and "\n" not in str(err.value)
    verdict = validate_cache(method="magcache", calibration=text)
    assert isinstance(verdict, str) and words in verdict


def test_calibration_with_integral_float_steps_still_reads():
    cal = Calibration.from_json('{"format": "wancore.cache.calibration/1", "model": null, "steps": 2.0, '
                                '"mag_ratios": {"cond": [1.0, 0.9]}}')
    assert cal.steps == 2 and cal.mag_cond == (1.0, 0.9)
