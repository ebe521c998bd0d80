"""Context windows node: long videos as overlapping windows for WanCoreSampler's optional ``context`` input
(wan_core.sampling.context_windows; docs/long_video.md).

Window and overlap are real frames, as on ComfyUI's ``WanContextWindowsManual``; the core converts them to latent
frames and refuses bad values with the same one-line messages the validator gives before queueing.
"""
from __future__ import annotations

from wan_core.estimate import SIZE_LIMITS
from wan_core.sampling.context_windows import FUSES, MAX_STRIDE, SCHEDULES, ContextWindows

from .declare import Input, NodeSpec, Output

FRAMES = 81  # Wan 2.1 / 2.2's training length: one window is what the model was trained on
OVERLAP = 30  # ComfyUI's WanContextWindowsManual default
MAX_FRAMES = SIZE_LIMITS["frames"][1]  # no window longer than the longest video


def build(context_frames: int = FRAMES, context_overlap: int = OVERLAP, context_schedule: str = "static",
          context_stride: int = 1, fuse_method: str = "pyramid", freenoise: bool = False,
          anchor_first_frame: bool = True) -> ContextWindows:
    """The ``ContextWindows`` for the node's widget values (raises ``ValueError`` with a one-line message).
    A looped schedule has no first frame to anchor: there the switch is ignored (the core's default for loops)."""
    anchor = None if context_schedule == "looped" else bool(anchor_first_frame)
    return ContextWindows.from_frames(context_frames, context_overlap, schedule=context_schedule,
                                      stride=context_stride, fuse=fuse_method, freenoise=bool(freenoise),
                                      anchor=anchor)


def make_context(context_frames: int = FRAMES, context_overlap: int = OVERLAP, context_schedule: str = "static",
                 context_stride: int = 1, fuse_method: str = "pyramid", freenoise: bool = False,
                 anchor_first_frame: bool = True):
    return (build(context_frames, context_overlap, context_schedule, context_stride, fuse_method, freenoise,
                  anchor_first_frame),)


def validate_context(context_frames: int = FRAMES, context_overlap: int = OVERLAP, context_schedule: str = "static",
                     context_stride: int = 1, fuse_method: str = "pyramid", freenoise: bool = False,
                     anchor_first_frame: bool = True) -> bool | str:
    """Pre-queue check: the same one-line message sampling would give, before anything is queued."""
    problems = CONTEXT.range_problems(context_frames=context_frames, context_overlap=context_overlap,
                                      context_stride=context_stride)
    if problems:
        return "; ".join(problems)
    try:
        build(context_frames, context_overlap, context_schedule, context_stride, fuse_method, freenoise,
              anchor_first_frame)
    except (ValueError, TypeError) as e:
        return str(e)
    return True


CONTEXT = NodeSpec(
    node_id="WanCoreContextWindows", display_name="WanCore Context Windows", category="WanCore/sampling",
    description="Context windows for WanCore Sampler's optional 'context' input: a video longer than the model "
                "was trained on is denoised as overlapping windows, each run by the model on its own at every "
                "step and blended back. Lengths in real frames, as ComfyUI's WanContextWindowsManual. A window "
                "as long as the video samples as without it. Caches keep one state per window.",
    inputs=(
        Input("context_frames", "INT", default=FRAMES, min=5, max=MAX_FRAMES, step=4,
              tooltip="window length in real frames, 4n+1 (81 for Wan 2.1 / 2.2, 17 for the demo model: the "
                      "length the model was trained on)"),
        Input("context_overlap", "INT", default=OVERLAP, min=0, max=MAX_FRAMES - 1,
              tooltip="real frames shared by neighbouring windows (less than the window); more = smoother "
                      "joins, more windows"),
        Input("context_schedule", "COMBO", default="static", options=SCHEDULES,
              tooltip="static: fixed windows (the last moved back to end on the last frame); uniform: windows "
                      "slide by a different offset every step; looped: as uniform, wrapping around (a closed loop)"),
        Input("context_stride", "INT", default=1, min=1, max=MAX_STRIDE,
              tooltip="uniform / looped: also windows of every 2nd, 4th, ... frame (up to 2^(stride-1)); "
                      "static takes 1"),
        Input("fuse_method", "COMBO", default="pyramid", options=FUSES,
              tooltip="how overlapping windows blend: pyramid (weights rising to the window's middle), flat "
                      "(plain average), linear (ramps over the overlap only)"),
        Input("freenoise", "BOOLEAN", default=False,
              tooltip="FreeNoise: frames entering a window get the shuffled noise of frames that left it, so "
                      "every window starts from the same noise (steadier content across windows)"),
        Input("anchor_first_frame", "BOOLEAN", default=True,
              tooltip="Wan's latent frame 0 is a single image frame the model always sees at position 0: on, it "
                      "heads every window, so a later window is not drawn as a video start and all windows share "
                      "the start (the start image for image-to-video). Ignored for looped (a loop has no start)"),
    ),
    outputs=(Output("WANCORE_CONTEXT", "context"),),
    fn=make_context,
    validate=validate_context,
    search_aliases=("context windows", "long video", "sliding window", "freenoise"),
)

NODES = (CONTEXT,)
