"""Shared pytest setup: deterministic, single-threaded-friendly defaults for the CPU test suite."""
import shutil
from pathlib import Path

import pytest
import torch

torch.manual_seed(0)

WEB = Path(__file__).resolve().parents[1] / "web"


WEB_APP_STUB = ("export const app = { extensions: [], registerExtension(e) { this.extensions.push(e); },"
                " graph: null };\n")
WEB_API_STUB = "export const api = { async fetchApi() { return { ok: false }; } };\n"


@pytest.fixture
def web_stage(tmp_path):
    """Stage ``web/`` as ComfyUI serves it (``extensions/wancore/``) beside stubs of the frontend's
    ``scripts/app.js`` and ``scripts/api.js``, for Node.js harnesses; returns ``stage(app_stub=None) -> dir``."""
    def stage(app_stub: str | None = None, api_stub: str | None = None) -> Path:
        ext = tmp_path / "extensions" / "wancore"
        ext.mkdir(parents=True, exist_ok=True)
        for p in WEB.iterdir():
            shutil.copy(p, ext / p.name)
        (tmp_path / "scripts").mkdir(exist_ok=True)
        (tmp_path / "scripts" / "app.js").write_text(app_stub or WEB_APP_STUB)
        (tmp_path / "scripts" / "api.js").write_text(api_stub or WEB_API_STUB)
        (tmp_path / "package.json").write_text('{"type": "module"}')
        return tmp_path
    return stage
