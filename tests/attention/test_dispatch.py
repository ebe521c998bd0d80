"""Dispatch: backend routing per block / step range / kind, the step API, and the ``sage`` fallbacks."""
from __future__ import annotations

import warnings

import pytest
import torch

import wan_core
from wan_core.attention import (AttentionCall, AttentionDispatch, AttentionOverride, int8_attention,
                                sdpa_attention, step_in_range)
from wan_core.attention import dispatch as dispatch_mod
from wan_core.attention import sage as sage_mod
from wan_core.sampling.hooks import StepHook

from .helpers import CFG, dit_inputs, random_dit_state


def test_step_ranges():
    assert step_in_range(None, None, None)
    assert step_in_range((2, 5), 2, None) and not step_in_range((2, 5), 5, None)
    assert step_in_range((None, 3), 0, 10) and not step_in_range((None, 3), 3, 10)
    assert step_in_range((0.5, None), 5, 10) and not step_in_range((0.5, None), 4, 10)
    assert not step_in_range((0.5, None), 7, None)  # fraction without a step count
    assert not step_in_range((0, None), None, None)  # step unknown
    with pytest.raises(ValueError, match="fraction"):
        AttentionOverride("sdpa", steps=(0, 1.5))


def test_overrides_route_per_block_step_and_kind():
    d = AttentionDispatch("sdpa", overrides=[
        AttentionOverride("int8", blocks=[0, 1]),
        AttentionOverride("int8_fp8", steps=(0.8, None), kind="self"),
    ])
    assert d.backend_for(AttentionCall("self", 0)) == "int8"
    assert d.backend_for(AttentionCall("self", 5)) == "sdpa"
    d.set_step(9, 10)
    assert d.backend_for(AttentionCall("self", 0)) == "int8_fp8"  # later rules win
    assert d.backend_for(AttentionCall("cross", 5)) == "sdpa"
    with d.at_step(1, 10):
        assert d.backend_for(AttentionCall("self", 5)) == "sdpa"
    assert (d.step, d.total) == (9, 10)
    d.set_step(None)
    assert d.backend_for(AttentionCall("self", 5)) == "sdpa"


def test_dispatcher_is_a_sampling_step_hook():
    d = AttentionDispatch("sdpa", overrides=[AttentionOverride("int8", steps=(3, None))])
    assert isinstance(d, StepHook)
    d.begin_step(4, 10, 0.5)
    assert d.backend_for(AttentionCall("cross", 0)) == "int8"


def test_override_changes_the_numbers_only_where_asked():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 96, 64) for _ in range(3))
    d = AttentionDispatch("sdpa", overrides=[AttentionOverride("int8", blocks=[3])])
    assert torch.equal(d(q, k, v, AttentionCall("self", 0)), sdpa_attention(q, k, v))
    assert torch.equal(d(q, k, v, AttentionCall("self", 3)), int8_attention(q, k, v))


def test_unknown_backend_lists_the_available_ones():
    with pytest.raises(ValueError, match="available: .*int8.*sage.*sdpa"):
        AttentionDispatch("flash3")
    with pytest.raises(ValueError, match="unknown attention backend 'xformers'"):
        wan_core.load_dit(random_dit_state(), config=CFG, attention="xformers")


def test_sage_without_package_or_cuda_warns_once_and_runs_int8(monkeypatch):
    monkeypatch.setattr(dispatch_mod, "_WARNED", set())
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 80, 64) for _ in range(3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out1 = AttentionDispatch("sage")(q, k, v, AttentionCall("self", 0))
        out2 = AttentionDispatch("sage")(q, k, v, AttentionCall("self", 1))
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "attention=sage" in msgs[0] and "'int8'" in msgs[0]
    assert "\n" not in msgs[0]
    assert torch.equal(out1, int8_attention(q, k, v)) and torch.equal(out2, out1)


def test_sage_model_forward_falls_back(monkeypatch):
    monkeypatch.setattr(dispatch_mod, "_WARNED", set())
    sd = random_dit_state()
    x, t, ctx = dit_inputs(grid=(1, 8, 8))
    with pytest.warns(RuntimeWarning, match="using the 'int8' attention backend"):
        out = wan_core.load_dit(sd, dtype=torch.float32, config=CFG, attention="sage")(x, t, ctx)
    ref = wan_core.load_dit(sd, dtype=torch.float32, config=CFG, attention="int8")(x, t, ctx)
    assert torch.equal(out, ref)


def test_sage_kernel_path_never_modifies_callers_k(monkeypatch):
    """A stand-in for sageattention 1.x, which subtracts the key mean from K in place."""
    seen = {}

    def fake_sageattn(q, k, v, tensor_layout="HND", is_causal=False, sm_scale=None, smooth_k=True):
        seen.update(layout=tensor_layout, smooth_k=smooth_k, dtype=q.dtype)
        k -= k.mean(dim=2, keepdim=True)  # what 1.x does to its argument
        return sdpa_attention(q.float(), k.float(), v.float(), sm_scale).to(q.dtype)

    monkeypatch.setattr(sage_mod, "_load_sageattn", lambda: (fake_sageattn, None))
    monkeypatch.setattr(sage_mod, "sage_kernel_usable", lambda q: (True, ""))
    torch.manual_seed(2)
    q, v = torch.randn(1, 2, 64, 64), torch.randn(1, 2, 64, 64)
    k = torch.randn(1, 2, 64, 64) + 3.0
    k0 = k.clone()
    out = sage_mod.sage_attention(q, k, v)
    assert torch.equal(k, k0)
    assert seen == {"layout": "HND", "smooth_k": False, "dtype": torch.bfloat16}
    assert out.dtype == torch.float32
    assert (out - sdpa_attention(q, k, v)).abs().max().item() < 3e-2  # bf16 inputs, exact smoothing


def test_load_dit_takes_options_as_keywords_only():
    from wan_core.dit.options import ModelOptions

    sd = random_dit_state()
    model = wan_core.load_dit(sd, config=CFG, attention="int8", skiparse="suv", suv_profile=[1, 4, 1],
                              suv_stage_blocks=(2, 2, 2), skiparse_steps=(0.25, None))
    assert model.attention.backend == "int8" and model.attention.skiparse.ks == (1, 1, 4, 4, 1, 1)
    assert model.load_options == ModelOptions(attention="int8", skiparse="suv", suv_profile=(1, 4, 1),
                                              suv_stage_blocks=(2, 2, 2), skiparse_steps=(0.25, None))
    rules = [AttentionOverride("int8", blocks=[0])]
    model = wan_core.load_dit(sd, config=CFG, attention_overrides=rules, skiparse="osp13")
    assert model.attention.overrides == tuple(rules) and model.attention.skiparse.name == "osp13"
    assert model.attention.backend == "sdpa"
    # the forms load_dit no longer takes, and typos, are named with what to write instead
    with pytest.raises(TypeError, match="no longer taken; pass the options as keywords"):
        wan_core.load_dit(sd, config=CFG, options=ModelOptions(attention="int8"))
    with pytest.raises(TypeError, match="not an AttentionDispatch.*attention_overrides"):
        wan_core.load_dit(sd, config=CFG, attention=AttentionDispatch("sdpa", overrides=rules))
    with pytest.raises(TypeError, match="unknown option.*sparse_k; the options are attention, "):
        wan_core.load_dit(sd, config=CFG, sparse_k=4)


def test_load_dit_keywords_mirror_model_options():
    """Every ModelOptions field is a keyword-only argument of load_dit with the same default, and no other."""
    import dataclasses
    import inspect

    from wan_core.dit.loader import load_dit
    from wan_core.dit.options import ModelOptions

    params = inspect.signature(load_dit).parameters
    keywords = {n: p.default for n, p in params.items() if p.kind is p.KEYWORD_ONLY and n != "progress"}
    keywords["attention"] = params["attention"].default
    fields = {f.name: f.default for f in dataclasses.fields(ModelOptions)}
    assert keywords == fields
