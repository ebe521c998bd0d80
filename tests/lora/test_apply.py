"""LoRA application beyond the diffusers parity: full-weight deltas (.diff/.diff_b) against a hand computation,
fp8 (merged into scaled-fp8 weights stays fp8 and within fp8 tolerance of the bf16 merge), views with their
own stacks, no file reread on a strength change, image-to-video layers on an I2V model (docs/lora.md
sections 1-2)."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from wan_core import apply_lora, load_dit, remove_loras
from wan_core.config import DiTConfig
from wan_core.dit.model import WanDiT
from wan_core.lora import activate_loras, formats, prepare_lora, with_lora
from wan_core.quant.fp8 import FP8Linear, parameter_bytes

from .helpers import CFG, expected_delta, official_file, random_lora


def tiny(cfg: DiTConfig = CFG, seed: int = 0) -> WanDiT:
    torch.manual_seed(seed)
    model = WanDiT(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
    return model


def inputs(cfg: DiTConfig = CFG):
    g = torch.Generator().manual_seed(5)
    return torch.randn(1, 16, 2, 4, 4, generator=g), torch.tensor([500.0]), [torch.randn(6, cfg.text_dim, generator=g)]


def test_full_deltas_add_strength_times_diff():
    """Distilled LoRAs' .diff (weights, norms, modulation) and .diff_b (biases): W' = W + strength * diff."""
    model = tiny()
    g = torch.Generator().manual_seed(1)
    targets = {"blocks.0.self_attn.q.weight": "blocks.0.self_attn.q.diff",
               "blocks.1.ffn.2.bias": "blocks.1.ffn.2.diff_b",
               "blocks.0.norm3.weight": "blocks.0.norm3.diff",
               "blocks.1.modulation": "blocks.1.modulation.diff",
               "head.head.weight": "head.head.diff",
               "patch_embedding.weight": "patch_embedding.diff"}
    params = dict(model.named_parameters())
    sd = {f"diffusion_model.{key}": torch.randn(params[p].shape, generator=g) for p, key in targets.items()}
    before = {p: params[p].detach().clone() for p in targets}
    for merge in (True, False):
        applied = apply_lora(model, sd, strength=0.5, merge=merge)
        assert applied.parameters == len(targets) and not applied.unused
        for p, key in targets.items():
            if merge or p in ("blocks.0.norm3.weight", "blocks.1.modulation", "patch_embedding.weight"):
                torch.testing.assert_close(params[p].detach(), before[p] + 0.5 * sd[f"diffusion_model.{key}"],
                                           rtol=0, atol=1e-6)
        remove_loras(model)


def test_low_rank_merge_is_the_hand_computation():
    model = tiny()
    lora = random_lora(seed=3)
    w = model.blocks[1].cross_attn.v.weight.detach().double().clone()
    apply_lora(model, official_file(lora, "lora_down", "lora_up"), strength=-1.5)
    got = model.blocks[1].cross_attn.v.weight.detach().double()
    torch.testing.assert_close(got, w - 1.5 * expected_delta(lora["blocks.1.cross_attn.v"]), rtol=0, atol=1e-5)


def clones(sd):  # load_dit assigns the given tensors, and a merge changes them in place
    return {k: v.clone() for k, v in sd.items()}


FP8_CFG = DiTConfig(dim=128, ffn_dim=256, num_heads=2, num_layers=2, text_dim=32, name="tiny-lora-fp8")


@pytest.fixture(scope="module")
def fp8_setup():
    model = tiny(FP8_CFG, seed=2)
    sd = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    return sd, official_file(random_lora(FP8_CFG, rank=8, alpha=8.0, seed=4, bias=True))


@pytest.mark.parametrize("weights, granularity", [("fp8_scaled", "tensor"), ("fp8_scaled", "channel"),
                                                  ("fp8_e4m3fn", "tensor")])
def test_fp8_merge_stays_fp8_and_close_to_bf16_merge(fp8_setup, weights, granularity):
    sd, lora = fp8_setup
    x, t, ctx = inputs(FP8_CFG)
    bf16 = load_dit(clones(sd), dtype=torch.bfloat16, config=FP8_CFG)
    apply_lora(bf16, lora)
    fp8 = load_dit(clones(sd), dtype=torch.bfloat16, config=FP8_CFG, weights=weights, fp8_granularity=granularity)
    plain_fp8 = load_dit(clones(sd), dtype=torch.bfloat16, config=FP8_CFG, weights=weights,
                         fp8_granularity=granularity)
    scale_shape = tuple(fp8.blocks[0].self_attn.q.weight_scale.shape)
    state = {k: v.clone() for k, v in fp8.state_dict().items()}
    size = parameter_bytes(fp8)
    apply_lora(fp8, lora)
    assert parameter_bytes(fp8) == size
    layer = fp8.blocks[0].self_attn.q
    assert isinstance(layer, FP8Linear) and layer.weight.dtype == torch.float8_e4m3fn
    assert tuple(layer.weight_scale.shape) == scale_shape  # the granularity is kept
    with torch.no_grad():
        ref, got, base = bf16(x, t, ctx), fp8(x, t, ctx), plain_fp8(x, t, ctx)
    lora_effect = (ref - base).abs().max()
    error = (got - ref).abs().max()
    assert error < 0.1 * lora_effect, (error, lora_effect)  # fp8 rounding, well below what the LoRA changes
    remove_loras(fp8)
    after = fp8.state_dict()
    assert all(torch.equal(state[k].view(torch.uint8) if state[k].dtype == torch.float8_e4m3fn else state[k],
                           after[k].view(torch.uint8) if after[k].dtype == torch.float8_e4m3fn else after[k])
               for k in state)


def test_unmerged_on_fp8_keeps_the_bits(fp8_setup):
    sd, lora = fp8_setup
    fp8 = load_dit(clones(sd), dtype=torch.bfloat16, config=FP8_CFG, weights="fp8_scaled")
    w = fp8.blocks[0].ffn[0].weight.detach().view(torch.uint8).clone()
    apply_lora(fp8, lora, merge=False)
    assert torch.equal(fp8.blocks[0].ffn[0].weight.detach().view(torch.uint8), w)


def test_views_carry_their_own_stack():
    """Two views of one loaded DiT with different strengths: activation switches the shared weights."""
    base = tiny()
    x, t, ctx = inputs()
    with torch.no_grad():
        plain = base(x, t, ctx)
    lora = official_file(random_lora(seed=6))
    a = with_lora(base, prepare_lora(base, lora, 1.0))
    b = with_lora(base, prepare_lora(base, lora, 0.3, merge=False))
    with torch.no_grad():
        activate_loras(a)
        out_a = a(x, t, ctx)
        activate_loras(b)
        out_b = b(x, t, ctx)
        activate_loras(a)
        again_a = a(x, t, ctx)
        activate_loras(base)
        again_plain = base(x, t, ctx)
    assert torch.equal(out_a, again_a) and torch.equal(plain, again_plain)
    assert not torch.equal(out_a, out_b) and not torch.equal(out_b, plain)


def test_strength_change_does_not_reread_the_file(tmp_path, monkeypatch):
    path = tmp_path / "style.safetensors"
    save_file(official_file(random_lora(seed=7)), path)
    model = tiny()
    apply_lora(model, path, 1.0)
    calls = []
    monkeypatch.setattr(formats, "open_checkpoint", lambda *a, **k: calls.append(a))
    remove_loras(model)
    apply_lora(model, path, 0.5)
    assert calls == []


def test_i2v_layers_patch_an_i2v_model():
    cfg = DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32, in_dim=36, image_dim=24)
    model = tiny(cfg)
    g = torch.Generator().manual_seed(2)
    sd = {"diffusion_model.blocks.1.cross_attn.k_img.lora_A.weight": torch.randn(2, 64, generator=g),
          "diffusion_model.blocks.1.cross_attn.k_img.lora_B.weight": torch.randn(64, 2, generator=g),
          "transformer.blocks.0.attn2.add_v_proj.lora_A.weight": torch.randn(2, 64, generator=g),
          "transformer.blocks.0.attn2.add_v_proj.lora_B.weight": torch.randn(64, 2, generator=g)}
    before = model.blocks[1].cross_attn.k_img.weight.detach().clone()
    applied = apply_lora(model, sd)
    patched = {p.param for p in applied.patches}
    assert patched == {"blocks.1.cross_attn.k_img.weight", "blocks.0.cross_attn.v_img.weight"}
    assert not torch.equal(model.blocks[1].cross_attn.k_img.weight, before)


@pytest.mark.parametrize("merge", [True, False], ids=["merged", "unmerged"])
def test_lora_with_block_swap(merge):
    """Block swap (wan_core.memory.swap, the CPU as both devices): swapped blocks point back at their offload
    copies between runs, so a merge must land there; output equal to the same LoRA without swap, and
    remove_loras restores the swapped blocks too."""
    from wan_core.memory.swap import enable_block_swap

    x, t, ctx = inputs()
    lora = official_file(random_lora(seed=11, bias=True))
    plain_model, swapped = tiny(seed=4), tiny(seed=4)
    with torch.no_grad():
        plain = plain_model(x, t, ctx)
    apply_lora(plain_model, lora, merge=merge)
    enable_block_swap(swapped, 1, prefetch=1, device="cpu", offload_device="cpu")
    with torch.no_grad():
        swapped(x, t, ctx)  # one run with the swap in place before the LoRA comes
    apply_lora(swapped, lora, merge=merge)
    with torch.no_grad():
        expected = plain_model(x, t, ctx)
        assert torch.equal(swapped(x, t, ctx), expected)
        assert torch.equal(swapped(x, t, ctx), expected)  # a second run: the blocks came back from offload
    remove_loras(swapped)
    with torch.no_grad():
        assert torch.equal(swapped(x, t, ctx), plain)


class _Boom(RuntimeError):
    pass


def _fail_once(module):
    """A forward pre-hook on ``module`` that raises once (an out-of-memory inside a swapped block, say)."""
    def hook(mod, args):
        handle.remove()
        raise _Boom("out of memory")
    handle = module.register_forward_pre_hook(hook)


@pytest.mark.parametrize("change", ["remove", "strength"])
def test_lora_after_error_in_swapped_block(change):
    """An error inside a swapped block while a merged LoRA is active leaves the block's working copy resident;
    removing the LoRA (or changing its strength) must still reach the stored copy the next run brings back."""
    from wan_core.memory.swap import enable_block_swap

    x, t, ctx = inputs()
    lora = official_file(random_lora(seed=11, bias=True))
    reference, swapped = tiny(seed=4), tiny(seed=4)
    enable_block_swap(swapped, 1, prefetch=0, device="cpu", offload_device="cpu")
    view = with_lora(swapped, prepare_lora(swapped, lora, strength=1.0))
    activate_loras(view)
    _fail_once(swapped.blocks[1].ffn)
    with torch.no_grad(), pytest.raises(_Boom):
        view(x, t, ctx)
    if change == "remove":
        remove_loras(swapped)
        target = swapped
    else:
        target = with_lora(swapped, prepare_lora(swapped, lora, strength=0.5))
        activate_loras(target)
        apply_lora(reference, lora, strength=0.5)
    with torch.no_grad():
        expected = reference(x, t, ctx)
        assert torch.equal(target(x, t, ctx), expected)
        assert torch.equal(target(x, t, ctx), expected)
