"""Prompt travel: one prompt written as segments separated by `` | `` ("a red ball | a blue ball"), each guiding
a successive stretch of a long video: of context windows (docs/long_video.md) or of chained clips (extension).

As the other Wan tools do it (ComfyUI-WanVideoWrapper splits the positive prompt on ``|`` and gives each context
window one prompt, chosen by the window's position: the video's latent frames cut evenly into one section per
prompt; Wan2GP gives each sliding window / chained clip one prompt line, the last repeated when windows outnumber
lines), a window is guided by one segment's embedding, not a blend of embeddings: the fused velocities of
overlapping windows already blend one prompt into the next across the overlap.

Here the segments share the frames the windows slide over evenly (latent frame 0, the anchor every anchored
window starts with, stays out: it belongs to all of them) and a window takes the segment of its centre, where
its pyramid weight peaks (WanVideoWrapper takes the window's last frame, which shifts every prompt a window
earlier). Only a ``|`` with white space (or the prompt's start or end) on both sides separates: "a|b" and
"a || b" stay one prompt.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

SEPARATOR = " | "
_SEPARATOR = re.compile(r"(?<!\S)\|(?!\S)")
_SHOWN = 40  # characters of a segment quoted in the note lines


def split_segments(prompt: str, name: str = "prompt") -> tuple[str, ...]:
    """``"a | b | c"`` -> ``("a", "b", "c")`` (each stripped); a prompt without a separator -> ``(prompt,)``
    unchanged. ``ValueError`` naming the segment when one is empty ("a |  | c", "a |")."""
    parts = _SEPARATOR.split(prompt)
    if len(parts) == 1:
        return (prompt,)
    segments = tuple(p.strip() for p in parts)
    for i, segment in enumerate(segments):
        if not segment:
            raise ValueError(f"{name}: prompt travel segment {i + 1} of {len(segments)} is empty; write "
                             f"'first prompt | second prompt' with text on both sides of each ' | '")
    return segments


def is_travel(prompt) -> bool:
    """True when ``prompt`` (a string) has at least one `` | `` separator."""
    return isinstance(prompt, str) and _SEPARATOR.search(prompt) is not None


def check_batch(prompts: Sequence[str]) -> None:
    """A batch of several prompts cannot travel: ``ValueError`` naming the first one with a separator."""
    if len(prompts) > 1:
        for i, p in enumerate(prompts):
            if is_travel(p):
                raise ValueError(f"prompt {i + 1} of {len(prompts)} has ' | ' segments (prompt travel), which works "
                                 f"with one prompt, not a batch: generate the prompts one at a time")


def unique_segments(segments: Sequence[str]) -> tuple[list[str], list[int]]:
    """The distinct segments in order (each encoded once) and, per segment, its index among them."""
    distinct = list(dict.fromkeys(segments))
    return distinct, [distinct.index(s) for s in segments]


def segment_of_window(window: Sequence[int], latent_frames: int, count: int, anchor: bool) -> int:
    """The segment (0-based, of ``count``) guiding ``window`` (latent frame indices in the order the model sees
    them, as ``ContextWindows.windows`` gives them) of a ``latent_frames``-frame video. ``anchor``: the window's
    first frame is the shared frame 0 and does not count.

    The frames the windows slide over (1..F-1 with an anchor, else 0..F-1; ``n`` of them) are cut into ``count``
    equal spans; frame ``p`` covers ``[p, p + 1)``; the window's centre is the middle of its middle frame(s) in the
    model's order (a looped window that wraps round the end is unwrapped first); a centre exactly on a boundary
    goes to the later segment."""
    if count < 1:
        raise ValueError(f"prompt travel needs at least one segment, got {count}")
    offset = 1 if anchor else 0
    body = [f - offset for f in (window[1:] if anchor and len(window) > 1 else window)]
    n = latent_frames - offset
    if not body or n < 1 or min(body) < 0 or max(body) >= n:
        raise ValueError(f"window {tuple(window)} does not lie in a {latent_frames}-frame video"
                         f"{' after its anchor frame 0' if anchor else ''}")
    unwrapped, turns = [body[0]], 0
    for prev, cur in zip(body, body[1:]):
        turns += cur < prev  # a looped window passing the last frame continues at frame 0
        unwrapped.append(cur + turns * n)
    m = len(unwrapped)
    twice_centre = (unwrapped[(m - 1) // 2] + unwrapped[m // 2] + 1) % (2 * n)
    return min(twice_centre * count // (2 * n), count - 1)


def segment_for_clip(index: int, count: int) -> int:
    """Chained clips (extension): clip ``index`` (0 = the first) uses segment ``index``, the last one repeated."""
    if index < 0 or count < 1:
        raise ValueError(f"clip {index} of a {count}-segment prompt: the clip index must be >= 0 and there must be "
                         f"at least one segment")
    return min(index, count - 1)


def _quoted(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "...")


def _ranges(numbers: Sequence[int]) -> str:
    """[1, 2, 3, 5] -> "1-3, 5" (1-based numbers as given)."""
    out: list[str] = []
    for n in numbers:
        if out and out[-1].split("-")[-1] == str(n - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ", ".join(out)


def travel_note(windows: Sequence[Sequence[int]], segments: Sequence[str], latent_frames: int, anchor: bool,
                moving: bool = False) -> str:
    """One line: which windows (1-based, in ``windows``' order) each segment guides. ``moving``: the windows are
    those of the first step of a schedule whose windows move every step."""
    owner = [segment_of_window(w, latent_frames, len(segments), anchor) for w in windows]
    parts = []
    for k, text in enumerate(segments):
        mine = [i + 1 for i, s in enumerate(owner) if s == k]
        where = f"window{'s' if len(mine) > 1 else ''} {_ranges(mine)}" if mine else "no window"
        parts.append(f"{_quoted(text)} -> {where}")
    when = " at the first step (the windows move every step)" if moving else ""
    return (f"prompt travel: {len(segments)} segments over {len(windows)} windows{when}: " + "; ".join(parts))


def one_window_note(segments: Sequence[str]) -> str:
    """The line saying a video held by one window uses only the first segment."""
    return (f"prompt travel: the video fits one context window, so only the first of its {len(segments)} segments "
            f"guides it ({_quoted(segments[0])})")
