"""Wan VACE DiT (docs/vace.md section 1): parity with diffusers' WanVACETransformer3DModel (fp32, rel 1e-4) loaded
from official, ComfyUI-prefixed and diffusers files; several VACE inputs add their hints (checked against diffusers
with its hints replaced by the scaled sum of its own per-input hints); scale 0 is the plain T2V model."""
from __future__ import annotations

import re

import pytest
import torch
from safetensors.torch import save_file

from wan_core import load_dit
from wan_core.config import DiTConfig

from .helpers import tsv_map

CASES = {
    # name: (config, latent shape [B, 16, F, H, W], timesteps, scale); hinted blocks every 2nd / every 3rd
    "every2nd-batch2": (DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=4, text_dim=32, vace_layers=(0, 2),
                                  vace_in_dim=96), (2, 16, 2, 4, 6), [500, 3], 0.7),
    "every3rd-4heads": (DiTConfig(dim=96, ffn_dim=160, num_heads=4, num_layers=6, text_dim=48, vace_layers=(0, 3),
                                  vace_in_dim=96), (2, 16, 3, 4, 4), [999, 250], 1.3),
}


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


def diffusers_vace(cfg: DiTConfig, seed: int):
    """diffusers WanVACETransformer3DModel with every tensor randomised (official init zeroes before/after_proj
    and the head)."""
    from diffusers import WanVACETransformer3DModel

    torch.manual_seed(seed)
    ref = WanVACETransformer3DModel(
        patch_size=cfg.patch_size, num_attention_heads=cfg.num_heads, attention_head_dim=cfg.head_dim,
        in_channels=cfg.in_dim, out_channels=cfg.out_dim, text_dim=cfg.text_dim, freq_dim=cfg.freq_dim,
        ffn_dim=cfg.ffn_dim, num_layers=cfg.num_layers, cross_attn_norm=cfg.cross_attn_norm,
        qk_norm="rms_norm_across_heads", eps=cfg.eps, rope_max_seq_len=cfg.rope_max_len,
        vace_layers=list(cfg.vace_layers), vace_in_channels=cfg.vace_in_dim,
    )
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in ref.parameters():
            ones = p.dim() == 1 and bool((p == 1).all())
            p.copy_(torch.randn(p.shape, generator=g) * 0.2 + (1.0 if ones else 0.0))
    return ref.eval()


def export_official(dsd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """diffusers names -> official names from the team's key list (.tsv) and the official VACE names
    (``before_proj`` / ``after_proj``: Wan2.1 wan/modules/vace_model.py), independent of wan_core's rules."""
    block, top = {}, {}
    for off, dif in tsv_map().items():
        if off.startswith("blocks.0."):
            block[dif[len("blocks.0."):]] = off[len("blocks.0."):]
        elif not off.startswith("blocks."):
            top[dif] = off
    block.update({"proj_in.weight": "before_proj.weight", "proj_in.bias": "before_proj.bias",
                  "proj_out.weight": "after_proj.weight", "proj_out.bias": "after_proj.bias"})
    out = {}
    for k, v in dsd.items():
        if k.startswith(("blocks.", "vace_blocks.")):
            head, idx, rest = k.split(".", 2)
            out[f"{head}.{idx}.{block[rest]}"] = v
        else:
            out["vace_patch_embedding." + k.split(".", 1)[1] if k.startswith("vace_patch_embedding.") else top[k]] = v
    return out


def _inputs(cfg: DiTConfig, shape, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    ctx = [torch.randn(n, cfg.text_dim, generator=g) for n in (5, 11)[: shape[0]]]
    vc = [torch.randn((shape[0], cfg.vace_in_dim) + shape[2:], generator=g) for _ in range(2)]
    return x, ctx, vc


def _padded(ctx, cfg: DiTConfig) -> torch.Tensor:
    out = torch.zeros(len(ctx), 512, cfg.text_dim)
    for i, c in enumerate(ctx):
        out[i, : len(c)] = c
    return out


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    cfg, shape, ts, scale = CASES[request.param]
    ref = diffusers_vace(cfg, seed=len(request.param))
    x, ctx, vc = _inputs(cfg, shape, 7)
    t = torch.tensor(ts)
    n = len(cfg.vace_layers)
    with torch.no_grad():
        expected = ref(hidden_states=x, timestep=t, encoder_hidden_states=_padded(ctx, cfg),
                       control_hidden_states=vc[0], control_hidden_states_scale=torch.full((n,), scale),
                       return_dict=False)[0]
    tmp = tmp_path_factory.mktemp(request.param)
    official = export_official({k: v.contiguous() for k, v in ref.state_dict().items()})
    save_file(official, tmp / "official.safetensors")
    save_file({f"model.diffusion_model.{k}": v for k, v in official.items()}, tmp / "comfy.safetensors")
    ref.save_pretrained(tmp / "diffusers")
    return cfg, ref, x, t, ctx, vc, scale, expected, tmp


@pytest.mark.parametrize("source", ["official.safetensors", "comfy.safetensors", "diffusers"])
def test_vace_dit_matches_diffusers(case, source):
    cfg, _ref, x, t, ctx, vc, scale, expected, tmp = case
    # the head count is not in a state dict (64 wide: 2 heads is what detection guesses); the diffusers folder
    # records it. The hinted blocks are inferred from the block counts in every layout.
    config = cfg if source != "diffusers" and cfg.dim != 64 else None
    model = load_dit(tmp / source, dtype=torch.float32, config=config)
    assert model.config == cfg.replace(name=model.config.name)
    with torch.no_grad():
        out = model(x, t, ctx, vace_context=vc[0], vace_scale=scale)
    assert out.dtype == torch.float32 and out.shape == expected.shape
    assert rel_err(out, expected) <= 1e-4


def _diffusers_hints(ref, x, t, ctx, cfg, vc) -> list[torch.Tensor]:
    """diffusers' own hints (``proj_out`` of each VACE block) for one context."""
    hints: list[torch.Tensor] = []
    handles = [b.register_forward_hook(lambda _m, _a, out: hints.append(out[0])) for b in ref.vace_blocks]
    try:
        with torch.no_grad():
            ref(hidden_states=x, timestep=t, encoder_hidden_states=_padded(ctx, cfg), control_hidden_states=vc,
                return_dict=False)
    finally:
        for h in handles:
            h.remove()
    return hints


def test_two_vace_inputs_add_their_hints(case):
    """A list of (context, scale) pairs == diffusers run with its hints replaced by sum_k scale_k * hint_k."""
    cfg, ref, x, t, ctx, vc, scale, _expected, tmp = case
    s1, s2 = scale, -0.4
    h1, h2 = (_diffusers_hints(ref, x, t, ctx, cfg, c) for c in vc)
    summed = [s1 * a + s2 * b for a, b in zip(h1, h2)]
    handles = [b.register_forward_hook(lambda _m, _a, out, j=j: (summed[j], out[1]))
               for j, b in enumerate(ref.vace_blocks)]
    try:
        with torch.no_grad():
            expected = ref(hidden_states=x, timestep=t, encoder_hidden_states=_padded(ctx, cfg),
                           control_hidden_states=vc[0], return_dict=False)[0]
    finally:
        for h in handles:
            h.remove()
    model = load_dit(tmp / "official.safetensors", dtype=torch.float32, config=cfg)
    with torch.no_grad():
        out = model(x, t, ctx, vace_context=[(vc[0], s1), (vc[1], s2)])
        half = model(x, t, ctx, vace_context=[(vc[0], s1 / 2), (vc[1], s2 / 2)], vace_scale=2.0)
    assert rel_err(out, expected) <= 1e-4
    assert rel_err(half, out) <= 1e-5  # vace_scale multiplies every pair's scale


def test_scale_zero_is_the_t2v_model(case):
    cfg, _ref, x, t, ctx, vc, _scale, _expected, tmp = case
    model = load_dit(tmp / "official.safetensors", dtype=torch.float32, config=cfg)
    plain_sd = {k: v for k, v in model.state_dict().items() if "vace" not in k}
    t2v = load_dit(plain_sd, dtype=torch.float32, config=cfg.replace(vace_layers=(), vace_in_dim=0))
    with torch.no_grad():
        zero = model(x, t, ctx, vace_context=vc[0], vace_scale=0.0)
        plain = t2v(x, t, ctx)
    assert torch.equal(zero, plain)


def test_bad_vace_inputs_are_one_line_errors(case):
    cfg, _ref, x, t, ctx, vc, _scale, _expected, tmp = case
    model = load_dit(tmp / "official.safetensors", dtype=torch.float32, config=cfg)
    t2v = load_dit({k: v for k, v in model.state_dict().items() if "vace" not in k}, dtype=torch.float32,
                   config=cfg.replace(vace_layers=(), vace_in_dim=0))
    bad = [
        (t2v, {"vace_context": vc[0]}, "has no VACE blocks"),
        (model, {}, "needs a VACE context"),
        (model, {"vace_context": vc[0][:, :95]}, "vace_context has shape"),
        (model, {"vace_context": vc[0][:, :, :1]}, "same frames"),
        (model, {"vace_context": torch.cat([vc[0], vc[0][:1]])}, "vace_context has shape"),
        (model, {"vace_context": [(vc[0], 1.0), (vc[1][..., :2], 1.0)]}, "vace_context[1] has shape"),
        (model, {"vace_context": vc[0], "vace_scale": float("nan")}, "vace_scale must be finite"),
        (model, {"vace_context": [vc[0]]}, "list of (context, scale)"),
    ]
    for m, kwargs, message in bad:
        with pytest.raises(ValueError, match=re.escape(message)) as info:
            m(x, t, ctx, **kwargs)
        assert "\n" not in str(info.value)


def test_batch_one_context_is_shared(case):
    cfg, _ref, x, t, ctx, vc, scale, _expected, tmp = case
    model = load_dit(tmp / "official.safetensors", dtype=torch.float32, config=cfg)
    with torch.no_grad():
        shared = model(x, t, ctx, vace_context=vc[0][:1], vace_scale=scale)
        full = model(x, t, ctx, vace_context=vc[0][:1].expand_as(vc[0]), vace_scale=scale)
    assert torch.equal(shared, full)
