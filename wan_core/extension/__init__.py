"""Clip extension (docs/long_video.md section 3): continue a video from its last frames, one clip or a chain of
clips, with the new frames' colour matched to the overlap. ``Extension`` is the request, ``from_pixels`` /
``from_latent`` prepare a clip's head, ``join_pixels`` / ``join_latents`` attach the clip, ``run_chain`` does it all
for a chain of clips."""
from .chain import MAX_CLIPS, ChainResult, clip_prompts, clip_seed, run_chain
from .colour import COLOUR_MATCHES, match_colour
from .head import Continuation, from_latent, from_pixels
from .join import join_latents, join_pixels
from .request import CONDITIONINGS, DEFAULT_OVERLAP, Extension

__all__ = ["COLOUR_MATCHES", "CONDITIONINGS", "ChainResult", "Continuation", "DEFAULT_OVERLAP", "Extension",
           "MAX_CLIPS", "clip_prompts", "clip_seed", "from_latent", "from_pixels", "join_latents", "join_pixels",
           "match_colour", "run_chain"]
