"""LoRA parity: ours vs diffusers' ``WanPipeline.load_lora_weights`` (peft) on a tiny WanTransformer3DModel,
fp32, the same random LoRA written in each layout (docs/lora.md; acceptance of issue 13: rel <= 1e-5)."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from wan_core import apply_lora, load_dit, remove_loras

from ..dit.helpers import diffusers_reference
from .helpers import CFG, diffusers_file, kohya_file, official_file, random_lora

LAYOUTS = {
    # name: (writer, what diffusers is given)
    "official-lora_A": (lambda lo: official_file(lo), None),
    "official-lora_down": (lambda lo: official_file(lo, "lora_down", "lora_up"), None),
    "comfy-prefixed": (lambda lo: official_file(lo, prefix="model.diffusion_model."), "official-lora_A"),
    "kohya": (kohya_file, None),
    "diffusers": (diffusers_file, None),
}


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.fixture(scope="module")
def setup():
    ref = diffusers_reference(CFG, seed=3)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(1, 16, 2, 4, 4, generator=g)
    ctx = torch.randn(7, CFG.text_dim, generator=g)
    padded = torch.zeros(1, 512, CFG.text_dim)
    padded[0, :7] = ctx
    t = torch.tensor([640.0])
    dsd = {k: v.detach().clone().contiguous() for k, v in ref.state_dict().items()}
    return ref, dsd, (x, t, [ctx], padded)


def reference_output(setup, files_and_strengths) -> torch.Tensor:
    """diffusers: a fresh WanTransformer3DModel with the LoRAs loaded by WanPipeline.load_lora_weights."""
    from diffusers import WanPipeline

    _, dsd, (x, t, _ctx, padded) = setup
    ref = diffusers_reference(CFG, seed=3)
    ref.load_state_dict(dsd)
    pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=None, scheduler=None, transformer=ref)
    names = []
    for i, (sd, _) in enumerate(files_and_strengths):
        if isinstance(sd, dict):
            pipe.load_lora_weights({k: v.clone() for k, v in sd.items()}, adapter_name=f"l{i}")
        else:  # a file: diffusers reads its header too
            pipe.load_lora_weights(str(sd.parent), weight_name=sd.name, adapter_name=f"l{i}")
        names.append(f"l{i}")
    pipe.set_adapters(names, [s for _, s in files_and_strengths])
    with torch.no_grad():
        return ref(hidden_states=x, timestep=t, encoder_hidden_states=padded, return_dict=False)[0]


def ours(setup):
    _, dsd, _ = setup
    # clones: load_dit assigns the given tensors, and a merge changes them in place
    return load_dit({k: v.clone() for k, v in dsd.items()}, dtype=torch.float32, config=CFG)


def run(model, setup) -> torch.Tensor:
    x, t, ctx, _ = setup[2]
    with torch.no_grad():
        return model(x, t, ctx)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("merge", [True, False], ids=["merged", "unmerged"])
def test_matches_diffusers(setup, tmp_path, layout, merge):
    lora = random_lora(seed=1)
    writer, ref_layout = LAYOUTS[layout]
    path = tmp_path / f"{layout}.safetensors"
    save_file(writer(lora), path)
    ref_sd = (LAYOUTS[ref_layout][0] if ref_layout else writer)(lora)
    expected = reference_output(setup, [(ref_sd, 0.7)])
    model = ours(setup)
    applied = apply_lora(model, path, strength=0.7, merge=merge)
    assert applied.parameters == 2 * 10 and not applied.unused
    out = run(model, setup)
    assert rel_err(out, expected) <= 1e-5
    assert rel_err(out, run(ours(setup), setup)) > 1e-2  # the LoRA changes something


def test_bias_deltas_match_diffusers(setup):
    """``.diff_b`` (bias changes of distilled LoRAs): diffusers turns them into peft's lora_B bias."""
    lora = random_lora(seed=2, bias=True)
    expected = reference_output(setup, [(official_file(lora), 0.6)])
    for merge in (True, False):
        model = ours(setup)
        apply_lora(model, official_file(lora), strength=0.6, merge=merge)
        assert rel_err(run(model, setup), expected) <= 1e-5


def test_stacked_loras_match_diffusers(setup):
    a, b = random_lora(seed=4), random_lora(seed=5, rank=2, alpha=None)
    unused = kohya_file(random_lora(seed=5, rank=2, alpha=2.0))  # diffusers at weight 0 = ours not applied
    expected = reference_output(setup, [(official_file(a), 0.5), (unused, 0.0), (diffusers_file(b), -0.8)])
    model = ours(setup)
    apply_lora(model, official_file(a), strength=0.5)
    apply_lora(model, diffusers_file(b), strength=-0.8, merge=False)
    assert rel_err(run(model, setup), expected) <= 1e-5


def test_merged_equals_unmerged(setup):
    sd = official_file(random_lora(seed=6, bias=True))
    merged, unmerged = ours(setup), ours(setup)
    apply_lora(merged, sd, strength=1.3)
    apply_lora(unmerged, sd, strength=1.3, merge=False)
    assert rel_err(run(merged, setup), run(unmerged, setup)) <= 1e-5


@pytest.mark.parametrize("merge", [True, False], ids=["merged", "unmerged"])
def test_strength_zero_is_no_lora_exactly(setup, merge):
    plain = run(ours(setup), setup)
    model = ours(setup)
    apply_lora(model, official_file(random_lora(seed=7, bias=True)), strength=0.0, merge=merge)
    assert torch.equal(run(model, setup), plain)


def test_remove_restores_bit_for_bit(setup):
    model = ours(setup)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    plain = run(model, setup)
    apply_lora(model, official_file(random_lora(seed=8, bias=True)), strength=0.9)
    apply_lora(model, kohya_file(random_lora(seed=9)), strength=0.4, merge=False)
    assert not torch.equal(run(model, setup), plain)
    remove_loras(model)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert torch.equal(run(model, setup), plain)


def test_diffusers_saved_file_with_header_alpha(setup, tmp_path):
    """A LoRA saved by diffusers' ``save_lora_weights`` with lora_alpha != r (kept in the safetensors header as
    ``lora_adapter_metadata``, not in the keys) and an alpha_pattern for one module."""
    from diffusers import WanPipeline
    from peft import LoraConfig, get_peft_model_state_dict

    ref = diffusers_reference(CFG, seed=3)
    config = LoraConfig(r=4, lora_alpha=8, alpha_pattern={"blocks.1.ffn.net.2": 2},
                        target_modules=["to_q", "to_k", "to_v", "to_out.0", "net.0.proj", "net.2"],
                        init_lora_weights=False)
    ref.add_adapter(config)
    WanPipeline.save_lora_weights(tmp_path, transformer_lora_layers=get_peft_model_state_dict(ref),
                                  transformer_lora_adapter_metadata=config.to_dict())
    path = tmp_path / "pytorch_lora_weights.safetensors"
    from safetensors.torch import load_file

    expected = reference_output(setup, [(path, 1.0)])
    model = ours(setup)
    apply_lora(model, path)
    assert rel_err(run(model, setup), expected) <= 1e-5
    keys_only = ours(setup)  # the header is what carries alpha: the keys alone (scale 1) give another output
    apply_lora(keys_only, load_file(path))
    assert rel_err(run(keys_only, setup), expected) > 1e-3
