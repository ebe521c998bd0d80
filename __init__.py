"""ComfyUI entry point of the WanCore node pack.

ComfyUI imports this file by path (the module name is derived from the folder path), so the core package is
made importable as ``wan_core`` from this folder, and the nodes register through the V3 API when ComfyUI
provides it, else through V1 ``NODE_CLASS_MAPPINGS``. Importing it without ComfyUI installed works (tests).
"""
import importlib.util
import os
import sys

WEB_DIRECTORY = "./web"

_HERE = os.path.dirname(os.path.abspath(__file__))


def _ensure_wan_core() -> None:
    """Import this pack's ``wan_core`` under its own name (it uses only relative imports inside)."""
    if "wan_core" in sys.modules:
        return
    init = os.path.join(_HERE, "wan_core", "__init__.py")
    spec = importlib.util.spec_from_file_location("wan_core", init,
                                                  submodule_search_locations=[os.path.dirname(init)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["wan_core"] = module
    spec.loader.exec_module(module)


_ensure_wan_core()

from . import nodes as _nodes  # noqa: E402

try:
    import comfy_api.latest  # noqa: F401  (ComfyUI with the V3 node API)
    _HAS_V3 = True
except Exception:  # noqa: BLE001 - not inside ComfyUI, or an older ComfyUI
    _HAS_V3 = False

if _HAS_V3:
    async def comfy_entrypoint():
        return _nodes.v3_extension()

    __all__ = ["comfy_entrypoint", "WEB_DIRECTORY"]
else:
    # Defining NODE_CLASS_MAPPINGS makes ComfyUI use V1, so it exists only when V3 is unavailable.
    NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = _nodes.v1_mappings()
    __all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]
