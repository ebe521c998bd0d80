"""The native patches on ComfyUI's own VACE model (``VaceWanModel``, comfy/ldm/wan/model.py; docs/vace.md section
3.5); skipped when ``comfy`` cannot be imported (run with ``PYTHONPATH=/path/to/ComfyUI``, as
tests/nodes/test_native_comfy.py).

* ComfyUI builds a ``VaceWanModel`` from a tiny random VACE state dict in official names; it equals WanCore's
  VACE DiT on the same weights (<= 1e-4), the patch nodes count its main blocks (not the VACE blocks), and the
  attention patch with sdpa / none is bit-identical;
* block-stack residual reuse (MagCache) on it: a reused step with the computed step's input returns exactly the
  computed output: the VACE hints, added by ComfyUI after each main block outside the block patches, are not added
  a second time on top of the reused residual.
"""
from __future__ import annotations

import copy

import pytest
import torch

from .test_native_comfy import TEXT_LEN, comfy, native_forward, native_patcher

pytestmark = pytest.mark.skipif(comfy is None, reason="ComfyUI (comfy) is not importable")

from nodes import native  # noqa: E402
from nodes.native import NativeCache  # noqa: E402
from wan_core.cache import CacheConfig, Calibration  # noqa: E402
from wan_core.dit.model import WanDiT  # noqa: E402

from ..attention.helpers import CFG as _CFG  # noqa: E402
from ..attention.helpers import random_dit_state  # noqa: E402

CFG = _CFG.replace(text_dim=4096, name="tiny-native-vace", vace_layers=(0, 2, 4), vace_in_dim=96)


@pytest.fixture(scope="module")
def weights():
    return random_dit_state(CFG, seed=4)  # before_proj / after_proj random too (zero in a fresh official model)


def vace_inputs(seed=6):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 16, 2, 8, 10, generator=g)
    ctx = torch.zeros(1, TEXT_LEN, CFG.text_dim)
    ctx[:, :9] = torch.randn(1, 9, CFG.text_dim, generator=g)
    vc = torch.randn(1, 96, 2, 8, 10, generator=g)
    return x, torch.tensor([700.0]), ctx, vc


def native_vace_forward(patcher, x, t, ctx, vc, strength, extra=None):
    """ComfyUI's VACE forward: ``vace_context`` ``[B, inputs, 96, F, H, W]``, one strength per input."""
    to = copy.copy(patcher.model_options.get("transformer_options", {}))
    to["wrappers"] = copy.copy(patcher.wrappers)
    to.update(extra or {})
    with torch.no_grad():
        return patcher.model.diffusion_model(x, t, ctx, vace_context=vc[:, None], vace_strength=[strength],
                                             transformer_options=to).float()


def test_comfys_vace_model_equals_ours_and_the_patches_count_its_main_blocks(weights, monkeypatch):
    m = native_patcher(weights)
    dm = m.model.diffusion_model
    assert type(dm).__name__ == "VaceWanModel" and len(dm.blocks) == 6 and len(dm.vace_blocks) == 3
    x, t, ctx, vc = vace_inputs()
    ours = WanDiT(CFG)
    ours.load_state_dict(weights)
    with torch.no_grad():
        expected = ours(x, t, ctx, vace_context=vc, vace_scale=0.8)
    ref = native_vace_forward(m, x, t, ctx, vc, 0.8)
    assert (ref - expected).abs().max().item() <= 1e-4
    assert (ref - native_vace_forward(m, x, t, ctx, vc, 0.0)).abs().max().item() > 1e-3  # the hints matter
    shown: list[str] = []
    monkeypatch.setattr(native.host, "show_text", shown.append)
    patched = native.patch_attention(m, "sdpa", "osp13", 4)[0]
    assert shown[-1].endswith("on VaceWanModel (6 blocks)")  # the main blocks; the VACE blocks are not counted
    forced = m.clone()
    forced.model_options["transformer_options"]["optimized_attention_override"] = native.NativeAttention()
    assert torch.equal(native_vace_forward(forced, x, t, ctx, vc, 0.8), ref)
    assert torch.isfinite(native_vace_forward(patched, x, t, ctx, vc, 0.8)).all()


def test_block_reuse_does_not_add_the_vace_hints_twice(weights):
    m = native_patcher(weights)
    dm = m.model.diffusion_model
    steps = 6
    cal = Calibration(model=None, steps=steps, mag_cond=(1.0,) * steps, mag_uncond=(1.0,) * steps)
    run = NativeCache(CacheConfig.preset("magcache", threshold=5.0, calibration=cal)).start(
        native.native_config(dm), steps, 1.0)
    patched = m.clone()
    for i in range(len(dm.blocks)):
        patched.set_model_patch_replace(native.block_patch(i), "dit", "double_block", i)
    patched.add_wrapper_with_key(comfy.patcher_extension.WrappersMP.DIFFUSION_MODEL, "wancore_test",
                                 native.diffusion_model_wrapper)
    x, t, ctx, vc = vace_inputs()
    sig = torch.linspace(1.0, 0.0, steps + 1)
    outs = [native_vace_forward(patched, x, t, ctx, vc, 0.8, {"sigmas": sig[i:i + 1], "sample_sigmas": sig,
                                                             "cond_or_uncond": [0], "wancore_cache": run})
            for i in range(steps)]  # the same input at every step: a reuse must give the computed output back
    status = [s["cond"] for s in run.report.status]
    run.finish()
    assert status[0] == "computed" and "reused" in status, status
    for out, s in zip(outs, status):
        torch.testing.assert_close(out, outs[0], rtol=0, atol=1e-5, msg=s)
