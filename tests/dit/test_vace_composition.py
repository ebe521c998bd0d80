"""A VACE DiT with what else runs on a DiT (docs/vace.md sections 1.3 and 1.4): config detection and presets,
fp8 loading, LoRA on the VACE blocks, block swap, the exact text-K/V cache, the hints under a batched CFG cache
forward, and the meta-device key lists of the released 1.3B / 14B VACE checkpoints (derived from diffusers'
``WanVACETransformer3DModel`` structure)."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from wan_core import load_dit
from wan_core.cache import start_session
from wan_core.config import DIT_PRESETS, DiTConfig, detect_dit_config
from wan_core.dit.keys import official_to_diffusers
from wan_core.dit.model import WanDiT
from wan_core.dit.moe import WanMoE
from wan_core.lora.stack import apply_lora
from wan_core.memory import enable_block_swap
from wan_core.sampling.hooks import BRANCH_BATCHED

CFG = DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=6, text_dim=32, vace_layers=(0, 3), vace_in_dim=96)


def random_vace(cfg: DiTConfig = CFG, seed: int = 0) -> WanDiT:
    torch.manual_seed(seed)
    model = WanDiT(cfg).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():  # before_proj / after_proj random too (the official init zeroes them)
            p.copy_(torch.randn(p.shape, generator=g) * (p[0].numel() ** -0.5 if p.dim() > 1 else 0.2))
    return model


def inputs(batch: int = 2, seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 16, 2, 4, 4, generator=g)
    ctx = [torch.randn(6 + i, CFG.text_dim, generator=g) for i in range(batch)]
    vc = torch.randn(batch, 96, 2, 4, 4, generator=g)
    return x, torch.tensor([700.0, 200.0][:batch]), ctx, vc


@pytest.fixture(scope="module")
def model():
    return random_vace()


def test_presets_are_detected_from_their_shapes():
    for name, layers in (("wan2.1-vace-1.3b", tuple(range(0, 30, 2))), ("wan2.1-vace-14b", tuple(range(0, 40, 5)))):
        with torch.device("meta"):
            sd = WanDiT(DIT_PRESETS[name]).state_dict()
        cfg = detect_dit_config({k: tuple(v.shape) for k, v in sd.items()})
        assert cfg == DIT_PRESETS[name] and cfg.vace_layers == layers and cfg.vace_in_dim == 96


def _diffusers_meta_keys(preset: str) -> dict[str, tuple[int, ...]]:
    """Key names and shapes of diffusers' WanVACETransformer3DModel at the released sizes (meta device)."""
    from diffusers import WanVACETransformer3DModel

    c = DIT_PRESETS[preset]
    with torch.device("meta"):
        ref = WanVACETransformer3DModel(
            num_attention_heads=c.num_heads, attention_head_dim=c.head_dim, ffn_dim=c.ffn_dim,
            num_layers=c.num_layers, vace_layers=list(c.vace_layers), vace_in_channels=c.vace_in_dim)
    return {k: tuple(v.shape) for k, v in ref.state_dict().items()}


@pytest.mark.parametrize("preset,keys,vace_keys", [("wan2.1-vace-1.3b", 825 + 15 * 29 + 4, 15 * 29 + 4),
                                                   ("wan2.1-vace-14b", 1095 + 8 * 29 + 4, 8 * 29 + 4)])
def test_released_key_lists_on_the_meta_device(preset, keys, vace_keys):
    """Our full-size VACE models, renamed by our rules, have exactly diffusers' keys and shapes; counts: the T2V
    model's keys + per VACE block its 27 block tensors + after_proj (2), + before_proj (2), vace_patch_embedding (2)."""
    with torch.device("meta"):
        ours = {k: tuple(v.shape) for k, v in WanDiT(DIT_PRESETS[preset]).state_dict().items()}
    assert len(ours) == keys and sum(k.startswith("vace") for k in ours) == vace_keys
    assert {official_to_diffusers(k): s for k, s in ours.items()} == _diffusers_meta_keys(preset)
    assert ours["vace_patch_embedding.weight"] == (DIT_PRESETS[preset].dim, 96, 1, 2, 2)


def test_inference_refuses_a_block_count_it_cannot_place(model):
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items() if not k.startswith("vace_blocks.1.")}
    shapes.update({k.replace("vace_blocks.1.", f"vace_blocks.{i}."): tuple(v.shape)
                   for i in (1, 2, 3) for k, v in model.state_dict().items() if k.startswith("vace_blocks.1.")})
    with pytest.raises(KeyError, match="cannot infer which of the 6 blocks the 4 vace_blocks feed"):
        detect_dit_config(shapes)
    assert detect_dit_config(shapes, vace_layers=[0, 1, 2, 5]).vace_layers == (0, 1, 2, 5)


@pytest.mark.parametrize("weights", ["fp8_e4m3fn", "fp8_scaled"])
def test_fp8_loading_covers_the_vace_blocks(model, tmp_path, weights):
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file({f"model.diffusion_model.{k}": v for k, v in sd.items()}, tmp_path / "vace.safetensors")
    fp8 = load_dit(tmp_path / "vace.safetensors", weights=weights, dtype=torch.float32, config=CFG)
    assert type(fp8.vace_blocks[1].self_attn.q).__name__ == "FP8Linear"
    assert type(fp8.vace_blocks[0].before_proj).__name__ == "Linear"  # stays high precision
    x, t, ctx, vc = inputs()
    with torch.no_grad():
        want, got = model(x, t, ctx, vace_context=vc), fp8(x, t, ctx, vace_context=vc)
    assert ((got - want).abs().max() / want.abs().max()).item() < 0.1  # fp8 rounding, not a wrong wiring
    with torch.no_grad():  # the VACE blocks matter: without the hints the output moves much more than fp8 noise
        plain = fp8(x, t, ctx, vace_context=vc, vace_scale=0.0)
    assert (plain - want).abs().max() > 3 * (got - want).abs().max()


@pytest.mark.parametrize("naming", ["official", "diffusers", "kohya"])
def test_lora_on_a_vace_block_changes_its_weights(naming):
    model = random_vace()
    q = model.vace_blocks[1].self_attn.q
    g = torch.Generator().manual_seed(4)
    down, up = torch.randn(4, CFG.dim, generator=g), torch.randn(CFG.dim, 4, generator=g)
    layer = {"official": "diffusion_model.vace_blocks.1.self_attn.q",
             "diffusers": "transformer.vace_blocks.1.attn1.to_q",
             "kohya": "lora_unet_vace_blocks_1_self_attn_q"}[naming]
    lora = ({f"{layer}.lora_A.weight": down, f"{layer}.lora_B.weight": up} if naming != "kohya" else
            {f"{layer}.lora_down.weight": down, f"{layer}.lora_up.weight": up, f"{layer}.alpha": torch.tensor(4.0)})
    before = q.weight.detach().clone()
    apply_lora(model, lora, 0.5, merge=True)
    assert torch.allclose(q.weight, before + 0.5 * up @ down, atol=1e-5)


def test_block_swap_moves_the_vace_blocks_and_keeps_the_output():
    x, t, ctx, vc = inputs()
    with torch.no_grad():
        want = random_vace()(x, t, ctx, vace_context=vc, vace_scale=0.8)
        model = random_vace()
        swap = enable_block_swap(model, 3, 1, device="cpu")  # main blocks 3-5 and VACE block 1 (feeds block 3)
        assert swap is not None and swap.swapped == [3, 4, 5] and swap.vace_swapped == [1]
        got = model(x, t, ctx, vace_context=vc, vace_scale=0.8)
        again = model(x, t, ctx, vace_context=[(vc, 0.4), (vc, 0.4)])  # VACE blocks run twice: loaded twice
    assert torch.equal(got, want)
    # first forward: VACE block 1 + main blocks 3-5; second: each VACE pass loads VACE block 1 and prefetches main
    # block 3, which the next pass drops again (4 + 6)
    assert swap.stats.loads == 4 + 6 and swap.resident() == []
    assert ((again - want).abs().max() / want.abs().max()).item() < 1e-5


def test_exact_text_kv_cache_covers_the_vace_blocks(model):
    x, t, ctx, vc = inputs()
    with torch.no_grad():
        want = model(x, t, ctx, vace_context=vc)
        kv = model.text_kv(model.embed_text(ctx, 2))
        assert len(kv) == CFG.num_layers + len(CFG.vace_layers)
        session = start_session("exact", model, steps=2, guidance=5.0)
        outs = []
        with session.attached(model):
            for step in range(2):
                session.begin_step(step, 2, 1.0)
                with session.branch(BRANCH_BATCHED):
                    outs.append(model(x, t, ctx, vace_context=vc))
    assert all(torch.equal(o, want) for o in outs)
    assert session.report.text_kv_computed == 1 and session.report.text_kv_reused == 1


def test_moe_accepts_a_vace_expert_pair_and_refuses_a_mixed_one(model):
    low = random_vace(seed=5)
    moe = WanMoE(model, low, boundary=0.875)
    x, t, ctx, vc = inputs(1)
    with torch.no_grad():
        assert torch.equal(moe(x, torch.tensor([100.0]), ctx, vace_context=vc),
                           low(x, torch.tensor([100.0]), ctx, vace_context=vc))
    plain = WanDiT(CFG.replace(vace_layers=(), vace_in_dim=0))
    with pytest.raises(ValueError, match="VACE-hinted blocks"):
        WanMoE(model, plain)


class _RecordingSession:
    """The DiT side of a cache session whose attention cache computes everything and records the layer keys."""

    def __init__(self):
        self.keys: list[int] = []

    def reuse_output(self, dit, x, t):
        return None

    def record_output(self, dit, x, out):
        pass

    def run_blocks(self, dit, h, e, e0, context, freqs, clip_tokens=None, vace=None):
        def attention_cache(layer, rows, compute):
            self.keys.append(layer)
            return compute(rows)

        return dit.run_blocks(h, e0, dit.embed_text(context, h.shape[0]), freqs, attention_cache, vace=vace)


def test_attention_cache_keys_keep_vace_blocks_and_inputs_apart(model):
    """The attention cache stores per layer key: VACE block j of input k must not share a key with a main block or
    another input's VACE block (else one would be served the other's self-attention)."""
    x, t, ctx, vc = inputs()
    with torch.no_grad():
        want = model(x, t, ctx, vace_context=[(vc, 1.0), (vc.flip(0), 0.5)])
        session = _RecordingSession()
        model.cache = session
        try:
            got = model(x, t, ctx, vace_context=[(vc, 1.0), (vc.flip(0), 0.5)])
        finally:
            model.cache = None
    assert torch.equal(got, want)
    n, v = CFG.num_layers, len(CFG.vace_layers)
    assert session.keys == list(range(n, n + 2 * v)) + list(range(n))  # hints first, each input its own keys
