"""Synthetic captioned videos for the demo model: coloured circles and squares moving across soft backgrounds.

Every clip is a pure function of its seed (``make_clip(seed)``), so the training set is a list of seeds and
nothing is stored. A clip holds one or two objects (different colours), each with a shape, a colour, a
straight-line motion in one of four directions, a size, a speed and a start position; the caption names them:
"a red circle moving left", "a blue square moving up and a yellow circle moving right". Frame counts (4n+1)
and frame sizes (multiples of 16, several aspect ratios) vary so the bucket sampler groups real shapes.

Held-out evaluation prompts (:data:`HELD_OUT`) pair prompts with generation seeds: the single-object prompts
with seeds outside the training range, and two-object combinations that never appear in a training caption.
"""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

import torch

# RGB in [0, 1]; saturated and far apart in hue so the detector (score.py) separates them on any background.
COLOURS: dict[str, tuple[float, float, float]] = {
    "red": (0.90, 0.15, 0.15),
    "green": (0.15, 0.80, 0.25),
    "blue": (0.20, 0.35, 0.95),
    "yellow": (0.95, 0.85, 0.15),
}
SHAPES = ("circle", "square")
DIRECTIONS: dict[str, tuple[int, int]] = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}

# (width, height) and frame counts seen in training; the demo default is 64x64, 17 frames.
SIZES = ((64, 64), (80, 48), (48, 80))
SIZE_WEIGHTS = (0.6, 0.2, 0.2)
FRAME_COUNTS = (9, 17)
FRAME_WEIGHTS = (0.35, 0.65)


def untrained_size_note(width: int, height: int, frames: int) -> str | None:
    """One line saying that ``width x height``, ``frames`` lies outside the sizes the demo model was trained at
    (``SIZES``, ``FRAME_COUNTS``), or None inside them: such a run works but shows what it was never taught."""
    if (width, height) in SIZES and frames in FRAME_COUNTS:
        return None
    sizes = ", ".join(f"{w}x{h}" for w, h in SIZES)
    counts = " or ".join(str(f) for f in FRAME_COUNTS)
    return (f"note: the demo model was trained at {sizes} with {counts} frames; {width}x{height}, {frames} frames "
            f"is outside that: it runs, but expect a poor result (docs/demo_model.md)")


# Share of clips with two objects. 0.5 with 16,000 clips (8,000 two-object clips against 2,800) scored lower on
# the same VAE (55.8 % of 120 held-out pairs against 77.5 %, two objects 16.7 against 20.8 %, docs/demo_model.md)
TWO_OBJECT_SHARE = 0.35

TRAIN_SEED_LIMIT = 1_000_000  # training clips use seeds below this; held-out generation seeds start above it


@dataclass(frozen=True)
class MovingObject:
    colour: str
    shape: str
    direction: str
    size: float  # radius (circle) or half side (square), pixels
    start: tuple[float, float]  # centre (x, y) at frame 0, pixels
    speed: float  # pixels per frame

    def phrase(self) -> str:
        return f"a {self.colour} {self.shape} moving {self.direction}"

    def centre(self, frame: int) -> tuple[float, float]:
        dx, dy = DIRECTIONS[self.direction]
        return self.start[0] + dx * self.speed * frame, self.start[1] + dy * self.speed * frame


@dataclass(frozen=True)
class ClipSpec:
    seed: int
    width: int
    height: int
    frames: int
    objects: tuple[MovingObject, ...]
    background: tuple[float, float, float]
    texture: float  # amplitude of the soft background pattern (0: plain)

    @property
    def caption(self) -> str:
        return caption_of(self.objects)


def caption_of(objects) -> str:
    return " and ".join(o.phrase() for o in objects)


def parse_caption(caption: str) -> list[tuple[str, str, str]]:
    """``"a red circle moving left and a blue square moving up"`` -> ``[(red, circle, left), (blue, square, up)]``.

    Raises ``ValueError`` naming the part that does not follow the grammar and the valid words.
    """
    out = []
    for part in caption.strip().lower().split(" and "):
        words = part.split()
        if len(words) != 5 or words[0] not in ("a", "an") or words[3] != "moving":
            raise ValueError(f"caption part {part!r} is not 'a <colour> <shape> moving <direction>'")
        colour, shape, direction = words[1], words[2], words[4]
        for value, valid, what in ((colour, COLOURS, "colour"), (shape, SHAPES, "shape"),
                                   (direction, DIRECTIONS, "direction")):
            if value not in valid:
                raise ValueError(f"caption part {part!r}: unknown {what} {value!r}; valid: {', '.join(valid)}")
        out.append((colour, shape, direction))
    return out


# ---------------------------------------------------------------------------------------------- held-out set
def _two_object_combos() -> list[tuple[tuple[str, str, str], tuple[str, str, str]]]:
    singles = list(itertools.product(COLOURS, SHAPES, DIRECTIONS))
    return [(a, b) for a, b in itertools.permutations(singles, 2) if a[0] != b[0]]


def _held_out_pairs() -> list[str]:
    # a fixed, spread-out selection of two-object combinations, removed from the training captions
    rng = random.Random(20261201)
    combos = _two_object_combos()
    rng.shuffle(combos)
    return [" and ".join(f"a {c} {s} moving {d}" for c, s, d in combo) for combo in combos[:8]]


HELD_OUT_TWO_OBJECT: tuple[str, ...] = tuple(_held_out_pairs())
HELD_OUT: tuple[tuple[str, int], ...] = tuple(
    [(f"a {c} {s} moving {d}", TRAIN_SEED_LIMIT + 7 * i + 1)
     for i, (c, s, d) in enumerate(itertools.product(COLOURS, SHAPES, DIRECTIONS))]
    + [(p, TRAIN_SEED_LIMIT + 1000 + 13 * i) for i, p in enumerate(HELD_OUT_TWO_OBJECT)]
)
"""(prompt, generation seed): all 32 single-object prompts with seeds outside the training range, and 8
two-object captions that never occur in training."""


def held_out(seeds_per_prompt: int = 1) -> tuple[tuple[str, int], ...]:
    """:data:`HELD_OUT` with each prompt also at ``seeds_per_prompt - 1`` more generation seeds (offsets of
    100,000, all outside the training range): one seed per prompt scores to +-7 points (40 pairs), three to
    +-4."""
    if seeds_per_prompt < 1:
        raise ValueError(f"seeds_per_prompt must be >= 1, got {seeds_per_prompt}")
    return tuple((p, s + 100_000 * k) for k in range(seeds_per_prompt) for p, s in HELD_OUT)


# ---------------------------------------------------------------------------------------------- sampling
def _pick(rng: random.Random, values, weights):
    return rng.choices(values, weights=weights, k=1)[0]


def _object(rng: random.Random, colour: str, width: int, height: int, frames: int,
            shape: str | None = None, direction: str | None = None) -> MovingObject:
    shape = shape or rng.choice(SHAPES)
    direction = direction or rng.choice(list(DIRECTIONS))
    short = min(width, height)
    size = rng.uniform(0.11, 0.17) * short
    dx, dy = DIRECTIONS[direction]
    along = width if dx else height
    across = height if dx else width
    travel = rng.uniform(0.35, 0.6) * along  # total displacement over the clip
    speed = travel / max(frames - 1, 1)
    margin = size + 1
    lo, hi = margin, along - margin - travel
    if hi < lo:  # a large travel on a short axis: shrink it to fit
        travel = max(along - 2 * margin, 1.0)
        speed, hi = travel / max(frames - 1, 1), lo
    a0 = rng.uniform(lo, hi)
    if (dx if dx else dy) < 0:
        a0 = along - a0  # moving towards 0: start at the far end
    c = rng.uniform(margin, across - margin)
    start = (a0, c) if dx else (c, a0)
    return MovingObject(colour, shape, direction, size, start, speed)


def clip_spec(seed: int, *, width: int | None = None, height: int | None = None,
              frames: int | None = None, caption: str | None = None,
              two_object_share: float = TWO_OBJECT_SHARE) -> ClipSpec:
    """The clip of ``seed``: random layout (two objects with probability ``two_object_share``), or one that
    follows ``caption`` (and size/frames) if given."""
    rng = random.Random(seed * 7919 + 17)
    if width is None or height is None:
        width, height = _pick(rng, SIZES, SIZE_WEIGHTS)
    frames = frames or _pick(rng, FRAME_COUNTS, FRAME_WEIGHTS)
    if caption is not None:
        objs = tuple(_object(rng, c, width, height, frames, s, d) for c, s, d in parse_caption(caption))
    else:
        n = 2 if rng.random() < two_object_share else 1
        colours = rng.sample(list(COLOURS), n)
        objs = tuple(_object(rng, c, width, height, frames) for c in colours)
    grey = rng.uniform(0.05, 0.35)
    tint = [rng.uniform(-0.04, 0.04) for _ in range(3)]
    background = tuple(min(max(grey + t, 0.0), 1.0) for t in tint)
    texture = 0.0 if rng.random() < 0.5 else rng.uniform(0.02, 0.06)
    return ClipSpec(seed, width, height, frames, objs, background, texture)  # type: ignore[arg-type]


def training_spec(index: int) -> ClipSpec:
    """Training clip ``index``: ``clip_spec(seed)`` for the index-th seed whose caption is not held out."""
    return clip_spec(training_seeds(index + 1)[-1])


_held = set(HELD_OUT_TWO_OBJECT)
_seed_cache: dict[float, list[int]] = {}


def training_seeds(n: int, two_object_share: float = TWO_OBJECT_SHARE) -> list[int]:
    """The first ``n`` training seeds: 0, 1, 2, ... skipping any whose caption (at ``two_object_share``) is a
    held-out prompt."""
    cache = _seed_cache.setdefault(two_object_share, [])
    s = cache[-1] + 1 if cache else 0
    while len(cache) < n:
        if clip_spec(s, two_object_share=two_object_share).caption not in _held:
            cache.append(s)
        s += 1
    return cache[:n]


# ---------------------------------------------------------------------------------------------- rendering
def render(spec: ClipSpec) -> torch.Tensor:
    """Video ``[3, T, H, W]`` float32 in [-1, 1]: background, then each object with a 1-pixel soft edge."""
    T, H, W = spec.frames, spec.height, spec.width
    ys = torch.arange(H, dtype=torch.float32).view(1, H, 1) + 0.5
    xs = torch.arange(W, dtype=torch.float32).view(1, 1, W) + 0.5
    bg = torch.tensor(spec.background, dtype=torch.float32).view(3, 1, 1, 1).expand(3, T, H, W).clone()
    if spec.texture:
        rng = random.Random(spec.seed ^ 0x5EED)
        pattern = torch.zeros(1, H, W)
        for _ in range(3):
            fx, fy, ph = rng.uniform(0.5, 2.0), rng.uniform(0.5, 2.0), rng.uniform(0, 2 * math.pi)
            pattern = pattern + torch.sin(2 * math.pi * (fx * xs / W + fy * ys / H) + ph)
        bg = bg + spec.texture / 3 * pattern.unsqueeze(0)
    video = bg
    t = torch.arange(T, dtype=torch.float32).view(T, 1, 1)
    for obj in spec.objects:
        dx, dy = DIRECTIONS[obj.direction]
        cx = obj.start[0] + dx * obj.speed * t
        cy = obj.start[1] + dy * obj.speed * t
        if obj.shape == "circle":
            dist = torch.sqrt((xs - cx) ** 2 + (ys - cy) ** 2) - obj.size
        else:
            dist = torch.maximum((xs - cx).abs(), (ys - cy).abs()) - obj.size
        cover = (0.5 - dist).clamp(0.0, 1.0).unsqueeze(0)  # [1, T, H, W]
        colour = torch.tensor(COLOURS[obj.colour], dtype=torch.float32).view(3, 1, 1, 1)
        video = video * (1 - cover) + colour * cover
    return (video.clamp(0.0, 1.0) * 2 - 1).contiguous()


def make_clip(seed: int, **kwargs) -> tuple[torch.Tensor, str]:
    """(video ``[3, T, H, W]`` in [-1, 1], caption) for ``seed`` (keywords as :func:`clip_spec`)."""
    spec = clip_spec(seed, **kwargs)
    return render(spec), spec.caption


__all__ = ["COLOURS", "SHAPES", "DIRECTIONS", "SIZES", "FRAME_COUNTS", "HELD_OUT", "HELD_OUT_TWO_OBJECT",
           "untrained_size_note", "held_out", "TRAIN_SEED_LIMIT", "MovingObject", "ClipSpec", "clip_spec",
           "caption_of", "parse_caption", "render", "make_clip", "training_seeds", "training_spec"]
