"""Pixel inputs of the demo VACE branch's tasks: the object's track as a control video, and a colour patch as a
reference image (docs/demo_model.md, "The VACE branch").

* control: the clip's objects drawn white on black at their positions (a silhouette video; mask all ones, so the
  whole video is generated and the silhouettes are the reactive part the branch reads);
* reference: an image filled with one of ``data.COLOURS`` (the object's colour);
* plain: neither (``wan_core.vace.vace_context`` with a size only: a grey video, mask all ones).
"""
from __future__ import annotations

from dataclasses import replace

import torch

from . import data as D

__all__ = ["TASKS", "colour_patch", "silhouette_video", "track_centres"]

TASKS = ("control", "reference", "plain")


def silhouette_video(spec: D.ClipSpec) -> torch.Tensor:
    """``[3, T, H, W]`` in [-1, 1]: every object of ``spec`` white (1) on black (-1), 1-pixel soft edges, where the
    clip draws it. Rendered by ``data.render`` on black, one object at a time: its coverage is the rendered value
    over the colour's brightest channel."""
    cover = torch.zeros(spec.frames, spec.height, spec.width)
    for obj in spec.objects:
        alone = replace(spec, objects=(obj,), background=(0.0, 0.0, 0.0), texture=0.0)
        unit = (D.render(alone) + 1) / 2  # [3, T, H, W] in [0, 1]
        cover = torch.maximum(cover, unit.amax(0) / max(D.COLOURS[obj.colour]))
    return (cover.clamp(0, 1) * 2 - 1).unsqueeze(0).expand(3, -1, -1, -1).contiguous()


def colour_patch(colour: str, height: int, width: int) -> torch.Tensor:
    """``[3, height, width]`` in [-1, 1] filled with ``data.COLOURS[colour]``."""
    if colour not in D.COLOURS:
        raise ValueError(f"colour {colour!r} is not one of {', '.join(D.COLOURS)}")
    rgb = torch.tensor(D.COLOURS[colour], dtype=torch.float32) * 2 - 1
    return rgb.view(3, 1, 1).expand(3, height, width).contiguous()


def track_centres(spec: D.ClipSpec, index: int = 0) -> torch.Tensor:
    """``[T, 2]`` (x, y) pixel centres of object ``index`` per frame (the detector's centroid coordinates: pixel
    ``i`` has centre ``i + 0.5`` in the renderer, ``i`` in the detector, hence the half pixel)."""
    obj = spec.objects[index]
    return torch.tensor([obj.centre(f) for f in range(spec.frames)], dtype=torch.float32) - 0.5
