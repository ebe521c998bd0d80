"""Regional compile of the DiT blocks (wan_core.memory.compile). Reference: the same model eager, fp32.

The default-suite tests use the ``aot_eager`` backend (dynamo + AOTAutograd tracing, eager kernels: the same
capture, hooks and recompile behaviour in seconds); the inductor test generates kernels (minutes on a small
CPU) and is marked slow. Tolerance 1e-5 (issue 14)."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from wan_core.memory import compile as compile_mod
from wan_core.memory import block_swap_of, compile_blocks, enable_block_swap, uncompile_blocks

from .helpers import inputs, load


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def run(model, x, t, ctx):
    with torch.no_grad():
        return model(x, t, ctx)


@pytest.mark.parametrize("swap", [0, 3])
def test_one_compile_shared_by_all_blocks(swap):
    x, t, ctx = inputs()
    ref = run(load(), x, t, ctx)
    model = load()
    if swap:
        enable_block_swap(model, swap, 1, device="cpu")
    assert compile_blocks(model, backend="aot_eager") == ""
    out, out2 = run(model, x, t, ctx), run(model, x, t, ctx)
    assert (out - ref).abs().max().item() <= 1e-5 and (out2 - ref).abs().max().item() <= 1e-5
    # 6 blocks, 2 steps: the first block's graph plus one with the block index dynamic, nothing per step
    assert counters["stats"]["unique_graphs"] <= 2
    if swap:
        assert block_swap_of(model).stats.max_resident <= 2
    uncompile_blocks(model)
    assert "forward" not in vars(model.blocks[0])


def test_no_compiler_is_a_clear_one_line_warning(monkeypatch):
    monkeypatch.setattr(compile_mod.shutil, "which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    model = load()
    with pytest.warns(compile_mod.CompileUnavailableWarning, match="needs a C.. compiler") as w:
        reason = compile_blocks(model, device="cpu")
    assert reason and "\n" not in str(w[0].message) and "run eager" in str(w[0].message)
    x, t, ctx = inputs()
    assert torch.equal(run(model, x, t, ctx), run(load(), x, t, ctx))


def test_compile_failure_falls_back_to_eager():
    def broken_backend(gm, example_inputs):
        raise RuntimeError("no kernels today")

    x, t, ctx = inputs()
    model = load()
    compile_blocks(model, backend=broken_backend)  # type: ignore[arg-type]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = run(model, x, t, ctx)
    messages = [str(m.message) for m in w if issubclass(m.category, compile_mod.CompileUnavailableWarning)]
    assert len(messages) == 1 and "no kernels today" in messages[0]
    assert torch.equal(out, run(load(), x, t, ctx))


@pytest.mark.slow
def test_inductor_parity_fp32():
    """Generated kernels (inductor) within 1e-5 of eager; ~3 minutes on 2 shared CPU cores."""
    x, t, ctx = inputs()
    ref = run(load(), x, t, ctx)
    model = load()
    assert compile_blocks(model) == ""
    out = run(model, x, t, ctx)
    print(f"inductor vs eager: max abs {(out - ref).abs().max().item():.2e}")
    assert (out - ref).abs().max().item() <= 1e-5
