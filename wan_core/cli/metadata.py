"""The prompt, seed and settings stored in the output file (``wan_core.cli.video_io.read_metadata``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import loras

if TYPE_CHECKING:
    from .request import GenerateRequest


def output_metadata(request: "GenerateRequest", cfg, files: dict | None) -> dict:
    """The request's settings as stored; ``cfg``: the run's ``GenerationConfig`` with its negative prompt filled
    in; ``files``: the model files (None: the preset's name is stored)."""
    from .. import __version__

    meta = {"prompt": request.prompt, "negative_prompt": cfg.negative_prompt, "seed": request.seed,
            "steps": request.steps, "guidance": request.guidance, "shift": request.shift, "solver": request.solver,
            "convention": request.convention, "width": request.width, "height": request.height,
            "frames": request.frames, "fps": request.fps, "attention": request.attention,
            "skiparse": request.skiparse, "weights": request.weights, "loras": loras.names(request.lora),
            "nag": [request.nag_scale, request.nag_tau, request.nag_alpha] if request.nag_scale != 1.0 else None,
            "models": ({part: f.path.name for part, f in files.items()} if files else request.preset),
            "generator": f"ComfyUI-WanCore {__version__} (python -m wan_core)"}
    windows = request.context_windows()
    if windows is not None:  # only when asked for: runs without windows store what they always did
        meta["context"] = {"frames": request.context_frames, "latent_window": windows.length,
                           "latent_overlap": windows.overlap, "schedule": windows.schedule,
                           "stride": windows.stride, "fuse": windows.fuse, "anchor": windows.anchor,
                           "freenoise": windows.freenoise}
    if request.riflex != "off":
        meta["riflex"] = request.riflex
    for name, specs in (("high", request.lora_high), ("low", request.lora_low)):  # "loras_high" / "loras_low"
        if specs:
            meta[f"loras_{name}"] = loras.names(specs)
    return meta
