"""Prompt travel through WanCore Text Encode -> WanCore Sampler (docs/long_video.md): a ' | ' positive prompt gives
one embedding per segment besides the whole prompt's (so a workflow without windows runs as before), an empty
segment is refused before queueing, and the sampler uses the segments only under context windows, saying how."""
from __future__ import annotations

from importlib import import_module
from types import SimpleNamespace

import pytest
import torch



@pytest.fixture(scope="module")
def node(pack):
    names = ("context", "sampler", "conditioning", "latent", "host")
    return SimpleNamespace(**{n: import_module(f"{pack.__name__}.nodes.{n}") for n in names})




def test_text_encode_keeps_the_whole_prompt_and_adds_the_segments(node, tiny):
    te = tiny[2]
    (embeds,) = node.conditioning.text_encode(te, "a fox | a hen | a fox", "")
    with torch.inference_mode():
        whole, _ = te.encode(["a fox | a hen | a fox", ""])
        fox, hen = te.encode(["a fox", "a hen"])
    assert torch.equal(embeds["cond"][0], whole.cpu())  # as before travel existed
    assert embeds["segment_texts"] == ["a fox", "a hen", "a fox"]
    assert [torch.equal(a, b.cpu()) for a, b in zip(embeds["segments"], (fox, hen, fox))] == [True] * 3
    (plain,) = node.conditioning.text_encode(te, "a fox|a hen", "")
    assert "segments" not in plain


def test_empty_segment_is_refused_before_queueing(node):
    assert node.conditioning.validate_prompts("a fox | ", "") == ("positive: prompt travel segment 2 of 2 is empty; "
                                                                  "write 'first prompt | second prompt' with text on "
                                                                  "both sides of each ' | '")
    assert node.conditioning.validate_prompts("a fox | a hen", "") is True


def _sample(node, tiny, embeds, frames: int, context=None, batch: int = 1):
    (lat,) = node.latent.empty_latent(64, 48, frames, batch)
    (out,) = node.sampler.sample(tiny[0], embeds, lat, seed=5, steps=2, guidance=5.0, context=context)
    return out["samples"]


def test_sampler_travels_only_under_windows(node, tiny, shown):
    (embeds,) = node.conditioning.text_encode(tiny[2], "a fox | a hen", "")
    without = {k: v for k, v in embeds.items() if k not in ("segments", "segment_texts")}
    (ctx,) = node.context.make_context(17, 8)
    travelled = _sample(node, tiny, embeds, 33, ctx)
    # 33 frames = 9 latent: bodies 1-4, 3-6, 5-8; centres 2, 4, 6 of 8 positions, cut at 4
    assert "prompt travel: 2 segments over 3 windows: 'a fox' -> window 1; 'a hen' -> windows 2-3" in shown[-1]
    first = {**without, "cond": [embeds["segments"][0]]}
    assert not torch.allclose(travelled, _sample(node, tiny, first, 33, ctx), atol=1e-4)
    assert torch.equal(_sample(node, tiny, embeds, 33), _sample(node, tiny, without, 33))  # no windows: as written
    assert "need a context input" in shown[-2]
    assert torch.equal(_sample(node, tiny, embeds, 17, ctx), _sample(node, tiny, first, 17, ctx))  # one window
    assert "only the first of its 2 segments guides it ('a fox')" in shown[-2]
    with pytest.raises(ValueError, match="latent batch is 2"):
        _sample(node, tiny, embeds, 33, ctx, batch=2)
