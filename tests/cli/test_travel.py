"""``--prompt "a | b"`` with ``--context-frames`` (prompt travel): refused before any model loads without windows
or with an empty segment, a note line names the windows each segment guides, and the segments change the video."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from wan_core.cli import main



def run(capsys, tmp_path, prompt: str, *args: str, out: str = "x.webp") -> tuple[int, list[str]]:
    code = main(["generate", "--preset", "tiny-random", "--prompt", prompt, "--out", str(tmp_path / out), *args])
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip() and "%|" not in line]


@pytest.mark.parametrize("prompt, flags, message", [
    ("a cat | a dog", [], "--prompt has 2 segments separated by ' | ' (prompt travel"),
    ("a cat | ", ["--context-frames", "9"], "--prompt: prompt travel segment 2 of 2 is empty"),
    ("a cat |  | a dog", ["--context-frames", "9"], "segment 2 of 3 is empty"),
])
def test_travel_refusals_are_one_line_before_loading(capsys, tmp_path, tripwire, prompt, flags, message):
    code, lines = run(capsys, tmp_path, prompt, *flags)
    errors = [line for line in lines if line.startswith("error")]
    assert code == 2 and len(errors) == 1 and message in errors[0], lines
    assert not (tmp_path / "x.webp").exists()


def test_a_bar_without_spaces_is_text(capsys, tmp_path):
    code, lines = run(capsys, tmp_path, "a cat|a dog", "--frames", "5", "--steps", "1")
    assert code == 0 and not any("travel" in line for line in lines), lines


def _frames(path) -> np.ndarray:
    return np.stack([np.asarray(Image.open(p)) for p in sorted(path.glob("frame_*.png"))])


def test_travel_note_and_video(capsys, tmp_path):
    """25 frames = 7 latent; 9-frame windows (anchor + 2 latent) overlapping by 4 (1 latent) slide over latent
    frames 1-6 one at a time: 5 windows, body centres 1, 2, 3, 4, 5 of 6 positions, cut at 3."""
    flags = ("--frames", "25", "--context-frames", "9", "--context-overlap", "4", "--steps", "2")
    code, lines = run(capsys, tmp_path, "a cat | a dog", *flags, out="travel")
    assert code == 0, lines
    assert "wan_core: prompt travel: 2 segments over 5 windows: 'a cat' -> windows 1-2; 'a dog' -> windows 3-5" \
        in lines, lines
    assert run(capsys, tmp_path, "a cat", *flags, out="plain")[0] == 0
    assert not np.array_equal(_frames(tmp_path / "travel"), _frames(tmp_path / "plain"))


def test_one_window_uses_the_first_segment(capsys, tmp_path):
    code, lines = run(capsys, tmp_path, "a cat | a dog", "--frames", "9", "--context-frames", "17", "--steps", "2",
                      out="one")
    assert code == 0 and any("prompt travel: the video fits one context window, so only the first of its 2 "
                             "segments guides it ('a cat')" in line for line in lines), lines
    assert run(capsys, tmp_path, "a cat", "--frames", "9", "--steps", "2", out="cat")[0] == 0
    assert np.array_equal(_frames(tmp_path / "one"), _frames(tmp_path / "cat"))
