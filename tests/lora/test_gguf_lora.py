"""LoRA on a GGUF DiT equals LoRA on its dequantised twin (unmerged: branches over the kept blocks; merged:
dequantise + add, held dense in the compute dtype); removal brings the blocks back; block swap moves the bytes."""
from __future__ import annotations

import contextlib

import pytest
import torch

from wan_core import apply_lora, load_dit, remove_loras
from wan_core.checkpoint import materialize, open_checkpoint
from wan_core.memory import enable_block_swap
from wan_core.quant.gguf_linear import GGUFLinear

from ..dit.gguf_files import random_weights, save_safetensors
from .helpers import CFG, official_file, random_lora

pytest.importorskip("gguf")
from wan_core.quant.gguf_writer import write_gguf  # noqa: E402


@pytest.fixture(scope="module")
def q4_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf_lora")
    path = d / "m-Q4_1.gguf"
    write_gguf(save_safetensors(random_weights(CFG, seed=4), d / "m.safetensors"), path, "Q4_1")
    return path


def _inputs():
    g = torch.Generator().manual_seed(9)
    return torch.randn(1, 16, 2, 4, 4, generator=g), torch.tensor([300.0]), torch.randn(1, 6, 32, generator=g)


def _pair(path):
    model = load_dit(path, dtype=torch.float32)
    twin = load_dit(materialize(open_checkpoint(path, gguf=True), torch.float32), dtype=torch.float32,
                    config=model.config)
    return model, twin


def _run(model):
    with torch.no_grad():
        return model(*_inputs())


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("merge", [False, True])
def test_lora_on_gguf_equals_lora_on_dequantised_twin(q4_file, merge):
    model, twin = _pair(q4_file)
    before = _run(model)
    raw = model.blocks[0].ffn[0].weight.clone()
    lora = official_file(random_lora(bias=True))
    ctx = pytest.warns(RuntimeWarning, match="kept dense in float32") if merge else contextlib.nullcontext()
    with ctx:
        apply_lora(model, lora, strength=0.7, merge=merge)
    apply_lora(twin, lora, strength=0.7, merge=merge)
    after = _run(model)
    assert _rel(after, _run(twin)) <= 1e-5
    assert _rel(after, before) > 1e-3  # the LoRA really changed the output
    ffn = model.blocks[0].ffn[0]
    assert isinstance(ffn, GGUFLinear) and torch.equal(ffn.weight, raw)  # the blocks are never written
    assert (ffn.merged is not None) == merge
    remove_loras(model)
    assert ffn.merged is None and torch.equal(_run(model), before)


def test_block_swap_moves_the_quantised_bytes(q4_file):
    model, _ = _pair(q4_file)
    ref = _run(model)
    block_bytes = sum(t.numel() * t.element_size() for t in
                      list(model.blocks[1].parameters()) + list(model.blocks[1].buffers()))
    swap = enable_block_swap(model, 1, 1, device="cpu")
    assert swap is not None
    out = _run(model)
    assert torch.equal(out, ref)
    assert swap.stats.block_bytes == block_bytes  # the blocks' bytes, not a dequantised copy
    q = model.blocks[1].self_attn.q
    assert isinstance(q, GGUFLinear) and q.weight.dtype == torch.uint8
    dense = sum(m.in_features * m.out_features * 4 for m in model.blocks[1].modules() if isinstance(m, GGUFLinear))
    assert block_bytes < 0.5 * dense
