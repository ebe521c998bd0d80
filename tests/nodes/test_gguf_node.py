"""The DiT loader node lists the .gguf files of models/diffusion_models and models/unet (ComfyUI's own lists leave
them out) and loads them with their weights kept in blocks; other folders do not list GGUF files."""
from __future__ import annotations

import types
from importlib import import_module

import pytest
import torch

from wan_core.config import DiTConfig
from wan_core.quant.gguf_linear import GGUFLinear

from ..dit.gguf_files import random_weights, save_safetensors

pytest.importorskip("gguf")
from wan_core.quant.gguf_writer import write_gguf  # noqa: E402

CFG = DiTConfig(dim=64, ffn_dim=128, num_heads=2, num_layers=1, text_dim=32)


@pytest.fixture
def gguf_models(pack, models_dir, tmp_path):
    src = save_safetensors(random_weights(CFG), tmp_path / "m.safetensors")
    for rel in ("unet/wan-Q8_0.gguf", "diffusion_models/wan22/high-Q4_0.gguf", "vae/not-a-vae.gguf"):
        (models_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        write_gguf(src, models_dir / rel, "Q4_0" if "Q4_0" in rel else "Q8_0")
    return types.SimpleNamespace(host=import_module(f"{pack.__name__}.nodes.host"),
                                 models=import_module(f"{pack.__name__}.nodes.models"), root=models_dir)


def test_gguf_files_listed_validated_and_loaded(gguf_models):
    host, models = gguf_models.host, gguf_models.models
    names = host.list_models("diffusion_models")
    assert {"wan-Q8_0.gguf", "wan22/high-Q4_0.gguf"} <= set(names)
    assert not any(n.endswith(".gguf") for n in host.list_models("vae"))
    assert models.validate_model("wan22/high-Q4_0.gguf") is True
    (dit,) = models.load_model("wan22/high-Q4_0.gguf")
    q = dit.blocks[0].self_attn.q
    assert isinstance(q, GGUFLinear) and q.qtype == "Q4_0" and q.compute_dtype == torch.float32  # CPU: fp32


def test_inside_comfyui_gguf_files_come_from_the_folder_directories(gguf_models, monkeypatch):
    host, root = gguf_models.host, gguf_models.root
    dirs = [root / "diffusion_models", root / "unet"]
    fake = types.SimpleNamespace(
        models_dir=str(root), folder_names_and_paths={"diffusion_models": ([str(d) for d in dirs], set())},
        get_filename_list=lambda folder: [],  # ComfyUI lists no .gguf
        get_full_path=lambda folder, name: None,
        get_folder_paths=lambda folder: [str(d) for d in dirs] if folder == "diffusion_models" else [],
        add_model_folder_path=lambda name, path: None)
    monkeypatch.setattr(host, "IN_COMFYUI", True)
    monkeypatch.setattr(host, "_folder_paths", fake)
    assert [n for n in host.list_models("diffusion_models") if "built-in" not in n] == [
        "wan-Q8_0.gguf", "wan22/high-Q4_0.gguf"]
    assert host.model_path("diffusion_models", "wan-Q8_0.gguf") == root / "unet" / "wan-Q8_0.gguf"
    with pytest.raises(host.NotInList):
        host.model_path("diffusion_models", str(root / "vae" / "not-a-vae.gguf"))
