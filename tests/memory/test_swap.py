"""Block swap (wan_core.memory.swap) on the CPU as both devices: the same window, hook and copy logic as on a
GPU, with synchronous copies. Reference: the same model without swap (outputs must be bit-identical, since the
swap only moves tensors). Resident blocks are counted from the parameters' storage, not from the swap's own
bookkeeping: a swapped block is resident when its tensors no longer live in the offload copies."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from wan_core.memory import BlockSwap, block_swap_of, check_swap_options, enable_block_swap

from .helpers import CFG, inputs, load


def storage_ptrs(block: nn.Module) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in list(block.parameters()) + list(block.buffers())}


class ResidentCounter:
    """Counts, at every block start, the swapped blocks whose tensors are away from their offload storage."""

    def __init__(self, model, swap: BlockSwap):
        self.home = {i: storage_ptrs(model.blocks[i]) for i in swap.swapped}
        self.model = model
        self.counts: list[int] = []
        for block in model.blocks:  # registered after the swap's hooks, so they run after them
            block.register_forward_pre_hook(self.count)

    def count(self, module, args):
        self.counts.append(sum(not (storage_ptrs(self.model.blocks[i]) & self.home[i]) for i in self.home))


@pytest.mark.parametrize("n,prefetch", [(6, 0), (6, 1), (6, 2), (3, 1), (1, 3)])
def test_output_identical_and_resident_bounded(n, prefetch):
    x, t, ctx = inputs()
    with torch.no_grad():
        ref = load()(x, t, ctx)
        model = load()
        swap = enable_block_swap(model, n, prefetch, device="cpu")
        assert swap is not None and swap.swapped == list(range(6 - n, 6))
        counter = ResidentCounter(model, swap)
        out = model(x, t, ctx)
        out2 = model(x, t, ctx)  # a second step reuses the same offload copies
    assert torch.equal(out, ref) and torch.equal(out2, ref)
    assert max(counter.counts) <= prefetch + 1
    assert max(counter.counts) == min(prefetch + 1, n)  # the window is used, not just bounded
    assert swap.stats.loads == 2 * n and swap.stats.max_resident <= prefetch + 1
    assert swap.resident() == [] and all(not (storage_ptrs(model.blocks[i]) ^ counter.home[i])
                                         for i in swap.swapped)  # all dropped after the forward


def test_fp8_blocks_travel_as_fp8():
    x, t, ctx = inputs()
    with torch.no_grad():
        ref = load(weights="fp8_scaled", dtype=torch.float32)(x, t, ctx)
        model = load(weights="fp8_scaled", dtype=torch.float32)
        swap = enable_block_swap(model, 4, 1, device="cpu")
        seen = []
        model.blocks[5].register_forward_pre_hook(
            lambda m, a: seen.append((m.self_attn.q.weight.dtype, m.self_attn.q.weight_scale.dtype)))
        out = model(x, t, ctx)
    assert torch.equal(out, ref)
    assert seen == [(torch.float8_e4m3fn, torch.float32)]
    assert swap.stats.block_bytes < sum(p.numel() * 4 for p in model.blocks[0].parameters()) / 2


def test_modules_added_after_setup_travel_with_their_block():
    """A LoRA-style extra submodule attached to a swapped block after the swap moves with it."""
    model = load()
    swap = enable_block_swap(model, 2, 1, device="cpu")
    extra = nn.Linear(CFG.dim, CFG.dim)
    model.blocks[5].extra = extra
    home = extra.weight.data_ptr()
    during = []
    model.blocks[5].register_forward_pre_hook(lambda m, a: during.append(m.extra.weight.data_ptr()))
    x, t, ctx = inputs()
    with torch.no_grad():
        model(x, t, ctx)
    assert during and during[0] != home and extra.weight.data_ptr() == home
    swap.remove()
    assert block_swap_of(model) is None


def test_text_kv_through_swapped_blocks():
    ctx = torch.randn(1, CFG.text_len, CFG.dim)
    with torch.no_grad():
        ref = load().text_kv(ctx)
        model = load()
        enable_block_swap(model, 3, 1, device="cpu")
        kv = model.text_kv(ctx)
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(kv, ref))
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(kv, ref))
    assert block_swap_of(model).resident() == []


def test_remove_restores_plain_model():
    x, t, ctx = inputs()
    model = load()
    swap = enable_block_swap(model, 6, 2, device="cpu")
    swap.remove()
    assert "text_kv" not in vars(model)
    with torch.no_grad():
        assert torch.equal(model(x, t, ctx), load()(x, t, ctx))


@pytest.mark.parametrize("args,match", [
    ((41, 1, "cpu", 40), "exceeds the model's 40 blocks"),
    ((5, -1, "cpu", 40), "prefetch must be an integer >= 0"),
    ((-2, 1, "cpu", 40), "blocks_to_swap must be an integer >= 0"),
    ((5, 1, "mps", 40), "CUDA devices only"),
])
def test_bad_options_one_line(args, match):
    with pytest.raises(ValueError, match=match) as e:
        check_swap_options(*args)
    assert "\n" not in str(e.value)


def test_cpu_only_is_a_noted_no_op():
    note = check_swap_options(10, 1, "cpu", 30)
    assert "no-op" in note and "\n" not in note
    assert check_swap_options(0, 1, "cpu", 30) == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_absent_cuda_device_refused():
    with pytest.raises(ValueError, match="CUDA is not available"):
        check_swap_options(10, 1, "cuda", 30)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_swap_identical():
    x, t, ctx = inputs()
    with torch.no_grad():
        ref = load(device="cuda")(x.cuda(), t.cuda(), [c.cuda() for c in ctx])
        model = load()
        swap = enable_block_swap(model, 4, 2, device="cuda")
        counter = ResidentCounter(model, swap)
        out = model(x.cuda(), t.cuda(), [c.cuda() for c in ctx])
    assert torch.equal(out, ref)
    assert max(counter.counts) <= 3


def test_weights_replaced_while_offloaded_travel():
    """A LoRA merge replaces a swapped block's weight tensors between runs: the new ones are used."""
    x, t, ctx = inputs()
    with torch.no_grad():
        model = load()
        enable_block_swap(model, 3, 1, device="cpu")
        model(x, t, ctx)
        ref = load()
        for m in (model, ref):  # the same "merge" on both: a new tensor, not an in-place change
            w = m.blocks[4].ffn[0].weight
            w.data = w.data + 0.01
        out = model(x, t, ctx)
        expected = ref(x, t, ctx)
    assert torch.equal(out, expected)
