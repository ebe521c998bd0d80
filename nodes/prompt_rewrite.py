"""Prompt rewriting node: a short prompt -> a Wan-style caption by a local instruction LLM (Wan report 4.5).

The LLM is a transformers folder under ComfyUI's ``models/LLM``; it stays loaded between runs (one at a time,
resting on the offload device) and rewrites are cached per prompt and settings.
"""
from __future__ import annotations

from typing import Any

import torch

from wan_core.text.rewrite import LANGUAGES, PromptRewriter, load_prompt_rewriter, resolve_dtype

from . import host
from .declare import Input, NodeSpec, Output

LLM_FOLDER = "LLM"  # ComfyUI model folder name (registered by the host adapter when ComfyUI lacks it)
_LOADED: dict[tuple[str, str, str], PromptRewriter] = {}  # (folder, device, dtype) -> rewriter; one LLM at a time


def _rewriter(llm_folder: str, device: str) -> PromptRewriter:
    path = host.model_folder_path(LLM_FOLDER, llm_folder)  # only a listed folder, even if validation was skipped
    target = host.torch_device() if device == "auto" else torch.device("cpu")
    dtype = resolve_dtype("auto", target)
    key = (str(path.resolve()), str(target), str(dtype))
    if key not in _LOADED:
        _LOADED.clear()  # LLMs are large: drop the previous one before loading another
        rewriter = load_prompt_rewriter(path, dtype=dtype, device="cpu")
        rewriter.wancore_device = target  # type: ignore[attr-defined]  # where it generates; offloaded between
        _LOADED[key] = rewriter
    return _LOADED[key]


def prompt_rewrite(llm_folder: str, prompt: str, seed: int = 0, max_new_tokens: int = 256, device: str = "auto",
                   temperature: float = 0.7, language: str = "auto"):
    """-> ``(rewritten prompt,)``; the original prompt (with a warning) when the LLM gives nothing usable."""
    if not prompt.strip():
        raise ValueError("prompt: the prompt is empty; write a short description of the video to rewrite")
    rewriter = _rewriter(llm_folder, device)
    settings: dict[str, Any] = dict(seed=seed, max_new_tokens=max_new_tokens, temperature=temperature,
                                    language=language)
    hit = rewriter.cached(prompt, **settings)
    if hit is not None:
        return (hit,)
    with host.Progress(max_new_tokens, "prompt rewrite") as bar:
        def on_token(generated: int, total: int) -> None:
            bar.update(generated)
            host.check_interrupt()  # raises to stop generation

        with host.on_device(rewriter):
            text = rewriter.rewrite(prompt, callback=on_token, **settings)
        bar.update(max_new_tokens)
    return (text,)


def validate_llm_folder(llm_folder: str) -> bool | str:
    """One of the model folders (holding config.json) that models/LLM lists; else the choices."""
    try:
        host.model_folder_path(LLM_FOLDER, llm_folder)
    except ValueError as e:
        return host.client_message(f"llm_folder: {e}")
    return True


PROMPT_REWRITE = NodeSpec(
    node_id="WanCorePromptRewrite", display_name="WanCore Prompt Rewrite (LLM)", category="WanCore/conditioning",
    description="Rewrites a short prompt into the long captions Wan was trained on (Wan report 4.5: style "
                "first, then a summary, then details; natural motion; meaning kept) with a local instruction "
                "LLM, a transformers folder in models/LLM (e.g. Qwen2.5-3B-Instruct). Connect the output to "
                "the positive prompt of WanCore Text Encode.",
    inputs=(
        Input("llm_folder", "COMBO", options=lambda: host.list_model_folders(LLM_FOLDER),
              tooltip="a transformers instruction model folder in models/LLM (config.json, weights, tokenizer)"),
        Input("prompt", "STRING", default="", multiline=True, tooltip="the short prompt to rewrite"),
        Input("seed", "INT", default=0, min=0, max=2**64 - 1, control_after_generate=True,
              tooltip="sampling seed (unused when temperature is 0)"),
        Input("max_new_tokens", "INT", default=256, min=1, max=2048,
              tooltip="upper bound on the rewrite's length in tokens"),
        Input("device", "COMBO", default="auto", options=("auto", "cpu"),
              tooltip="auto: ComfyUI's GPU while generating, offloaded in between; cpu: never on the GPU"),
        Input("temperature", "FLOAT", default=0.7, min=0.0, max=2.0, step=0.05, optional=True, advanced=True,
              tooltip="0: greedy (same rewrite for every seed); above 0: sampled with the seed"),
        Input("language", "COMBO", default="auto", options=LANGUAGES, optional=True, advanced=True,
              tooltip="auto: Chinese for a prompt with Chinese characters, else English"),
    ),
    outputs=(Output("STRING", "prompt", tooltip="the rewritten prompt, for WanCore Text Encode's positive"),),
    fn=prompt_rewrite,
    validate=validate_llm_folder,
    search_aliases=("prompt extend", "prompt enhance", "LLM", "rewrite"),
)

NODES = (PROMPT_REWRITE,)
