"""``--context-*`` / ``--freenoise``: checked before any model loads (one line each), a window holding the whole video
runs the plain sampler and says so, windows change a longer video, and the output's metadata records them."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from wan_core.cli import main
from wan_core.cli.video_io import read_metadata



def run(capsys, tmp_path, *args: str, out: str = "x.webp") -> tuple[int, list[str]]:
    code = main(["generate", "--preset", "tiny-random", "--prompt", "a cat", "--out", str(tmp_path / out), *args])
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip() and "%|" not in line]


@pytest.mark.parametrize("flags, message", [
    (["--context-overlap", "4"], "--context-overlap needs --context-frames"),
    (["--freenoise", "--context-fuse", "flat"], "--context-fuse / --freenoise need --context-frames"),
    (["--context-frames", "10"], "--context-frames=10: must be 4n+1 real frames"),
    (["--context-frames", "9", "--context-overlap", "9"], "--context-overlap=9 frames: must be from 0 to 8"),
    (["--context-frames", "9", "--context-schedule", "looped", "--context-anchor", "on"], "--context-anchor off"),
    (["--context-frames", "9", "--context-stride", "2"], "--context-stride applies to the uniform and looped"),
])
def test_bad_context_flags_are_one_line_before_loading(capsys, tmp_path, tripwire, flags, message):
    code, lines = run(capsys, tmp_path, *flags)
    errors = [line for line in lines if line.startswith("error")]
    assert code == 2 and len(errors) == 1 and message in errors[0], lines
    assert not (tmp_path / "x.webp").exists()


def _frames(path) -> np.ndarray:
    return np.stack([np.asarray(Image.open(p)) for p in sorted(path.glob("frame_*.png"))])


def test_a_window_holding_the_video_is_the_plain_run(capsys, tmp_path):
    assert run(capsys, tmp_path, "--frames", "9", out="plain")[0] == 0
    code, lines = run(capsys, tmp_path, "--frames", "9", "--context-frames", "17", out="windowed")
    assert code == 0 and any("runs as one window, the plain sampler" in line for line in lines), lines
    assert np.array_equal(_frames(tmp_path / "plain"), _frames(tmp_path / "windowed"))
    assert "context" not in read_metadata(tmp_path / "plain")  # runs without windows store what they always did
    assert read_metadata(tmp_path / "windowed")["context"]["frames"] == 17


def test_windows_on_a_longer_video_are_recorded(capsys, tmp_path):
    code, lines = run(capsys, tmp_path, "--frames", "25", "--context-frames", "9", "--context-overlap", "4",
                      "--freenoise", out="long.webp")
    assert code == 0, lines
    assert any("context windows" in line for line in lines)  # the cache line counts the windows
    meta = read_metadata(tmp_path / "long.webp")
    assert meta["frames"] == 25 and meta["context"] == {
        "frames": 9, "latent_window": 3, "latent_overlap": 1, "schedule": "static", "stride": 1, "fuse": "pyramid",
        "anchor": True, "freenoise": True}
