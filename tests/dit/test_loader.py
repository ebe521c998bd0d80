"""DiT loading from files the tests write: fp8 (plain and scaled), dtypes, and one test per bad input."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from wan_core import CheckpointError, load_dit
from wan_core.config import DiTConfig
from wan_core.dit.model import WanDiT

CFG = DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32)
F8 = torch.float8_e4m3fn


@pytest.fixture(scope="module")
def weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(3)
    model = WanDiT(CFG)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def linear_weights(sd):
    return [k for k, v in sd.items() if k.endswith(".weight") and v.dim() == 2]


def test_plain_fp8_is_upcast_exactly(weights, tmp_path):
    fp8 = {k: (v.to(F8) if k in linear_weights(weights) else v) for k, v in weights.items()}
    save_file(fp8, tmp_path / "m_fp8_e4m3fn.safetensors")
    model = load_dit(tmp_path / "m_fp8_e4m3fn.safetensors", dtype=torch.float32, config=CFG)
    sd = model.state_dict()
    for k in linear_weights(weights):
        assert torch.equal(sd[k], fp8[k].float()), k
    assert torch.equal(sd["head.modulation"], weights["head.modulation"])


@pytest.mark.parametrize("scale_name", ["scale_weight", "weight_scale"])
def test_scaled_fp8_dequantises_to_fp8_times_scale(weights, tmp_path, scale_name):
    out = {"scaled_fp8": torch.empty(0, dtype=F8)}
    scales = {}
    for k, v in weights.items():
        if k in linear_weights(weights):
            layer = k[: -len(".weight")]
            s = v.abs().max() / 448.0
            out[k] = (v / s).to(F8)
            out[f"{layer}.{scale_name}"] = s.reshape(())
            out[f"{layer}.scale_input"] = torch.tensor(1.0)
            scales[k] = s
        else:
            out[k] = v.to(torch.float16)
    save_file({f"model.diffusion_model.{k}": v for k, v in out.items()}, tmp_path / "m_scaled.safetensors")
    model = load_dit(tmp_path / "m_scaled.safetensors", dtype=torch.float32, config=CFG)
    sd = model.state_dict()
    for k, s in scales.items():
        assert torch.equal(sd[k], out[k].float() * s), k
    # dequantised weights are close to the originals (fp8 has ~2 significant digits)
    k = "blocks.0.ffn.0.weight"
    assert (sd[k] - weights[k]).abs().max() <= weights[k].abs().max() * 0.07


def test_fp8_file_defaults_to_bf16(weights, tmp_path):
    fp8 = {k: (v.to(F8) if k in linear_weights(weights) else v.to(torch.bfloat16)) for k, v in weights.items()}
    save_file(fp8, tmp_path / "m.safetensors")
    model = load_dit(tmp_path / "m.safetensors", config=CFG)
    assert model.dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_forward_in_each_dtype_is_close_to_fp32(weights, dtype):
    ref = load_dit(weights, dtype=torch.float32, config=CFG)
    model = load_dit(weights, dtype=dtype, config=CFG)
    x = torch.randn(1, 16, 2, 4, 4)
    ctx = [torch.randn(6, CFG.text_dim)]
    with torch.no_grad():
        a = ref(x, torch.tensor([700]), ctx)
        b = model(x, torch.tensor([700]), ctx)
    assert b.dtype == torch.float32 and torch.isfinite(b).all()
    tol = {torch.float32: 1e-6, torch.bfloat16: 5e-2, torch.float16: 1e-2}[dtype]
    assert ((a - b).abs().max() / a.abs().max()).item() <= tol
    assert model.blocks[0].ffn[0].weight.dtype == dtype


# ---- bad inputs: the message must name the file and the problem ----

def test_sd_unet_is_named(tmp_path):
    sd = {"model.diffusion_model.input_blocks.0.0.weight": torch.zeros(4, 4, 3, 3),
          "model.diffusion_model.out.2.weight": torch.zeros(4, 4, 3, 3),
          "cond_stage_model.transformer.text_model.embeddings.token_embedding.weight": torch.zeros(8, 4)}
    save_file(sd, tmp_path / "sd15.safetensors")
    with pytest.raises(CheckpointError, match=r"sd15\.safetensors.*not a Wan.*Stable Diffusion 1\.x/2\.x"):
        load_dit(tmp_path / "sd15.safetensors")


def test_sdxl_and_flux_are_named(tmp_path):
    save_file({"conditioner.embedders.0.transformer.x": torch.zeros(2),
               "model.diffusion_model.label_emb.0.0.weight": torch.zeros(2, 2)}, tmp_path / "xl.safetensors")
    with pytest.raises(CheckpointError, match="Stable Diffusion XL"):
        load_dit(tmp_path / "xl.safetensors")
    save_file({"double_blocks.0.img_attn.qkv.weight": torch.zeros(2, 2),
               "single_blocks.0.linear1.weight": torch.zeros(2, 2)}, tmp_path / "flux.safetensors")
    with pytest.raises(CheckpointError, match="Flux"):
        load_dit(tmp_path / "flux.safetensors")


def test_wan_vae_given_to_dit_loader_is_named(tmp_path):
    save_file({"decoder.upsamples.0.residual.0.gamma": torch.zeros(4, 1, 1, 1),
               "encoder.conv1.weight": torch.zeros(4, 3, 3, 3, 3)}, tmp_path / "vae.safetensors")
    with pytest.raises(CheckpointError, match="Wan 2.1 video VAE"):
        load_dit(tmp_path / "vae.safetensors")


def test_missing_keys_are_listed(weights, tmp_path):
    broken = {k: v for k, v in weights.items() if not k.startswith("blocks.1.ffn")}
    save_file(broken, tmp_path / "m.safetensors")
    with pytest.raises(CheckpointError, match=r"m\.safetensors.*missing.*blocks\.1\.ffn\.0\.bias"):
        load_dit(tmp_path / "m.safetensors", config=CFG)


def test_unexpected_keys_are_listed(weights, tmp_path):
    extra = dict(weights, **{"blocks.0.self_attn.extra.weight": torch.zeros(2)})
    save_file(extra, tmp_path / "m.safetensors")
    with pytest.raises(CheckpointError, match=r"unexpected.*blocks\.0\.self_attn\.extra\.weight"):
        load_dit(tmp_path / "m.safetensors", config=CFG)


def test_shape_mismatch_names_key_expected_and_found(weights, tmp_path):
    bad = dict(weights)
    bad["blocks.0.self_attn.q.weight"] = torch.zeros(64, 32)
    save_file(bad, tmp_path / "m.safetensors")
    with pytest.raises(CheckpointError, match=r"blocks\.0\.self_attn\.q\.weight: expected \[64, 64\], found \[64, 32\]"):
        load_dit(tmp_path / "m.safetensors", config=CFG)


def test_truncated_safetensors(weights, tmp_path):
    save_file(weights, tmp_path / "m.safetensors")
    data = (tmp_path / "m.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"cut\.safetensors.*truncated"):
        load_dit(tmp_path / "cut.safetensors")


def test_truncated_pth(weights, tmp_path):
    torch.save(weights, tmp_path / "m.pth")
    data = (tmp_path / "m.pth").read_bytes()
    (tmp_path / "cut.pth").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"cut\.pth.*truncated or corrupt"):
        load_dit(tmp_path / "cut.pth")


def test_empty_and_garbage_files(tmp_path):
    (tmp_path / "empty.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty"):
        load_dit(tmp_path / "empty.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(CheckpointError, match="junk.safetensors"):
        load_dit(tmp_path / "junk.safetensors")


class _NotATensor:
    pass


def test_pickle_with_code_is_refused(weights, tmp_path):
    torch.save({"state_dict": weights, "obj": _NotATensor()}, tmp_path / "evil.pth")
    with pytest.raises(CheckpointError, match=r"evil\.pth.*weights_only"):
        load_dit(tmp_path / "evil.pth")


def test_nested_training_checkpoint_is_unwrapped(weights, tmp_path):
    torch.save({"state_dict": weights, "step": torch.tensor(3)}, tmp_path / "train.pt")
    model = load_dit(tmp_path / "train.pt", config=CFG, dtype=torch.float32)
    assert torch.equal(model.state_dict()["head.head.weight"], weights["head.head.weight"])


def test_missing_file_and_unknown_extension(tmp_path):
    with pytest.raises(CheckpointError, match="no such file"):
        load_dit(tmp_path / "nope.safetensors")
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    with pytest.raises(CheckpointError, match="GGUF"):
        load_dit(tmp_path / "m.gguf")


def test_sharded_diffusers_folder_with_missing_shard(tmp_path):
    from tests.dit.helpers import diffusers_reference

    ref = diffusers_reference(CFG)
    ref.save_pretrained(tmp_path / "dif", max_shard_size="20KB")
    shards = sorted((tmp_path / "dif").glob("*.safetensors"))
    assert len(shards) > 1
    model = load_dit(tmp_path / "dif", dtype=torch.float32)
    assert model.config.num_heads == CFG.num_heads
    shards[-1].unlink()
    with pytest.raises(CheckpointError, match="missing"):
        load_dit(tmp_path / "dif")


@pytest.mark.parametrize("weights", [None, "fp8_scaled"])
def test_loading_reports_progress_and_can_be_stopped(weights, tmp_path):
    sd = {k: v for k, v in WanDiT(CFG).state_dict().items()}
    save_file(sd, tmp_path / "m.safetensors")
    calls = []
    load_dit(tmp_path / "m.safetensors", config=CFG, weights=weights, progress=lambda d, t: calls.append((d, t)))
    assert calls[0] == (0, len(sd)) and calls[-1] == (len(sd), len(sd))
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)

    class Stop(Exception):
        pass

    def stop(done, total):
        if done == 3:
            raise Stop

    with pytest.raises(Stop):
        load_dit(tmp_path / "m.safetensors", config=CFG, weights=weights, progress=stop)
