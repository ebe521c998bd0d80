"""The public names of docs/design.md section 4 resolve, and ``import wan_core`` stays cheap (lazy imports)."""
import subprocess
import sys

import wan_core


def test_every_export_resolves():
    for name in wan_core.__all__:
        assert getattr(wan_core, name) is not None, name


def test_import_is_lazy():
    code = ("import sys, wan_core; heavy = [m for m in ('transformers', 'diffusers') if m in sys.modules]; "
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_pack_imports_without_comfyui():
    code = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('pack', '__init__.py', "
            "submodule_search_locations=['.']); m = importlib.util.module_from_spec(spec); sys.modules['pack'] = m; "
            "spec.loader.exec_module(m); print(sorted(m.NODE_CLASS_MAPPINGS)[0], m.WEB_DIRECTORY)")
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["WanCoreCLIPVisionLoader", "./web"]  # the first node id in sorted order
