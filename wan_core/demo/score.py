"""Prompt-following score for the demo model: a deterministic detector for the synthetic-video grammar.

For each colour named in the prompt the detector segments that colour (nearest reference colour among
``data.COLOURS``, saturated pixels only, so the grey backgrounds never count), tracks the segment's centroid
over the frames, fits a straight line to the trajectory and reads the direction from the dominant axis of
the displacement; the shape comes from the fill ratio (segment area / bounding-box area: pi/4 for a circle,
1 for a square). A prompt is *followed* when every object it names is found in its colour and moves in its
direction (the issue's criterion); the shape is reported alongside.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .data import COLOURS, DIRECTIONS, parse_caption

MIN_SATURATION = 0.3  # max(rgb) - min(rgb); backgrounds stay below ~0.15
MAX_COLOUR_DISTANCE = 0.35  # RGB distance to the nearest reference colour
MIN_AREA_FRACTION = 0.008  # of the frame (the smallest training object covers ~3.5%)
MIN_TRAVEL_FRACTION = 0.08  # displacement over the clip, of the frame size along the axis
SQUARE_FILL = 0.89  # fill ratio above which a segment counts as a square (circle pi/4 = 0.785)


@dataclass
class ObjectResult:
    colour: str
    shape: str
    direction: str
    found: bool = False
    detected_direction: str = "none"
    detected_shape: str = "none"
    displacement: tuple[float, float] = (0.0, 0.0)  # pixels (x right, y down) over the clip

    @property
    def followed(self) -> bool:
        return self.found and self.detected_direction == self.direction

    @property
    def shape_ok(self) -> bool:
        return self.found and self.detected_shape == self.shape


@dataclass
class ClipScore:
    prompt: str
    objects: list[ObjectResult] = field(default_factory=list)

    @property
    def followed(self) -> bool:
        """Every named object found in its colour and moving in its direction."""
        return all(o.followed for o in self.objects)

    @property
    def shapes_ok(self) -> bool:
        return all(o.shape_ok for o in self.objects)


def _to_unit(video: torch.Tensor) -> torch.Tensor:
    """[3, T, H, W] or [1, 3, T, H, W] in [-1, 1] -> [T, H, W, 3] float in [0, 1]."""
    if video.dim() == 5:
        if video.shape[0] != 1:
            raise ValueError(f"score one video at a time, got a batch of {video.shape[0]}")
        video = video[0]
    if video.dim() != 4 or video.shape[0] != 3:
        raise ValueError(f"expected a video [3, T, H, W] in [-1, 1], got shape {list(video.shape)}")
    return ((video.detach().float().cpu() + 1) / 2).clamp(0, 1).permute(1, 2, 3, 0)


def colour_masks(video: torch.Tensor) -> dict[str, torch.Tensor]:
    """``{colour: bool mask [T, H, W]}``: saturated pixels labelled with their nearest reference colour."""
    rgb = _to_unit(video)
    refs = torch.tensor(list(COLOURS.values()), dtype=torch.float32)  # [K, 3]
    dist = torch.cdist(rgb.reshape(-1, 3), refs).reshape(*rgb.shape[:3], len(COLOURS))
    best, label = dist.min(dim=-1)
    sat = rgb.max(dim=-1).values - rgb.min(dim=-1).values
    ok = (sat >= MIN_SATURATION) & (best <= MAX_COLOUR_DISTANCE)
    return {name: ok & (label == k) for k, name in enumerate(COLOURS)}


def _direction(dx: float, dy: float, width: int, height: int) -> str:
    if abs(dx) / width >= abs(dy) / height:
        if abs(dx) < MIN_TRAVEL_FRACTION * width:
            return "none"
        return "right" if dx > 0 else "left"
    if abs(dy) < MIN_TRAVEL_FRACTION * height:
        return "none"
    return "down" if dy > 0 else "up"


def track(mask: torch.Tensor) -> tuple[bool, tuple[float, float], str]:
    """(found, displacement (dx, dy) from a least-squares line through the centroids, shape) of one mask
    [T, H, W]. Found: the segment covers ``MIN_AREA_FRACTION`` of the frame in at least half the frames."""
    t_, h, w = mask.shape
    area = mask.flatten(1).sum(1).float()
    valid = area >= MIN_AREA_FRACTION * h * w
    if int(valid.sum()) < max(2, (t_ + 1) // 2):
        return False, (0.0, 0.0), "none"
    ys = torch.arange(h, dtype=torch.float32).view(1, h, 1)
    xs = torch.arange(w, dtype=torch.float32).view(1, 1, w)
    m = mask.float()
    cx = (m * xs).flatten(1).sum(1) / area.clamp_min(1)
    cy = (m * ys).flatten(1).sum(1) / area.clamp_min(1)
    t = torch.arange(t_, dtype=torch.float32)[valid]
    tc = t - t.mean()
    denom = float((tc ** 2).sum()) or 1.0
    vx = float((tc * (cx[valid] - cx[valid].mean())).sum()) / denom
    vy = float((tc * (cy[valid] - cy[valid].mean())).sum()) / denom
    # fill ratio (area / bounding box) in the frames where the segment is (nearly) whole: two objects may
    # overlap for a while
    whole = valid & (area >= 0.8 * float(area.max()))
    rows, cols = mask.any(2), mask.any(1)  # [T, H], [T, W]
    ih, iw = torch.arange(h), torch.arange(w)
    height = torch.where(rows, ih, -1).max(1).values - torch.where(rows, ih, h).min(1).values + 1
    width = torch.where(cols, iw, -1).max(1).values - torch.where(cols, iw, w).min(1).values + 1
    fills = (area / (height * width).clamp_min(1).float())[whole]
    fill = float(fills.median())
    shape = "square" if fill >= SQUARE_FILL else "circle"
    return True, (vx * (t_ - 1), vy * (t_ - 1)), shape


def score_clip(video: torch.Tensor, prompt: str) -> ClipScore:
    """Score one video ``[3, T, H, W]`` (or ``[1, 3, T, H, W]``) in [-1, 1] against its prompt."""
    parsed = parse_caption(prompt)
    masks = colour_masks(video)
    _, h, w = next(iter(masks.values())).shape
    result = ClipScore(prompt)
    for colour, shape, direction in parsed:
        found, (dx, dy), got_shape = track(masks[colour])
        obj = ObjectResult(colour, shape, direction, found=found, detected_shape=got_shape,
                           displacement=(round(dx, 2), round(dy, 2)))
        if found:
            obj.detected_direction = _direction(dx, dy, w, h)
        result.objects.append(obj)
    return result


@dataclass
class Score:
    """Aggregate over clips: fraction followed (colour and direction), and with the shape too."""

    clips: list[ClipScore]

    @property
    def followed(self) -> float:
        return sum(c.followed for c in self.clips) / max(len(self.clips), 1)

    @property
    def followed_with_shape(self) -> float:
        return sum(c.followed and c.shapes_ok for c in self.clips) / max(len(self.clips), 1)

    def subset(self, objects: int) -> "Score":
        return Score([c for c in self.clips if len(c.objects) == objects])


def score_clips(videos, prompts) -> Score:
    return Score([score_clip(v, p) for v, p in zip(videos, prompts)])


__all__ = ["ClipScore", "ObjectResult", "Score", "colour_masks", "score_clip", "score_clips", "track",
           "DIRECTIONS"]
