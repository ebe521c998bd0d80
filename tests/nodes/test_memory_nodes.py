"""The loader node's memory inputs (docs/memory.md): blocks_to_swap / prefetch checked before queueing against
the file's block count, a one-line note on CPU-only runs, and the host adapter handing ComfyUI's model
management only the resident parts of a block-swapped DiT."""
from __future__ import annotations

from importlib import import_module

import pytest
import torch

from wan_core.memory import enable_block_swap


@pytest.fixture(scope="module")
def mods(pack):
    models = import_module(f"{pack.__name__}.nodes.models")
    assert models.register_demo_model(), "the built-in demo weights are needed (wan_core/demo/weights)"
    return models, import_module(f"{pack.__name__}.nodes.host")


def test_too_many_blocks_refused_before_queueing(mods):
    models, _ = mods
    message = models.validate_model(models.DEMO_NAME, blocks_to_swap=7, prefetch=1)
    assert isinstance(message, str) and "exceeds the model's 6 blocks" in message and "\n" not in message
    assert models.validate_model(models.DEMO_NAME, blocks_to_swap=6, prefetch=1) is True


def test_inputs_declared(mods):
    models, _ = mods
    names = {i.name: i for i in models.MODEL_LOADER.inputs}
    assert names["blocks_to_swap"].default == 0 and names["prefetch"].default == 1
    assert names["compile_blocks"].default is False


@pytest.mark.skipif(torch.cuda.is_available(), reason="the note is for CPU-only runs")
def test_cpu_only_swap_is_a_note_and_the_model_runs(mods, caplog):
    models, _ = mods
    with caplog.at_level("INFO", logger="wancore"):
        (dit,) = models.load_model(models.DEMO_NAME, blocks_to_swap=2, prefetch=1)
    assert getattr(dit, "block_swap", None) is None
    assert any("no-op on a CPU-only run" in r.getMessage() for r in caplog.records)


def test_host_manages_only_resident_parts(mods):
    _, host = mods
    from wan_core.demo import tiny_random_models

    dit, _, _ = tiny_random_models(seed=0)
    swap = enable_block_swap(dit, 1, 1, device="cpu", place_resident=False)
    swapped = {id(p) for p in dit.blocks[len(dit.blocks) - 1].parameters()}
    managed = host._Managed(dit)
    ids = {id(p) for p in managed.parameters()}
    assert ids and not ids & swapped
    assert len(ids) + len(swapped) == len({id(p) for p in dit.parameters()})
    assert host._swap_headroom(dit) == 2 * swap.stats.block_bytes > 0
    with host.on_device(dit, torch.device("cpu")) as model:  # outside ComfyUI: a plain move of the resident parts
        assert model is dit


def test_the_demo_vace_model_is_listed_and_loads_with_its_branch(mods):
    """``wancore-demo-vace (built-in)``: the demo DiT + its trained VACE branch, one file in the user's cache."""
    models, host = mods
    assert host.list_models("diffusion_models")[:2] == [models.DEMO_NAME, models.DEMO_VACE_NAME]
    assert models.validate_model(models.DEMO_VACE_NAME) is True
    (dit,) = models.load_model(models.DEMO_VACE_NAME, weight_dtype="fp32")
    assert dit.config.vace_layers == (0, 2, 4) and dit.vace_blocks is not None
