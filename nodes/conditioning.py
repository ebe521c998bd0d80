"""Text encoding node: prompts -> umT5 embeddings (WANCORE_EMBEDS)."""
from __future__ import annotations

import torch

from wan_core.sampling import DEFAULT_NEGATIVE_PROMPT

from . import host
from .declare import Input, NodeSpec, Output


def text_encode(text_encoder, positive: str, negative: str = DEFAULT_NEGATIVE_PROMPT):
    """-> ``{"cond": [[L, 4096]], "uncond": [[L, 4096]], ...}`` (float32, on the CPU)."""
    if not positive.strip():
        raise ValueError("positive: the prompt is empty; describe the video to generate")
    with host.on_device(text_encoder), torch.inference_mode():
        cond, uncond = text_encoder.encode([positive, negative])
    return ({"cond": [cond.cpu()], "uncond": [uncond.cpu()], "positive": positive, "negative": negative},)


TEXT_ENCODE = NodeSpec(
    node_id="WanCoreTextEncode", display_name="WanCore Text Encode", category="WanCore/conditioning",
    description="Encodes the prompt and the negative prompt with umT5 (recent prompts are cached). The negative "
                "prompt defaults to Wan's official one.",
    inputs=(
        Input("text_encoder", "WANCORE_TEXT_ENCODER"),
        Input("positive", "STRING", default="", multiline=True, tooltip="what the video shows"),
        Input("negative", "STRING", default=DEFAULT_NEGATIVE_PROMPT, multiline=True,
              tooltip="what to avoid (default: Wan's official negative prompt)"),
    ),
    outputs=(Output("WANCORE_EMBEDS", "embeds"),),
    fn=text_encode,
)

NODES = (TEXT_ENCODE,)
