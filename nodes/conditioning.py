"""Text encoding node: prompts -> umT5 embeddings (WANCORE_EMBEDS)."""
from __future__ import annotations

import torch

from wan_core.sampling import DEFAULT_NEGATIVE_PROMPT
from wan_core.sampling.prompt_travel import is_travel, split_segments, unique_segments
from wan_core.text.prompt import check_prompt, prompt_problem

from . import host
from .declare import Input, NodeSpec, Output


def validate_prompts(positive: str | None = None, negative: str | None = None) -> bool | str:
    """Pre-queue check of the typed prompts (an empty positive, invalid Unicode such as a lone surrogate sent
    through ``/prompt``). A linked input arrives as None and is checked when the node runs."""
    problems = [p for p in (prompt_problem(positive, "positive") if positive is not None else None,
                            prompt_problem(negative, "negative", allow_empty=True) if negative is not None else None)
                if p]
    if not problems and positive is not None:
        try:
            split_segments(positive, "positive")  # prompt travel: no empty segment
        except ValueError as e:
            problems.append(str(e))
    return "; ".join(problems) if problems else True


def text_encode(text_encoder, positive: str, negative: str = DEFAULT_NEGATIVE_PROMPT):
    """-> ``{"cond": [[L, 4096]], "uncond": [[L, 4096]], ...}`` (float32, on the CPU). A positive prompt with
    `` | `` segments (prompt travel) also gives ``"segments"``: one embedding per segment, and ``"segment_texts"``;
    the sampler uses them under context windows, ``"cond"`` (the whole prompt as written) otherwise."""
    check_prompt(positive, "positive")
    check_prompt(negative, "negative", allow_empty=True)
    segments = split_segments(positive, "positive") if is_travel(positive) else None
    with host.on_device(text_encoder), torch.inference_mode():
        cond, uncond = text_encoder.encode([positive, negative], interrupt=host.check_interrupt)
        if segments is not None:
            distinct, index = unique_segments(segments)
            embs = text_encoder.encode(distinct, interrupt=host.check_interrupt)
    embeds = {"cond": [cond.cpu()], "uncond": [uncond.cpu()], "positive": positive, "negative": negative}
    if segments is not None:
        embeds.update(segments=[embs[i].cpu() for i in index], segment_texts=list(segments))
    return (embeds,)


TEXT_ENCODE = NodeSpec(
    node_id="WanCoreTextEncode", display_name="WanCore Text Encode", category="WanCore/conditioning",
    description="Encodes the prompt and the negative prompt with umT5 (recent prompts are cached). The negative "
                "prompt defaults to Wan's official one. Prompt travel: 'a red ball | a blue ball' guides successive "
                "context windows with each segment (a sampler with a context input).",
    inputs=(
        Input("text_encoder", "WANCORE_TEXT_ENCODER"),
        Input("positive", "STRING", default="", multiline=True,
              tooltip="what the video shows; with context windows, segments separated by ' | ' guide successive "
                      "stretches of the video (prompt travel)"),
        Input("negative", "STRING", default=DEFAULT_NEGATIVE_PROMPT, multiline=True,
              tooltip="what to avoid (default: Wan's official negative prompt)"),
    ),
    outputs=(Output("WANCORE_EMBEDS", "embeds"),),
    fn=text_encode,
    validate=validate_prompts,
)

NODES = (TEXT_ENCODE,)
