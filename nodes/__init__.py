"""The ComfyUI node layer: every node declared once (``declare.NodeSpec``), registered as V3 or V1."""
from __future__ import annotations

from . import conditioning, latent, models, prompt_rewrite, sampler, vae
from .declare import NodeSpec, v1_class, v3_class

NODE_SPECS: tuple[NodeSpec, ...] = (
    *models.NODES, *conditioning.NODES, *prompt_rewrite.NODES, *latent.NODES, *sampler.NODES, *vae.NODES,
)


def v1_mappings() -> tuple[dict, dict]:
    classes = {s.node_id: v1_class(s) for s in NODE_SPECS}
    names = {s.node_id: s.display_name for s in NODE_SPECS}
    return classes, names


def v3_extension():
    """The ``ComfyExtension`` for ComfyUI's V3 API (``comfy_api.latest``)."""
    from comfy_api.latest import ComfyExtension, io  # type: ignore[import-not-found]

    nodes = [v3_class(s, io) for s in NODE_SPECS]

    class WanCoreExtension(ComfyExtension):
        async def get_node_list(self):
            return nodes

    return WanCoreExtension()
