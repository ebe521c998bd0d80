"""Offload policies and memory accounting (docs/memory.md sections 3 and 5)."""
from __future__ import annotations

import pytest
import torch

from wan_core.memory import enable_block_swap
from wan_core.memory.accounting import MemoryMeter, model_bytes, reset_peak_rss
from wan_core.memory.offload import OffloadPolicy, move, release

from .helpers import load


def test_policy_refuses_unknown_values_in_one_line():
    with pytest.raises(ValueError, match="text_encoder offload must be one of release, keep, cpu") as e:
        OffloadPolicy(text_encoder="gpu")  # type: ignore[arg-type]
    assert "\n" not in str(e.value)


def test_load_devices():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    default = OffloadPolicy()
    assert [default.load_device(p, cuda) for p in ("text_encoder", "vae", "dit")] == [cuda, cpu, cpu]
    keep = OffloadPolicy(text_encoder="keep", vae="keep", dit="keep")
    assert [keep.load_device(p, cuda) for p in ("text_encoder", "vae", "dit")] == [cuda, cuda, cuda]
    assert OffloadPolicy(text_encoder="cpu").load_device("text_encoder", cuda) == cpu
    assert OffloadPolicy(text_encoder="cpu").load_device("dit", cuda) == cuda  # nothing else holds the GPU
    assert all(default.load_device(p, cpu) == cpu for p in ("text_encoder", "vae", "dit"))


def test_release_frees_the_weights_even_when_referenced():
    model = load()
    other_reference = model
    release(model)
    assert all(p.is_meta for p in other_reference.parameters())
    assert model_bytes(model, torch.device("cpu")) == 0


def test_move_of_a_swapped_dit_moves_only_the_resident_parts():
    """'meta' stands in for the GPU: what moves is visible on a CPU-only machine."""
    model = load()
    swap = enable_block_swap(model, 2, 1, device="cpu")
    move(model, "meta")
    assert model.patch_embedding.weight.is_meta and model.blocks[3].ffn[0].weight.is_meta
    assert all(not p.is_meta for i in swap.swapped for p in model.blocks[i].parameters())
    release(model)  # a swapped model is released with its offloaded blocks
    assert all(p.is_meta for p in model.parameters()) and getattr(model, "block_swap", None) is None


@pytest.mark.skipif(not reset_peak_rss(), reason="needs Linux /proc/self/clear_refs to reset the peak RSS")
def test_meter_sees_a_stage_allocation():
    meter = MemoryMeter("cpu")
    with meter.stage("small"):
        torch.ones(1 << 10)
    with meter.stage("big", weights=123):
        t = torch.ones(64 << 18)  # 64 MiB
        del t
    small, big = meter.stages
    assert big.peak - big.start >= 60 << 20 > small.peak - small.start
    assert meter.lines()[1].startswith("memory, big: peak ") and "weights 0 MiB" in meter.lines()[1]
