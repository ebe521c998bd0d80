"""Wan 2.1 I2V / FLF2V DiT (docs/i2v.md section 2): parity with diffusers' WanTransformer3DModel with image
embeddings (fp32, rel. 1e-4) loaded from official, ComfyUI-prefixed and diffusers files; full-size key sets on the
meta device against tests/dit/data/wan_dit_i2v_14b_diffusers_keys.txt and
tests/dit/data/wan_dit_flf2v_14b_diffusers_keys.txt; the image-input errors."""
from __future__ import annotations

import re

import pytest
import torch
from safetensors.torch import save_file

from wan_core import load_dit
from wan_core.config import DIT_PRESETS, DiTConfig, detect_dit_config
from wan_core.dit.keys import diffusers_to_official, official_to_diffusers
from wan_core.dit.model import WanDiT

from .helpers import DATA, export_official

CLIP = 24  # CLIP width of the tiny configs (1280 in the real models)
CASES = {
    # name: (config, latent shape [B,16,F,H,W], timesteps)
    "i2v-2heads": (DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32, in_dim=36, image_dim=CLIP),
                   (1, 16, 2, 4, 6), [731.5]),
    "i2v-4heads-batch2": (DiTConfig(dim=96, ffn_dim=160, num_heads=4, num_layers=2, text_dim=48, in_dim=36,
                                    image_dim=CLIP), (2, 16, 3, 4, 4), [500, 3]),
    "flf2v-2heads": (DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32, in_dim=36,
                               image_dim=CLIP, image_pos_len=2 * 257), (1, 16, 2, 4, 4), [999]),
}

# official -> diffusers names of the image layers, written out here from diffusers' single-file converter
# (loaders/single_file_utils.py, TRANSFORMER_KEYS_RENAME_DICT) so the test does not use wan_core's rules;
# emb_pos -> pos_embed is the mapping the converter lacks (WanImageEmbedding.pos_embed)
IMAGE_KEYS = {
    "img_emb.proj.0.": "condition_embedder.image_embedder.norm1.",
    "img_emb.proj.1.": "condition_embedder.image_embedder.ff.net.0.proj.",
    "img_emb.proj.3.": "condition_embedder.image_embedder.ff.net.2.",
    "img_emb.proj.4.": "condition_embedder.image_embedder.norm2.",
    "img_emb.emb_pos": "condition_embedder.image_embedder.pos_embed",
}
BLOCK_IMAGE_KEYS = {"cross_attn.k_img.": "attn2.add_k_proj.", "cross_attn.v_img.": "attn2.add_v_proj.",
                    "cross_attn.norm_k_img.": "attn2.norm_added_k."}


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


def reference(cfg: DiTConfig, seed: int):
    """diffusers WanTransformer3DModel with image embeddings, every tensor randomised (norm weights around 1)."""
    from diffusers import WanTransformer3DModel

    torch.manual_seed(seed)
    ref = WanTransformer3DModel(
        patch_size=cfg.patch_size, num_attention_heads=cfg.num_heads, attention_head_dim=cfg.head_dim,
        in_channels=cfg.in_dim, out_channels=cfg.out_dim, text_dim=cfg.text_dim, freq_dim=cfg.freq_dim,
        ffn_dim=cfg.ffn_dim, num_layers=cfg.num_layers, cross_attn_norm=cfg.cross_attn_norm,
        qk_norm="rms_norm_across_heads", eps=cfg.eps, rope_max_seq_len=cfg.rope_max_len,
        image_dim=cfg.image_dim, added_kv_proj_dim=cfg.dim, pos_embed_seq_len=cfg.image_pos_len or None,
    )
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in ref.parameters():
            ones = p.dim() == 1 and bool((p == 1).all())
            p.copy_(torch.randn(p.shape, generator=g) * 0.2 + (1.0 if ones else 0.0))
    return ref.eval()


def to_official(dsd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """diffusers -> official names: the team's .tsv for the text-to-video keys, the tables above for the rest."""
    image = {k: v for k, v in dsd.items() if "image_embedder" in k or "add_" in k or "norm_added_k" in k}
    out = export_official({k: v for k, v in dsd.items() if k not in image})
    for k, v in image.items():
        m = re.match(r"^(blocks\.\d+\.)(.*)$", k)
        table, prefix, rest = (BLOCK_IMAGE_KEYS, m.group(1), m.group(2)) if m else (IMAGE_KEYS, "", k)
        off = next(o + rest[len(d):] for o, d in table.items() if rest.startswith(d))
        out[prefix + off] = v
    return out


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    cfg, shape, ts = CASES[request.param]
    ref = reference(cfg, seed=len(request.param))
    g = torch.Generator().manual_seed(3)
    b = shape[0]
    x = torch.randn(shape, generator=g)
    y = torch.randn((b, 20) + shape[2:], generator=g)
    ctx = [torch.randn(n, cfg.text_dim, generator=g) for n in [5, 11][:b]]
    padded = torch.zeros(b, 512, cfg.text_dim)
    for i, c in enumerate(ctx):
        padded[i, : len(c)] = c
    images = 2 if cfg.image_pos_len else 1
    clip = torch.randn(b * images, 257, CLIP, generator=g)  # diffusers: [first, last] images stacked on the batch
    t = torch.tensor(ts)
    with torch.no_grad():
        expected = ref(hidden_states=torch.cat([x, y], 1), timestep=t, encoder_hidden_states=padded,
                       encoder_hidden_states_image=clip, return_dict=False)[0]
    tmp = tmp_path_factory.mktemp(request.param)
    dsd = {k: v.contiguous() for k, v in ref.state_dict().items()}
    official = to_official(dsd)
    save_file(official, tmp / "official.safetensors")
    save_file({f"model.diffusion_model.{k}": v for k, v in official.items()}, tmp / "comfy.safetensors")
    ref.save_pretrained(tmp / "diffusers")
    clip_tokens = clip.reshape(b, images * 257, CLIP)  # ours: [B, 514, C] for FLF2V (first image's, then last's)
    return cfg, x, y, clip_tokens, t, ctx, expected, tmp


@pytest.mark.parametrize("source", ["official.safetensors", "comfy.safetensors", "diffusers"])
def test_i2v_dit_matches_diffusers(case, source):
    cfg, x, y, clip, t, ctx, expected, tmp = case
    model = load_dit(tmp / source, dtype=torch.float32, config=None if source == "diffusers" else cfg)
    assert (model.config.in_dim, model.config.image_dim, model.config.image_pos_len) == (36, CLIP, cfg.image_pos_len)
    with torch.no_grad():
        out = model(x, t, ctx, image_latent=y, clip_tokens=clip)
    assert out.shape == x.shape and out.dtype == torch.float32
    assert rel_err(out, expected) <= 1e-4


def test_image_latent_and_clip_tokens_broadcast_over_the_batch(case):
    cfg, x, y, clip, t, ctx, _expected, tmp = case
    model = load_dit(tmp / "official.safetensors", dtype=torch.float32, config=cfg)
    xb, tb = torch.cat([x[:1], x[:1]]), torch.cat([t[:1], t[:1]])
    with torch.no_grad():
        one = model(x[:1], t[:1], ctx[:1], image_latent=y[:1], clip_tokens=clip[:1])
        two = model(xb, tb, [ctx[0], ctx[0]], image_latent=y[:1], clip_tokens=clip[:1])
    torch.testing.assert_close(two, torch.cat([one, one]), rtol=1e-5, atol=1e-5)


def meta_shapes(cfg: DiTConfig) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in WanDiT(cfg).state_dict().items()}


def listed(name: str) -> dict[str, tuple[int, ...]]:
    rows = {}
    for line in (DATA / name).read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, shape = line.split("\t")
        rows[key] = tuple(int(s) for s in re.findall(r"\d+", shape))
    return rows


@pytest.mark.parametrize("preset,data", [("wan2.1-i2v-14b", "wan_dit_i2v_14b_diffusers_keys.txt"),
                                         ("wan2.1-flf2v-14b", "wan_dit_flf2v_14b_diffusers_keys.txt")])
def test_14b_image_keys_match_diffusers_list(preset, data):
    ours = meta_shapes(DIT_PRESETS[preset])
    ref = listed(data)
    mapped = {official_to_diffusers(k): s for k, s in ours.items()}
    assert None not in mapped and mapped == ref
    assert all(diffusers_to_official(k) in ours for k in ref)
    counts = {"wan2.1-i2v-14b": (1303, 16_394_878_784), "wan2.1-flf2v-14b": (1304, 16_395_536_704)}
    n = sum(torch.Size(s).numel() for s in ours.values())
    assert (len(ours), n) == counts[preset]
    assert detect_dit_config(ours).name == preset
    assert detect_dit_config(ours).replace(name="x") == DIT_PRESETS[preset].replace(name="x")


def test_diffusers_converter_agrees_on_official_image_names():
    """diffusers' own single-file converter maps our official names of the I2V layers to its names
    (it drops img_emb.emb_pos; tests above cover that one)."""
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

    ours = meta_shapes(DIT_PRESETS["wan2.1-i2v-14b"].replace(num_layers=1))
    fake = {k: torch.zeros(1) for k in ours}
    converted = set(convert_wan_transformer_to_diffusers(dict(fake)))
    assert converted == {official_to_diffusers(k) for k in ours}


def tiny(**changes) -> WanDiT:
    torch.manual_seed(0)
    return WanDiT(DIT_PRESETS["tiny"].replace(**changes)).eval()


def test_image_input_errors_are_one_line():
    x, t, ctx = torch.randn(1, 16, 2, 4, 4), torch.tensor([500.0]), [torch.randn(3, 32)]
    y, clip = torch.randn(1, 20, 2, 4, 4), torch.randn(1, 257, CLIP)
    i2v, t2v = tiny(in_dim=36, image_dim=CLIP), tiny()
    cases = [
        (i2v, {}, "image-to-video model.*start image"),
        (i2v, {"image_latent": y}, "needs the CLIP vision tokens"),
        (i2v, {"image_latent": y[:, :, :1], "clip_tokens": clip}, r"image_latent has shape \[1, 20, 1, 4, 4\]"),
        (i2v, {"image_latent": y, "clip_tokens": clip[..., :8]}, "clip_tokens has shape"),
        (t2v, {"image_latent": y}, "text-to-video model.*takes no image"),
        (t2v, {"clip_tokens": clip}, "no image embedding"),
        (tiny(in_dim=36, image_dim=CLIP, image_pos_len=514), {"image_latent": y, "clip_tokens": clip},
         "514"),
    ]
    for model, kwargs, pattern in cases:
        with pytest.raises(ValueError, match=pattern) as info:
            model(x, t, ctx, **kwargs)
        assert "\n" not in str(info.value)


def test_wan22_style_i2v_without_clip_runs():
    """in_dim 36 without img_emb (Wan 2.2 I2V-A14B's layout): image_latent only, clip_tokens optional."""
    model = tiny(in_dim=36)
    with torch.no_grad():
        out = model(torch.randn(1, 16, 1, 4, 4), 500, [torch.randn(3, 32)], image_latent=torch.randn(1, 20, 1, 4, 4))
    assert out.shape == (1, 16, 1, 4, 4)


def test_fp8_i2v_file_keeps_image_projections_in_fp8(case, tmp_path):
    """A ComfyUI-style fp8_e4m3fn I2V file: k_img / v_img stay fp8 like q/k/v/o, img_emb in the compute dtype;
    the output stays close to the fp32 model's (fp8 rounding only)."""
    from wan_core.quant.fp8 import FP8Linear

    cfg, x, y, clip, t, ctx, expected, tmp = case
    from safetensors.torch import load_file

    sd = load_file(tmp / "official.safetensors")
    fp8 = {k: (v.to(torch.float8_e4m3fn) if v.dim() == 2 and k.startswith("blocks.") else v) for k, v in sd.items()}
    save_file(fp8, tmp_path / "i2v_fp8_e4m3fn.safetensors")
    model = load_dit(tmp_path / "i2v_fp8_e4m3fn.safetensors", dtype=torch.float32, config=cfg, weights="fp8_e4m3fn")
    attn = model.blocks[0].cross_attn
    assert isinstance(attn.k_img, FP8Linear) and isinstance(attn.v_img, FP8Linear)
    assert model.img_emb.proj[1].weight.dtype == torch.float32
    with torch.no_grad():
        out = model(x, t, ctx, image_latent=y, clip_tokens=clip)
    assert rel_err(out, expected) < 0.2


def test_lora_on_image_projections_changes_the_output_and_restores():
    """An I2V LoRA with k_img / v_img layers (official names) applies to the image cross-attention."""
    from wan_core import apply_lora, remove_loras

    model = tiny(in_dim=36, image_dim=CLIP)
    dim = model.config.dim
    g = torch.Generator().manual_seed(1)
    lora = {}
    for i in range(model.config.num_layers):
        for name in ("k_img", "v_img"):
            lora[f"diffusion_model.blocks.{i}.cross_attn.{name}.lora_A.weight"] = torch.randn(2, dim, generator=g)
            lora[f"diffusion_model.blocks.{i}.cross_attn.{name}.lora_B.weight"] = torch.randn(dim, 2, generator=g)
    x, ctx = torch.randn(1, 16, 1, 4, 4), [torch.randn(3, 32)]
    y, clip = torch.randn(1, 20, 1, 4, 4), torch.randn(1, 257, CLIP)
    before = model.blocks[1].cross_attn.k_img.weight.clone()
    with torch.no_grad():
        plain = model(x, 500, ctx, image_latent=y, clip_tokens=clip)
        apply_lora(model, lora, strength=1.0)
        lora_out = model(x, 500, ctx, image_latent=y, clip_tokens=clip)
        expected = before + lora["diffusion_model.blocks.1.cross_attn.k_img.lora_B.weight"] @ \
            lora["diffusion_model.blocks.1.cross_attn.k_img.lora_A.weight"]
        torch.testing.assert_close(model.blocks[1].cross_attn.k_img.weight, expected, rtol=1e-5, atol=1e-5)
        remove_loras(model)
        again = model(x, 500, ctx, image_latent=y, clip_tokens=clip)
    assert (lora_out - plain).abs().max() > 1e-3
    assert torch.equal(again, plain)
