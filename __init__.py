"""ComfyUI entry point of the WanCore node pack.

ComfyUI imports this file by path (the module name is derived from the folder path), so the core package is
made importable as ``wan_core`` from this folder, and the nodes register through the V3 API when the running
ComfyUI's V3 API accepts them (built and checked at import), else through V1 ``NODE_CLASS_MAPPINGS``.
Importing it without ComfyUI installed works (tests).
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
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["wan_core"] = module
    spec.loader.exec_module(module)


_ensure_wan_core()

from . import nodes as _nodes

# ComfyUI ignores ``comfy_entrypoint`` when ``NODE_CLASS_MAPPINGS`` exists, so exactly one is defined: V3 when
# this ComfyUI's V3 API accepts every node, else V1 (``nodes.entry_points`` logs why).
_ENTRY_POINTS = _nodes.entry_points()
if "comfy_entrypoint" in _ENTRY_POINTS:
    comfy_entrypoint = _ENTRY_POINTS["comfy_entrypoint"]
    __all__ = ["WEB_DIRECTORY", "comfy_entrypoint"]
else:
    NODE_CLASS_MAPPINGS = _ENTRY_POINTS["NODE_CLASS_MAPPINGS"]
    NODE_DISPLAY_NAME_MAPPINGS = _ENTRY_POINTS["NODE_DISPLAY_NAME_MAPPINGS"]
    __all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]
