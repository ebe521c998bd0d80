"""GGUF DiT files: written by ``write_gguf`` (types gguf can quantise) or by hand (K-quants), loaded with their
Linear weights kept in blocks; forward equal to the same DiT with the dequantised weights; bad files refused."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from wan_core import CheckpointError, load_dit
from wan_core.checkpoint import materialize, open_checkpoint
from wan_core.config import DiTConfig
from wan_core.quant.fp8 import parameter_bytes
from wan_core.quant.gguf_linear import GGUFLinear

from .gguf_files import k_quant_file, random_weights, save_safetensors, write_gguf_file

gguf = pytest.importorskip("gguf")
from wan_core.quant.gguf_writer import WRITABLE_TYPES, write_gguf  # noqa: E402

CFG = DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=2, text_dim=32)
K_CFG = DiTConfig(dim=256, ffn_dim=256, num_heads=2, num_layers=1, text_dim=32)  # K-quant rows: 256 values


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf")
    src = save_safetensors(random_weights(CFG), d / "m.safetensors")
    out = {q: d / f"m-{q}.gguf" for q in WRITABLE_TYPES}
    for q, path in out.items():
        write_gguf(src, path, q)
    return src, out


def _inputs(cfg: DiTConfig):
    g = torch.Generator().manual_seed(5)
    return (torch.randn(1, cfg.in_dim, 2, 4, 4, generator=g), torch.tensor([700.0]),
            torch.randn(1, 6, cfg.text_dim, generator=g))


def _twin(path, cfg):
    """The same DiT with every weight dequantised to float32 (a plain model, no GGUF code in the forward)."""
    return load_dit(materialize(open_checkpoint(path, gguf=True), torch.float32), dtype=torch.float32, config=cfg)


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def _check_equal_to_twin(path, cfg, qtype):
    model = load_dit(path, dtype=torch.float32)
    assert model.config.dim == cfg.dim and model.config.num_layers == cfg.num_layers  # detected from shapes
    q = model.blocks[0].self_attn.q
    assert isinstance(q, GGUFLinear) and q.qtype == qtype and q.weight.dtype == torch.uint8
    twin = _twin(path, cfg)
    with torch.no_grad():
        y, ref = model(*_inputs(cfg)), twin(*_inputs(cfg))
    assert _rel(y, ref) <= 1e-4
    return model


@pytest.mark.parametrize("qtype", WRITABLE_TYPES)
def test_written_types_forward_equals_dequantised_twin(files, qtype):
    src, paths = files
    model = _check_equal_to_twin(paths[qtype], CFG, qtype)
    original = load_dit(src, dtype=torch.float32)
    with torch.no_grad():  # and the quantised model is near the original (a real, lossy quantisation)
        err = _rel(model(*_inputs(CFG)), original(*_inputs(CFG)))
    assert err < {"Q4_0": 0.3, "Q4_1": 0.3, "Q5_0": 0.15, "Q5_1": 0.15}.get(qtype, 0.05)


@pytest.mark.parametrize("qtype", ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"])
def test_k_quant_forward_equals_dequantised_twin(tmp_path, qtype):
    path = k_quant_file(tmp_path / f"k-{qtype}.gguf", random_weights(K_CFG), qtype)
    _check_equal_to_twin(path, K_CFG, qtype)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0"])
def test_resident_bytes_within_file_tensor_bytes(files, qtype):
    path = files[1][qtype]
    reader = gguf.GGUFReader(str(path))
    file_bytes = sum(int(t.n_bytes) for t in reader.tensors)
    model = load_dit(path, dtype=torch.float32)
    assert parameter_bytes(model) <= 1.15 * file_bytes
    full = load_dit(files[0], dtype=torch.float32)
    assert parameter_bytes(model) < 0.6 * parameter_bytes(full)  # really smaller than the float model


def test_written_file_follows_city96_conventions(files):
    reader = gguf.GGUFReader(str(files[1]["Q4_0"]))
    arch = reader.fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == "wan"
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["patch_embedding.weight"] == "F32" and types["blocks.1.ffn.2.weight"] == "Q4_0"
    assert types["text_embedding.0.weight"] == "F32" and types["blocks.0.norm3.weight"] == "F32"
    t = next(t for t in reader.tensors if t.name == "blocks.0.ffn.0.weight")
    assert t.shape.tolist() == [CFG.dim, CFG.ffn_dim]  # innermost first


def test_default_dtype_is_bf16_and_blocks_move_with_to(files):
    model = load_dit(files[1]["Q8_0"])
    q = model.blocks[0].self_attn.q
    assert q.compute_dtype == torch.bfloat16 and model.head.head.weight.dtype == torch.bfloat16
    model.to(torch.float32)
    assert q.weight.dtype == torch.uint8 and q.compute_dtype == torch.float32


def test_conventions_of_community_files(tmp_path, files):
    """No architecture key, a modulation without its leading 1, a shape from comfy.gguf.orig_shape."""
    weights = {k: v.float().numpy() for k, v in random_weights(CFG, seed=2).items()}
    tensors = {k: (v, None) for k, v in weights.items()}
    tensors["head.modulation"] = (weights["head.modulation"][0], None)
    tensors["patch_embedding.weight"] = (weights["patch_embedding.weight"].reshape(CFG.dim, -1), None)
    shape = list(weights["patch_embedding.weight"].shape)
    path = write_gguf_file(tmp_path / "c.gguf", tensors, arch=None,
                           fields={"comfy.gguf.orig_shape.patch_embedding.weight": shape})
    assert "general.architecture" not in gguf.GGUFReader(str(path)).fields
    model = load_dit(path, dtype=torch.float32)
    sd = model.state_dict()
    for k in ("head.modulation", "patch_embedding.weight", "blocks.1.ffn.0.weight"):
        assert np.array_equal(sd[k].numpy(), weights[k]), k


@pytest.mark.parametrize("arch, what", [("llama", "a language model (LLM)"),
                                        ("flux", "a Flux image model"), ("t5encoder", "a T5/umT5 text encoder")])
def test_other_architectures_refused_naming_them(tmp_path, arch, what):
    path = write_gguf_file(tmp_path / f"{arch}.gguf", {"token_embd.weight": (np.zeros((8, 32), np.float32), None)},
                           arch=arch)
    expected = f"{path.name}: {what} (GGUF general.architecture = '{arch}'), not a Wan diffusion model"
    with pytest.raises(CheckpointError, match=re.escape(expected)) as e:
        load_dit(path)
    assert "\n" not in str(e.value)


def test_truncated_file_refused_naming_it(tmp_path, files):
    data = files[1]["Q8_0"].read_bytes()
    for cut in (len(data) - 40, len(data) // 2, 200):
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(data[:cut])
        with pytest.raises(CheckpointError, match=f"{path}: .*(truncated|not a readable GGUF)") as e:
            load_dit(path)
        assert "\n" not in str(e.value)


def test_unknown_quantization_type_refused_by_name(tmp_path):
    weights = {k: (v.float().numpy(), None) for k, v in random_weights(CFG).items()}
    weights["blocks.0.ffn.0.weight"] = (np.zeros((CFG.ffn_dim, CFG.dim // 32 * 18), np.uint8), "IQ4_NL")
    path = write_gguf_file(tmp_path / "iq.gguf", weights)
    with pytest.raises(CheckpointError, match="blocks.0.ffn.0.weight is IQ4_NL, a quantization type WanCore "
                                              "cannot dequantize"):
        load_dit(path)


def test_shape_mismatch_refused(tmp_path):
    weights = {k: (v.float().numpy(), None) for k, v in random_weights(CFG).items()}
    weights["blocks.1.ffn.0.bias"] = (np.zeros(100, np.float32), None)
    path = write_gguf_file(tmp_path / "bad.gguf", weights)
    with pytest.raises(CheckpointError, match="blocks.1.ffn.0.bias: expected \\[128\\], found \\[100\\]"):
        load_dit(path)


def test_gguf_as_vae_or_text_encoder_refused(files):
    from wan_core.text.encoder import load_text_encoder
    from wan_core.vae.loader import load_vae

    for load in (load_vae, load_text_encoder):
        with pytest.raises(CheckpointError, match="GGUF is read only for Wan diffusion models") as e:
            load(files[1]["Q8_0"])
        assert "\n" not in str(e.value)


def test_fp8_weights_option_refused(files):
    with pytest.raises(ValueError, match="already quantised"):
        load_dit(files[1]["Q8_0"], weights="fp8_scaled")


def test_missing_gguf_package_named(files, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(CheckpointError, match="needs the gguf package: pip install gguf"):
        load_dit(files[1]["Q8_0"])


def test_flf2v_gguf_keeps_image_layers_quantised_and_equals_twin(tmp_path):
    cfg = DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=1, text_dim=32, in_dim=36, image_dim=24,
                    image_pos_len=2 * 257)
    path = tmp_path / "flf-Q8_0.gguf"
    write_gguf(save_safetensors(random_weights(cfg), tmp_path / "flf.safetensors"), path, "Q8_0")
    model = load_dit(path, dtype=torch.float32)
    assert model.config.image_pos_len == 2 * 257 and model.config.image_dim == 24
    assert isinstance(model.blocks[0].cross_attn.k_img, GGUFLinear)
    twin = _twin(path, model.config)
    g = torch.Generator().manual_seed(6)
    x, t, ctx = _inputs(cfg)
    x = x[:, :16]
    image = (torch.randn(1, 20, 2, 4, 4, generator=g), torch.randn(1, 2 * 257, 24, generator=g))
    with torch.no_grad():
        assert _rel(model(x, t, ctx, *image), twin(x, t, ctx, *image)) <= 1e-4
