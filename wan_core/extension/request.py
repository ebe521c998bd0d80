"""What a clip extension asks for (docs/long_video.md section 3): one frozen request from the CLI flags or the
node's widgets to where each setting acts."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from ..i2v.conditioning import image_channels
from ..latent_format import TEMPORAL_FACTOR
from .colour import COLOUR_MATCHES, ColourMatch

Conditioning = Literal["auto", "clean", "replace", "image", "svi"]
CONDITIONINGS: tuple[str, ...] = get_args(Conditioning)
DEFAULT_OVERLAP = 5  # real frames: two latent frames (the single first frame and one of four)
MAX_OVERLAP = 81  # one whole Wan clip; more continues from frames the model cannot all see anyway


@dataclass(frozen=True)
class Extension:
    """``overlap``: real frames (4n+1) the new clip shares with the end of the previous video; ``colour``: the
    colour match of the new frames to that overlap; ``conditioning``: how the model is told the overlap
    (``auto``: image conditioning for image-to-video models, else ``clean``; ``clean``: the head held clean at
    timestep 0 on its tokens, TI2V-5B's first-frame mechanism, for text-to-video models too; ``replace``: the
    head re-noised to every step's sigma (known frames; what ``clean`` becomes under context windows);
    ``svi``: SVI 2.0 Pro's anchor + motion latents, for Wan 2.2 I2V with its LoRAs)."""

    overlap: int = DEFAULT_OVERLAP
    colour: ColourMatch = "mean-std"
    conditioning: Conditioning = "auto"

    def __post_init__(self):
        o = self.overlap
        if isinstance(o, bool) or not isinstance(o, int) or not 1 <= o <= MAX_OVERLAP or (o - 1) % TEMPORAL_FACTOR:
            raise ValueError(f"extend overlap={o!r} frames: must be 4n+1 from 1 to {MAX_OVERLAP} (1, 5, 9, 13, ...)")
        if self.colour not in COLOUR_MATCHES:
            raise ValueError(f"colour match={self.colour!r}: must be one of {', '.join(COLOUR_MATCHES)}")
        if self.conditioning not in CONDITIONINGS:
            raise ValueError(f"extend conditioning={self.conditioning!r}: must be one of {', '.join(CONDITIONINGS)}")

    @property
    def latent_overlap(self) -> int:
        """Latent frames the overlap encodes to (its first pixel frame alone, then 4 per latent frame)."""
        return (self.overlap - 1) // TEMPORAL_FACTOR + 1

    def check_clip(self, frames: int) -> None:
        """The new clip must hold the overlap and at least one latent frame of new frames."""
        if frames < self.overlap + TEMPORAL_FACTOR:
            raise ValueError(f"extend: a clip of {frames} frames has nothing new after the {self.overlap}-frame "
                             f"overlap; ask for at least {self.overlap + TEMPORAL_FACTOR} frames")

    def check_previous(self, previous_frames: int, previous_size: tuple[int, int], size: tuple[int, int]) -> None:
        """The previous video must hold the overlap and have the clip's size (``(width, height)``)."""
        if previous_frames < self.overlap:
            raise ValueError(f"extend: the video to continue has {previous_frames} frames, fewer than the overlap of "
                             f"{self.overlap}")
        if tuple(previous_size) != tuple(size):
            raise ValueError(f"extend: the video to continue is {previous_size[0]}x{previous_size[1]} but the new "
                             f"clip is {size[0]}x{size[1]}; use the video's size")

    def method(self, dit, windowed: bool = False) -> str:
        """``first_frame`` (clean) / ``replace`` / ``image`` / ``svi``: how ``dit`` is given the overlap; one line
        when the asked conditioning does not fit the model. Under context windows a clean head of several latent
        frames cannot keep its positions (a window starting later holds it elsewhere): known frames instead."""
        image_model = bool(image_channels(dit))
        if self.conditioning in ("image", "svi") and not image_model:
            raise ValueError(f"extend conditioning {self.conditioning} needs an image-to-video model; this one is "
                             f"text-to-video (use auto, clean or replace)")
        if self.conditioning in ("clean", "replace") and image_model:
            raise ValueError(f"extend conditioning {self.conditioning} is for text-to-video models; an "
                             f"image-to-video model takes the overlap through its image conditioning (use auto)")
        if self.conditioning == "svi":
            return "svi"
        if image_model:
            return "image"
        return "replace" if self.conditioning == "replace" or windowed else "first_frame"
