"""``python -m wan_core quantize``: a GGUF the DiT loader reads back; bad requests exit 2 before any work."""
from __future__ import annotations

import pytest
import torch

from wan_core import load_dit
from wan_core.cli import main
from wan_core.config import DiTConfig
from wan_core.quant.gguf_linear import GGUFLinear

from ..dit.gguf_files import random_weights, save_safetensors

pytest.importorskip("gguf")
CFG = DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=1, text_dim=32)


def test_quantize_writes_a_loadable_gguf_and_never_overwrites(tmp_path, capsys):
    src = save_safetensors(random_weights(CFG), tmp_path / "m.safetensors")
    out = tmp_path / "m-Q5_0.gguf"
    assert main(["quantize", str(src), str(out), "--type", "Q5_0"]) == 0
    assert "wrote" in capsys.readouterr().err
    model = load_dit(out, dtype=torch.float32)
    assert isinstance(model.blocks[0].cross_attn.k, GGUFLinear) and model.blocks[0].cross_attn.k.qtype == "Q5_0"
    before = out.read_bytes()
    assert main(["quantize", str(src), str(out), "--type", "Q8_0"]) == 2
    assert "already exists" in capsys.readouterr().err and out.read_bytes() == before


@pytest.mark.parametrize("args, message", [
    (["missing.safetensors", "o.gguf", "--type", "Q8_0"], "no such file"),
    (["m.safetensors", "o.safetensors", "--type", "Q8_0"], "must be a .gguf file"),
    (["m.safetensors", "o.gguf", "--type", "Q4_K"], "invalid choice"),
])
def test_bad_requests_exit_2_in_one_line(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.safetensors").write_bytes(b"x")
    assert main(["quantize", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_models_dir_search_finds_gguf_dits_only(tmp_path):
    from wan_core.cli.model_files import candidates, identify

    src = save_safetensors(random_weights(CFG), tmp_path / "m.safetensors")
    (tmp_path / "models" / "unet").mkdir(parents=True)
    (tmp_path / "models" / "vae").mkdir()
    dit = tmp_path / "models" / "unet" / "wan-Q8_0.gguf"
    assert main(["quantize", str(src), str(dit), "--type", "Q8_0"]) == 0
    (tmp_path / "models" / "vae" / "v.gguf").write_bytes(dit.read_bytes())
    assert candidates(tmp_path / "models", "dit") == [dit]
    assert candidates(tmp_path / "models", "vae") == []
    found = identify(dit, "dit")
    assert found.ok and found.what.startswith("Wan 2.1 T2V DiT"), found


def test_written_types_follow_city96():
    from wan_core.quant.gguf_writer import tensor_type

    f32 = torch.float32
    assert tensor_type("blocks.3.cross_attn.v_img.weight", (64, 64), f32, "Q4_1") == "Q4_1"
    assert tensor_type("blocks.0.ffn.2.weight", (64, 100), f32, "Q8_0") == "F16"  # rows not whole blocks
    assert tensor_type("patch_embedding.weight", (64, 16, 1, 2, 2), torch.bfloat16, "Q8_0") == "F32"
    assert tensor_type("text_embedding.0.weight", (64, 32), torch.bfloat16, "Q8_0") == "BF16"
    assert tensor_type("blocks.0.ffn.0.bias", (128,), torch.float16, "Q8_0") == "F16"


def test_the_demo_dit_keeps_its_text_length_and_output(tmp_path):
    """The built-in demo DiT records text length 32 in its header; its GGUF must carry it, or the loaded model
    would pad prompts to 512 rows and compute something else."""
    from wan_core.demo import builtin_paths

    out = tmp_path / "demo-F16.gguf"
    assert main(["quantize", str(builtin_paths()["dit"]), str(out), "--type", "F16"]) == 0
    ref = load_dit(builtin_paths()["dit"], dtype=torch.float32)
    got = load_dit(out, dtype=torch.float32)
    assert got.config == ref.config and got.config.text_len == 32
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 16, 2, 4, 4, generator=g)
    ctx = [torch.randn(5, ref.config.text_dim, generator=g)]
    with torch.no_grad():
        torch.testing.assert_close(got(x, torch.tensor([500]), ctx), ref(x, torch.tensor([500]), ctx))
