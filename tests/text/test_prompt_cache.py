"""Prompt cleaning (docs/wan_spec.md section 4.1), the LRU prompt-embedding cache, progress and interruption."""
from __future__ import annotations

import pytest
import torch

from wan_core import load_text_encoder
from wan_core.text.prompt import clean_prompt

from . import helpers as H


@pytest.mark.parametrize("raw, clean", [
    ("  a cat  ", "a cat"),
    ("a\tcat\n\nwalks   home", "a cat walks home"),
    ("salt &amp; pepper", "salt & pepper"),
    ("salt &amp;amp; pepper", "salt & pepper"),  # unescaped twice
    ("&lt;b&gt;bold&lt;/b&gt;", "<b>bold</b>"),
    ("&amp;lt;i&amp;gt;", "<i>"),
    ("caf&eacute;&nbsp;&nbsp;noir", "café noir"),  # nbsp is whitespace after unescaping
    ("\u3000全角\u3000スペース ", "全角 スペース"),
    ("", ""),
    ("   \n ", ""),
])
def test_clean_prompt(raw, clean):
    assert clean_prompt(raw) == clean


def test_clean_prompt_ftfy_when_installed():
    pytest.importorskip("ftfy")
    assert clean_prompt("cafÃ©") == "café"


def test_clean_prompt_rejects_non_strings():
    with pytest.raises(TypeError):
        clean_prompt(None)


@pytest.fixture
def counted(tiny):
    """An encoder and a counter of its forward passes."""
    te = load_text_encoder(tiny.files["comfy_st"], dtype=torch.float32, cache_size=2)
    calls = []
    te.model.register_forward_hook(lambda mod, args, kwargs, out: calls.append(kwargs["input_ids"].shape[0]),
                                   with_kwargs=True)
    return te, calls


def test_cache_hit_does_not_run_the_model(counted):
    te, calls = counted
    first = te.encode(["a cat", "a dog"])
    assert calls == [2]
    again = te.encode(["a dog", "  a   cat "])  # same cleaned prompts
    assert calls == [2]
    assert torch.equal(again[0], first[1]) and torch.equal(again[1], first[0])


def test_cache_is_lru_and_bounded(counted):
    te, calls = counted
    te.encode(["a"])
    te.encode(["b"])
    te.encode(["a"])  # hit; "b" is now the least recently used
    te.encode(["c"])  # evicts "b"
    assert te.cached_prompts() == ["a", "c"]
    assert calls == [1, 1, 1]
    te.encode(["b"])
    assert calls == [1, 1, 1, 1]


def test_cached_result_is_not_aliased(counted):
    te, calls = counted
    first = te.encode(["a cat"])[0]
    ref = first.clone()
    first.zero_()
    assert torch.equal(te.encode(["a cat"])[0], ref)


def test_cache_disabled_and_duplicates(tiny):
    te = load_text_encoder(tiny.files["comfy_st"], dtype=torch.float32, cache_size=0)
    calls = []
    te.model.register_forward_hook(lambda *a: calls.append(1))
    out = te.encode(["x", "x", " x"])
    assert len(calls) == 1 and torch.equal(out[0], out[2])  # encoded once per call
    te.encode(["x"])
    assert len(calls) == 2 and te.cached_prompts() == []


def test_more_prompts_than_cache_slots(tiny, reference_outputs):
    te = load_text_encoder(tiny.files["comfy_st"], dtype=torch.float32, cache_size=1)
    assert H.max_abs_err(te.encode(H.PROMPTS, batch_size=4), reference_outputs) <= 1e-5


def test_cleaning_is_applied_before_encoding(tiny):
    te = load_text_encoder(tiny.files["comfy_st"], dtype=torch.float32, cache_size=0)
    a = te.encode(["salt &amp;amp; pepper\n\n on  a table"])[0]
    b = te.encode(["salt & pepper on a table"])[0]
    assert torch.equal(a, b)


def test_progress_and_interrupt(tiny):
    te = load_text_encoder(tiny.files["comfy_st"], dtype=torch.float32, cache_size=8)
    seen = []
    te.encode(H.PROMPTS, batch_size=2, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(2, 6), (4, 6), (6, 6)]

    class Interrupted(Exception):
        pass

    def stop_after_two(done, total):
        if done >= 2:
            raise Interrupted

    te.clear_cache()
    with pytest.raises(Interrupted):
        te.encode(H.PROMPTS, batch_size=1, progress=stop_after_two)
    assert len(te.cached_prompts()) == 2  # work done before the interrupt is kept


def test_interrupt_callback_stops_between_batches(tiny):
    """The shared contract (wan_core.progress): interrupt() is asked before each batch; True -> Interrupted."""
    from wan_core.progress import Interrupted

    te = load_text_encoder(tiny.files["comfy_st"], dtype=torch.float32, cache_size=8)
    asked = []

    def interrupt():
        asked.append(len(asked))
        return len(asked) > 2

    with pytest.raises(Interrupted, match=r"text encoding interrupted before 3 of 6"):
        te.encode(H.PROMPTS, batch_size=1, interrupt=interrupt)
    assert len(te.cached_prompts()) == 2 and len(asked) == 3


def test_cast_clears_the_cache(tiny, reference_outputs):
    te = load_text_encoder(tiny.files["comfy_st"], dtype=torch.float32)
    te.encode(H.PROMPTS[:2])
    te.to("cpu")
    assert len(te.cached_prompts()) == 2  # a move keeps the cache
    te.to(dtype=torch.float16)
    assert te.cached_prompts() == [] and te.dtype == torch.float16
    assert te.model.encoder.block[1].layer[1].DenseReluDense.wo.weight.dtype == torch.float32
    te.to(dtype=torch.float32)
    assert H.rel_err(te.encode(H.PROMPTS), reference_outputs) < 1e-2  # weights went through fp16
