"""Context windows: sample a video longer than the model was trained on as overlapping windows of latent frames,
each denoised by the model on its own at every step and fused back with per-frame weights (docs/long_video.md).

Semantics follow ComfyUI's ``WanContextWindowsManual`` where it has them: the user gives the window and the
overlap in real frames, the window is 4n+1 and becomes ``(frames - 1) // 4 + 1`` latent frames, the overlap
``(overlap - 1) // 4 + 1``; schedules ``static`` (fixed windows, the last one moved back to end on the last
frame), ``uniform`` (the windows slide by a different offset at every step, and with ``stride`` > 1 also come
with dilated windows of every 2nd, 4th, ... frame) and ``looped`` (as uniform, wrapping around: a closed loop);
fuse weights ``pyramid`` (rising to the window's middle), ``flat`` and ``linear`` (ramps over the overlap only).

Wan's latent frame 0 is one image frame (the causal VAE encodes the first pixel frame alone, every later latent
frame holds four), and the model always sees it at temporal position 0. A window that starts later would make
the model draw its first frame as such an image frame. So with ``anchor`` (the default outside looped
schedules) latent frame 0 heads every window at position 0 and the window's other frames follow: the model sees
what it was trained on, every window shares the start of the video (for image-to-video it is the start image,
as native's ``cond_retain_index_list=[0]`` keeps it), and frame 0's prediction is fused from all windows.

FreeNoise (Qiu et al. 2024, noise rescheduling): the noise of the frames that enter a window at each hop is the
noise of the frames that left it, shuffled, so every window starts from the same set of noise frames.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal, get_args

import torch

Schedule = Literal["static", "uniform", "looped"]
Fuse = Literal["pyramid", "flat", "linear"]
SCHEDULES: tuple[str, ...] = get_args(Schedule)
FUSES: tuple[str, ...] = get_args(Fuse)
MAX_STRIDE = 8
_RAMP_FLOOR = 1e-6  # the smallest weight a linear ramp gives: every covered frame keeps a positive total


def latent_length(frames: int) -> int:
    """Real frames -> latent frames (ComfyUI's conversion; 4n+1 frames map exactly)."""
    return max((frames - 1) // 4 + 1, 1)


def latent_overlap(frames: int) -> int:
    """Real overlap frames -> latent frames (ComfyUI's conversion: 0 stays 0, 1..4 become 1, ...)."""
    return max((frames - 1) // 4 + 1, 0)


def ordered_halving(step: int) -> float:
    """The bit-reversed fraction of ``step`` (0, 1/2, 1/4, 3/4, ...): a different, well-spread offset per step."""
    return int(f"{step:064b}"[::-1], 2) / (1 << 64)


@dataclass(frozen=True)
class ContextWindows:
    """Windows over latent frames. ``length`` and ``overlap`` in latent frames (``from_frames`` takes real frames);
    ``anchor`` None = on except for looped windows (a loop has no first frame)."""

    length: int
    overlap: int
    schedule: Schedule = "static"
    stride: int = 1
    fuse: Fuse = "pyramid"
    freenoise: bool = False
    anchor: bool | None = None
    seed_offset: int = field(default=0, repr=False)  # FreeNoise's shuffles: seed + this
    # latent frames at the front of every window (VACE reference frames): the windows slide over the frames after
    # them and each window holds them first, as the model saw them in training (docs/vace.md section 3)
    head: int = 0

    def __post_init__(self):
        if isinstance(self.head, bool) or not isinstance(self.head, int) or self.head < 0:
            raise ValueError(f"context head={self.head!r} latent frames: must be an integer >= 0")
        if self.anchor is None:
            object.__setattr__(self, "anchor", self.schedule != "looped")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"context schedule={self.schedule!r}: must be one of {', '.join(SCHEDULES)}")
        if self.fuse not in FUSES:
            raise ValueError(f"context fuse={self.fuse!r}: must be one of {', '.join(FUSES)}")
        if self.anchor and self.schedule == "looped":
            raise ValueError("context schedule looped wraps the video around, so latent frame 0 cannot head every "
                             "window: use anchor off (the default for looped)")
        low = 2 if self.anchor else 1
        if isinstance(self.length, bool) or not isinstance(self.length, int) or self.length < low:
            raise ValueError(f"context window={self.length!r} latent frames: must be an integer >= {low}")
        if not isinstance(self.overlap, int) or not 0 <= self.overlap < self.body_length:
            raise ValueError(f"context overlap={self.overlap!r} latent frames: must be from 0 to "
                             f"{self.body_length - 1} (less than the window"
                             f"{' without its anchor frame' if self.anchor else ''})")
        if not isinstance(self.stride, int) or not 1 <= self.stride <= MAX_STRIDE:
            raise ValueError(f"context stride={self.stride!r}: must be an integer from 1 to {MAX_STRIDE}")
        if self.stride > 1 and self.schedule == "static":
            raise ValueError("context stride applies to the uniform and looped schedules; static windows have none")

    @classmethod
    def from_frames(cls, frames: int, overlap: int, **kwargs) -> "ContextWindows":
        """Window and overlap in real frames (the window 4n+1, as the video), as ComfyUI's node takes them."""
        if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1 or (frames - 1) % 4:
            raise ValueError(f"context frames={frames!r}: must be 4n+1 real frames (5, 9, 17, 33, 81, ...)")
        if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < frames:
            raise ValueError(f"context overlap={overlap!r} frames: must be from 0 to {frames - 1} (less than the "
                             f"window of {frames} frames)")
        length = latent_length(frames)
        anchored = kwargs.get("anchor", kwargs.get("schedule", "static") != "looped")
        body = length - 1 if anchored else length
        return cls(length, min(latent_overlap(overlap), max(body - 1, 0)), **kwargs)

    @property
    def body_length(self) -> int:
        """Frames of a window besides the anchor frame."""
        return self.length - 1 if self.anchor else self.length

    def covers(self, latent_frames: int) -> bool:
        """True when one window holds the whole video (the plain sampler runs)."""
        return latent_frames - self.head <= self.length

    def _body(self) -> "ContextWindows":
        """These windows without the head frames (``head`` 0)."""
        return replace(self, head=0)

    # ------------------------------------------------------------------ windows
    def windows(self, latent_frames: int, step: int = 0) -> list[tuple[int, ...]]:
        """The windows of step ``step`` over ``latent_frames`` latent frames: tuples of frame indices in the
        order the model sees them (position 0 first). Every frame lies in at least one window."""
        if self.covers(latent_frames):
            return [tuple(range(latent_frames))]
        if self.head:
            front = tuple(range(self.head))
            return [front + tuple(i + self.head for i in w)
                    for w in self._body().windows(latent_frames - self.head, step)]
        offset = 1 if self.anchor else 0
        n = latent_frames - offset
        if self.schedule == "static":
            body = _static(n, self.body_length, self.overlap)
        else:
            body = _uniform(n, self.body_length, self.overlap, self.stride, step, self.schedule == "looped")
        head = (0,) if self.anchor else ()
        return [head + tuple(i + offset for i in w) for w in body]

    def weights(self, window: tuple[int, ...], latent_frames: int) -> torch.Tensor:
        """Fuse weights ``[len(window)]`` float32 of one window (before the per-frame normalisation); head frames
        weigh 1 in every window (their velocity is the windows' mean)."""
        if self.head:
            body = tuple(i - self.head for i in window[self.head:])
            return torch.cat([torch.ones(self.head), self._body().weights(body, latent_frames - self.head)]).float()
        offset = 1 if self.anchor and len(window) > 1 and window[0] == 0 else 0
        body = window[offset:]
        if self.fuse == "flat":
            w = torch.ones(len(body))
        elif self.fuse == "pyramid":
            w = _pyramid(len(body))
        else:
            w = torch.ones(len(body))
            ramp = min(self.overlap, len(body))
            first, last = (1 if self.anchor else 0), latent_frames - 1
            if ramp and min(body) > first:
                w[:ramp] = torch.linspace(_RAMP_FLOOR, 1.0, ramp)
            if ramp and max(body) < last:
                w[len(body) - ramp:] = torch.minimum(w[len(body) - ramp:], torch.linspace(1.0, _RAMP_FLOOR, ramp))
        if offset:
            w = torch.cat([torch.ones(1), w])  # the anchor frame: as a window's edge frame
        return w.float()

    # ------------------------------------------------------------------ FreeNoise
    def reschedule_noise(self, noise: torch.Tensor, seed: int) -> torch.Tensor:
        """FreeNoise: ``noise [B, C, F, h, w]`` with every frame that enters a window at a hop given the noise of
        a frame that left it (shuffled, seeded), so each window holds the first window's noise frames."""
        frames = noise.shape[2]
        if not self.freenoise or self.covers(frames):
            return noise
        if self.head:
            body = self._body().reschedule_noise(noise[:, :, self.head:], seed)
            return torch.cat([noise[:, :, :self.head], body], dim=2)
        offset = 1 if self.anchor else 0
        m, hop = self.body_length, self.body_length - self.overlap
        out = noise.clone()
        gen = torch.Generator().manual_seed((int(seed) + self.seed_offset) % 2**63)
        for start in range(m, frames - offset, hop):
            size = min(hop, frames - offset - start)
            src = torch.arange(start - m, start - m + hop)[torch.randperm(hop, generator=gen)][:size] + offset
            out[:, :, start + offset: start + offset + size] = out[:, :, src]
        return out


def _static(n: int, m: int, overlap: int) -> list[tuple[int, ...]]:
    """Fixed windows of ``m`` frames every ``m - overlap``; the last moved back to end on frame ``n - 1``."""
    out = []
    for start in range(0, n, m - overlap):
        start = min(start, n - m)
        out.append(tuple(range(start, start + m)))
        if start + m >= n:
            break
    return out


def _uniform(n: int, m: int, overlap: int, stride: int, step: int, loop: bool) -> list[tuple[int, ...]]:
    """Windows that slide by a per-step offset, at dilations 1, 2, 4, ... (``stride`` levels, no more than
    the video needs); without ``loop`` a window that would wrap is moved back inside, and a frame left out gets a
    window of its own."""
    shift = ordered_halving(step)
    levels = min(stride, int(math.ceil(math.log2(n / m))) + 1)
    out: list[tuple[int, ...]] = []
    for level in range(levels):
        dilation = 1 << level
        span = m * dilation
        if span > n:  # a dilated window longer than the video would hold frames twice
            break
        start = int(shift * dilation) + int(round(n * shift))
        for j in range(start, n + start - (0 if loop else overlap), max(span - overlap, 1)):
            window = tuple(e % n for e in range(j, j + span, dilation))
            if not loop and list(window) != sorted(window):  # wrapped: slid back to end on the last frame
                window = tuple(range(n - span, n, dilation))
            if window not in out:
                out.append(window)
    covered = {i for w in out for i in w}
    for i in range(n):  # frames a sliding pass left out (non-looped): a window from there
        if i not in covered:
            start = min(i, n - m)
            out.append(tuple(range(start, start + m)))
            covered.update(out[-1])
    return out


def _pyramid(length: int) -> torch.Tensor:
    """1, 2, ..., peak, ..., 2, 1 (the FreeNoise paper's weighted average, as ComfyUI's pyramid)."""
    half = (length + 1) // 2
    rise = list(range(1, half + 1))
    return torch.tensor(rise + rise[: length - half][::-1], dtype=torch.float32)


class WindowedGuidance:
    """A velocity function ``(x, sigma, timestep) -> v`` over the whole video built from one guide per window.

    ``make_guide(window) -> (guide, attach)``: a fresh velocity function for the frames of ``window`` (its own
    classifier-free guidance, its own cache session: nothing a cache learnt in one window reaches another) and
    a function returning a context manager that attaches its cache to the model while it runs. Windows are
    keyed by their frame indices, so a sliding schedule that brings a new window starts that window's cache
    afresh.
    ``interrupt(step, num_steps)``: called between windows; it raises to stop (a long step need not finish
    every window first).
    ``spread``: windows across ranks (``wan_core.parallel.windows.WindowSpread``: ``rank``, ``owners(windows)``,
    ``gather(windows, owners, mine, like)``): this rank samples (and keeps guides and cache sessions for) its own
    windows only, and the gathered velocities of all windows are fused exactly as in the sequential loop.
    """

    def __init__(self, windows: ContextWindows, latent_frames: int, make_guide, interrupt=None, spread=None):
        self.config, self.frames, self.make_guide, self.interrupt = windows, latent_frames, make_guide, interrupt
        self.spread = spread
        self.guides: dict[tuple[int, ...], tuple] = {}
        self.step, self.num_steps = 0, 0
        self._set_windows(windows.windows(latent_frames, 0))

    def _set_windows(self, current: list[tuple[int, ...]]) -> None:
        self.current = current
        self.owners = [0] * len(current) if self.spread is None else self.spread.owners(current)

    def _mine(self) -> list[int]:
        """Indices of the current windows this rank samples (all of them without a spread)."""
        rank = 0 if self.spread is None else self.spread.rank
        return [i for i, owner in enumerate(self.owners) if owner == rank]

    def guide(self, window: tuple[int, ...]):
        if window not in self.guides:
            self.guides[window] = self.make_guide(window)
        return self.guides[window]

    def begin_step(self, step: int, num_steps: int, sigma: float) -> None:
        self._set_windows(self.config.windows(self.frames, step))  # owners: the same again for the same windows
        self.step, self.num_steps = step, num_steps
        for i in self._mine():
            guide = self.guide(self.current[i])[0]
            if hasattr(guide, "begin_step"):
                guide.begin_step(step, num_steps, sigma)

    def __call__(self, x: torch.Tensor, sigma: float, timestep: torch.Tensor) -> torch.Tensor:
        """``x [B, C, F, h, w]`` -> ``v`` of the same shape: each window's velocity, weighted and normalised per
        frame (one window holding the whole video returns its guide's output unchanged)."""
        if self.spread is None and len(self.current) == 1 and len(self.current[0]) == x.shape[2]:
            guide, attach = self.guide(self.current[0])
            with attach():
                return guide(x, sigma, timestep)
        total = torch.zeros_like(x, dtype=torch.float32)
        weight = torch.zeros(x.shape[2], dtype=torch.float32, device=x.device)
        if self.spread is None:  # each window fused as soon as it is sampled: one window's velocity at a time
            for window in self.current:
                self._fuse(total, weight, window, self._sample(window, x, sigma, timestep))
        else:  # this rank's windows, then every window's velocity, fused in the same order as above
            mine = {i: self._sample(self.current[i], x, sigma, timestep) for i in self._mine()}
            for window, v in zip(self.current, self.spread.gather(self.current, self.owners, mine, x)):
                self._fuse(total, weight, window, v)
        return (total / weight.view(1, 1, -1, 1, 1)).to(x.dtype)

    def _sample(self, window: tuple[int, ...], x: torch.Tensor, sigma: float,
                timestep: torch.Tensor) -> torch.Tensor:
        """The velocity ``[B, C, len(window), h, w]`` float32 of one window."""
        if self.interrupt is not None:
            self.interrupt(self.step, self.num_steps)
        guide, attach = self.guide(window)
        index = torch.tensor(window, device=x.device)
        with attach():
            return guide(x.index_select(2, index), sigma, timestep).float()

    def _fuse(self, total: torch.Tensor, weight: torch.Tensor, window: tuple[int, ...], v: torch.Tensor) -> None:
        index = torch.tensor(window, device=total.device)
        w = self.config.weights(window, self.frames).to(total.device)
        total.index_add_(2, index, v * w.view(1, 1, -1, 1, 1))
        weight.index_add_(0, index, w)

    @property
    def steps(self) -> list[str]:
        """The expert of each step (two-expert models), read from the first window's guide."""
        first = next(iter(self.guides.values()), None)
        return list(getattr(first[0], "steps", [])) if first else []
