"""Node validators enforce the limits the nodes declare (ComfyUI skips its own min/max check for every input a
custom validator takes), refuse sizes that cannot fit in memory before anything is allocated, tolerate linked
(None) inputs, and refuse prompts that are empty or not valid Unicode, as /prompt clients can send them."""
from __future__ import annotations

import inspect
import json
import re
import resource
import time
from importlib import import_module
from types import SimpleNamespace

import pytest
import torch


@pytest.fixture(scope="module")
def node(pack):
    names = ("declare", "latent", "vae", "conditioning")
    return SimpleNamespace(all=import_module(f"{pack.__name__}.nodes").NODE_SPECS,
                           **{n: import_module(f"{pack.__name__}.nodes.{n}") for n in names})


def _ranged_inputs_taken_by_validators(specs):
    for spec in specs:
        if spec.validate is None:
            continue
        taken = set(inspect.signature(spec.validate).parameters)
        for i in spec.inputs:
            if i.name in taken and i.type in ("INT", "FLOAT") and (i.min is not None or i.max is not None):
                yield spec, i


def test_every_validator_enforces_the_declared_range_of_what_it_takes(node):
    """Siblings included: any validator taking a ranged input refuses just outside min and max."""
    checked = []
    for spec, i in _ranged_inputs_taken_by_validators(node.all):
        step = 1 if i.type == "INT" else 0.5
        for bad in ([i.max + step] if i.max is not None else []) + ([i.min - step] if i.min is not None else []):
            bad = int(bad) if i.type == "INT" else float(bad)
            result = spec.validate(**{i.name: bad})
            assert isinstance(result, str) and f"{i.name}={bad}" in result, (spec.node_id, i.name, bad, result)
        checked.append(f"{spec.node_id}.{i.name}")
    # the empty latent's four sizes and the decode tiles at least
    assert {"WanCoreEmptyLatent.width", "WanCoreEmptyLatent.frames", "WanCoreEmptyLatent.batch_size",
            "WanCoreDecode.tile_size", "WanCoreDecode.overlap"} <= set(checked)


@pytest.mark.parametrize("values, message", [
    ({"frames": 4001}, "frames=4001: must be at most 2001"),     # 4n+1, so only the range refuses it
    ({"width": 8208}, "width=8208: must be at most 8192"),       # a multiple of 16, likewise
    ({"height": 0}, "height=0: must be at least 16"),
    ({"batch_size": 65}, "batch_size=65: must be at most 64"),
])
def test_empty_latent_refuses_values_outside_the_declaration(node, values, message):
    result = node.latent.validate_size(**values)
    assert isinstance(result, str) and message in result
    with pytest.raises(ValueError, match=message):
        node.latent.empty_latent(**{"width": 64, "height": 64, "frames": 5, "batch_size": 1, **values})


def test_limits_come_from_the_declaration(node):
    from wan_core.estimate import SIZE_LIMITS

    declared = {i.name: (i.min, i.max) for i in node.latent.EMPTY_LATENT.inputs}
    assert {k: declared[k] for k in SIZE_LIMITS} == SIZE_LIMITS


@pytest.mark.parametrize("size", [{"width": 100000, "height": 100000, "frames": 81},
                                  {"width": 832, "height": 480, "frames": 10001},
                                  {"width": 8192, "height": 8192, "frames": 2001, "batch_size": 64}])
def test_huge_sizes_are_one_line_errors_at_once_without_allocating(node, monkeypatch, size):
    def no_alloc(*a, **k):
        raise AssertionError("a tensor was allocated")

    monkeypatch.setattr(torch, "zeros", no_alloc)
    monkeypatch.setattr(torch, "empty", no_alloc)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    result = node.latent.validate_size(**size)
    with pytest.raises(ValueError) as err:
        node.latent.empty_latent(**{"batch_size": 1, **size})
    assert time.perf_counter() - t0 < 1.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 100 * 1024  # KiB: nothing big was touched
    assert isinstance(result, str) and "\n" not in result and str(err.value) == result


def test_in_range_sizes_that_cannot_fit_are_refused_by_memory(node, monkeypatch):
    """8192x8192, 2001 frames, batch 64 is inside every declared range; no machine holds its activations."""
    result = node.latent.validate_size(8192, 8192, 2001, 64)
    assert "DiT needs at least" in result and "largest device here has" in result
    # with 1 GiB, even the default 81 frames does not fit the smallest Wan DiT (2.6 GiB of bf16 weights alone)
    monkeypatch.setattr(node.latent, "total_memory", lambda device=None: 1 << 30)
    assert "DiT needs at least" in node.latent.validate_size(832, 480, 81)
    monkeypatch.undo()
    assert node.latent.validate_size(832, 480, 81) is True


def test_linked_inputs_arrive_as_none_and_are_checked_when_run(node):
    """ComfyUI passes None for an input fed by a link; the validator must not crash on it."""
    assert node.latent.validate_size(width=None, height=480, frames=81) is True
    assert "frames=80" in node.latent.validate_size(width=None, height=480, frames=80)
    assert node.vae.validate_tiles(tile_size=None, overlap=64) is True
    assert node.conditioning.validate_prompts(positive=None, negative=None) is True


def test_validators_receive_every_input_they_check(node):
    """ComfyUI passes a validator only the inputs named in its argument list (getfullargspec)."""
    cls = node.declare.v1_class(node.latent.EMPTY_LATENT)
    assert set(inspect.getfullargspec(cls.VALIDATE_INPUTS).args) == {"width", "height", "frames", "batch_size"}


@pytest.mark.parametrize("tiles, message", [
    ({"tile_size": 4104}, "tile_size=4104: must be at most 4096"),
    ({"tile_size": 56}, "tile_size=56: must be at least 64"),
    ({"overlap": 1032}, "overlap=1032: must be at most 1024"),
    ({"tile_size": 128, "overlap": 128}, "overlap < tile_size"),
    ({"tile_size": 260}, "multiples of 8"),
])
def test_decode_tiles_are_refused_before_queueing(node, tiles, message):
    assert node.vae.DECODE.validate is not None
    result = node.vae.validate_tiles(**tiles)
    assert isinstance(result, str) and message in result
    assert node.vae.validate_tiles(256, 64) is True


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True, "12"])
def test_range_check_refuses_non_numbers(node, value):
    problems = node.latent.EMPTY_LATENT.range_problems(width=value)
    assert len(problems) == 1 and problems[0].startswith("width=")


# ---------------------------------------------------------------- prompts

def _from_json(text: str) -> str:
    return json.loads(text)  # what ComfyUI's /prompt does with the request body


@pytest.mark.parametrize("positive, negative, message", [
    ("", "blurry", "positive: the prompt is empty"),
    (" \n\t ", "blurry", "positive: the prompt is empty"),
    (_from_json('"a fox \\ud800"'), "", "positive: contains invalid Unicode (a lone surrogate U+D800"),
    ("a fox", _from_json('"\\udcff"'), "negative: contains invalid Unicode"),
])
def test_text_encode_refuses_bad_prompts_before_queueing_and_when_run(node, positive, negative, message):
    spec = node.conditioning.TEXT_ENCODE
    assert spec.validate is not None
    result = spec.validate(positive=positive, negative=negative)
    assert isinstance(result, str) and message in result

    class NeverCalled:
        def encode(self, texts):
            raise AssertionError("the encoder must not see a bad prompt")

    with pytest.raises(ValueError, match=re.escape(message)):
        node.conditioning.text_encode(NeverCalled(), positive, negative)


def test_text_encode_accepts_an_empty_negative_prompt(node):
    assert node.conditioning.validate_prompts(positive="a fox", negative="") is True
