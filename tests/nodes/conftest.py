"""Load the pack the way ComfyUI does: by file path, under a path-derived module name."""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_pack():
    name = "custom_nodes_x_wancore_pack"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "__init__.py", submodule_search_locations=[str(ROOT)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def pack():
    return load_pack()


@pytest.fixture
def models_dir(tmp_path, monkeypatch):
    """An empty ComfyUI-style models folder used by the host adapter's fallback."""
    for sub in ("diffusion_models", "vae", "text_encoders"):
        (tmp_path / sub).mkdir()
    monkeypatch.setenv("WANCORE_MODELS_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def tiny():
    """Tiny random (dit, vae, text encoder), one set per test module."""
    from wan_core.demo import tiny_random_models

    return tiny_random_models(seed=0)


@pytest.fixture
def shown(pack, monkeypatch):
    """The texts the nodes show on the canvas (``host.show_text``), collected instead of sent."""
    texts: list[str] = []
    monkeypatch.setattr(importlib.import_module(f"{pack.__name__}.nodes.host"), "show_text", texts.append)
    return texts
