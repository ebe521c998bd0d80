"""The ComfyUI node layer: every node declared once (``declare.NodeSpec``), registered as V3 or V1."""
from __future__ import annotations

import logging
from typing import Any

from . import (cache, conditioning, context, extend, host, i2v, latent, lora, models, native, parallel, prompt_rewrite,
               sampler, vace, vae, wan22)
from .declare import NodeSpec, use_client_text, v1_class, v3_class

use_client_text(host.client_message)  # node errors reach API clients with model paths as <folder>/<file>
host.register_routes()  # the canvas estimate reads a DiT file's size by its name (web/wancore.js)

NODE_SPECS: tuple[NodeSpec, ...] = (
    *models.NODES, *conditioning.NODES, *prompt_rewrite.NODES, *latent.NODES, *sampler.NODES, *cache.NODES,
    *context.NODES, *extend.NODES, *vae.NODES, *native.NODES, *lora.NODES, *i2v.NODES, *parallel.NODES, *wan22.NODES,
    *vace.NODES,
)

LOG = logging.getLogger("WanCore")
models.register_demo_model()


def v1_mappings() -> tuple[dict, dict]:
    """``NODE_CLASS_MAPPINGS`` and ``NODE_DISPLAY_NAME_MAPPINGS`` for ComfyUI's V1 API."""
    classes = {s.node_id: v1_class(s) for s in NODE_SPECS}
    names = {s.node_id: s.display_name for s in NODE_SPECS}
    return classes, names


def v3_nodes(io, dropped: set[str] | None = None) -> list[type]:
    """The V3 node classes, each schema built and checked now.

    ComfyUI builds a schema only after the import, inside ``comfy_entrypoint``, where a failure drops the
    whole pack; building it here lets the caller fall back to V1 instead."""
    nodes = [v3_class(s, io, dropped) for s in NODE_SPECS]
    for spec, node in zip(NODE_SPECS, nodes):
        schema = node.GET_SCHEMA()  # type: ignore[attr-defined]
        if schema.node_id != spec.node_id:
            raise ValueError(f"schema of {spec.node_id} came back as {schema.node_id!r}")
    return nodes


def v3_extension(api=None, dropped: set[str] | None = None):
    """The ``ComfyExtension`` for ComfyUI's V3 API (``api`` = ``comfy_api.latest``)."""
    if api is None:
        from comfy_api import latest as api  # type: ignore[no-redef]

    nodes = v3_nodes(api.io, dropped)

    class WanCoreExtension(api.ComfyExtension):
        async def get_node_list(self):
            return list(nodes)

    return WanCoreExtension()


def _comfy_v3_api():
    """``comfy_api.latest`` when running inside a ComfyUI that has it, else None."""
    try:
        from comfy_api import latest
    except ModuleNotFoundError:  # not inside ComfyUI, or a ComfyUI older than the V3 API
        return None
    except Exception as e:  # noqa: BLE001 - a broken V3 module must not stop the V1 path
        LOG.warning("WanCore: registering through the V1 API: importing comfy_api.latest failed (%s: %s)",
                    type(e).__name__, e)
        return None
    return latest


def entry_points(api: Any = "auto") -> dict[str, Any]:
    """The module attributes ComfyUI registers this pack by.

    ComfyUI (``nodes.py load_custom_node``) registers V1 ``NODE_CLASS_MAPPINGS`` when the module has them
    and only otherwise calls ``comfy_entrypoint`` (V3), so exactly one of the two is returned: V3 when this
    ComfyUI's ``io`` accepts every node (cosmetic keywords it does not know are left out), else V1 with
    one log line saying why. ``api``: ``comfy_api.latest`` or a stand-in; ``"auto"`` imports it; None = V1.
    """
    if api == "auto":
        api = _comfy_v3_api()
    if api is not None:
        dropped: set[str] = set()
        try:
            extension = v3_extension(api, dropped)
        except Exception as e:  # noqa: BLE001 - any refusal by this ComfyUI's V3 API: V1 still works
            LOG.warning("WanCore: registering through the V1 API (NODE_CLASS_MAPPINGS) because this ComfyUI's "
                        "V3 API refused the nodes: %s: %s", type(e).__name__, e)
        else:
            if dropped:
                LOG.info("WanCore: this ComfyUI's V3 API has no %s; left out (display only)",
                         ", ".join(sorted(dropped)))

            async def comfy_entrypoint():
                return extension

            return {"comfy_entrypoint": comfy_entrypoint}
    classes, names = v1_mappings()
    return {"NODE_CLASS_MAPPINGS": classes, "NODE_DISPLAY_NAME_MAPPINGS": names}
