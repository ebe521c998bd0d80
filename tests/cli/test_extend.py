"""``--extend`` / ``--clips`` / ``--extend-overlap`` / ``--color-match``: refused in one line before any model loads
(nothing written), the output starts with the continued video's own frames (bit for bit from PNG frames, within
the codec from an mp4), chains add the expected frames, and the metadata records the chain."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from wan_core.cli import main
from wan_core.cli.video_io import read_metadata, write_video
from wan_core.cli.video_read import read_video



def run(capsys, tmp_path, *args: str, out: str = "x.webp") -> tuple[int, list[str]]:
    code = main(["generate", "--preset", "tiny-random", "--prompt", "a cat", "--out", str(tmp_path / out),
                 "--steps", "2", *args])
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip() and "%|" not in line]


@pytest.fixture
def source(tmp_path):
    """A 9-frame 32x32 video (smooth colour ramps drifting right: what a codec keeps well) as PNG frames and as an
    8 fps mp4."""
    t, y, x = torch.meshgrid(torch.arange(9.0), torch.arange(32.0), torch.arange(32.0), indexing="ij")
    video = torch.stack([torch.sin((x + 2 * t) / 6), torch.cos(y / 7), torch.sin((x + y - t) / 9)]) * 0.8
    write_video(video, tmp_path / "src", fps=8, metadata={"generator": "ComfyUI-WanCore (an earlier run)"})
    write_video(video, tmp_path / "src.mp4", fps=8)
    return tmp_path


@pytest.mark.parametrize("flags, message", [
    (["--extend-overlap", "5"], "--extend-overlap needs --extend VIDEO or --clips N"),
    (["--color-match", "off", "--extend-overlap", "5"], "--extend-overlap / --color-match need --extend"),
    (["--clips", "0"], "--clips 0: must be an integer from 1 to 64"),
    (["--clips", "2", "--extend-overlap", "6"], "--extend-overlap 6 frames: must be 4n+1"),
    (["--clips", "2", "--frames", "5"], "ask for at least 9 frames"),
    (["--extend", "nothere.mp4"], "no such video file"),
    (["--extend", "{src}/src.mp4", "--width", "64"], "is 32x32 but --width/--height ask for 64x32"),
    (["--extend", "{src}/src.mp4", "--fps", "24"], "plays at 8 fps but --fps asks for 24"),
    (["--extend", "{src}/src.mp4", "--extend-conditioning", "svi"], "svi continues in latent space"),
    (["--extend", "{src}/src.mp4", "--extend-overlap", "13"], "fewer than the overlap of 13"),
])
def test_bad_extension_flags_are_one_line_before_loading(capsys, source, tripwire, flags, message):
    flags = [f.replace("{src}", str(source)) for f in flags]
    code, lines = run(capsys, source, *flags)
    errors = [line for line in lines if line.startswith("error")]
    assert code == 2 and len(errors) == 1 and message in errors[0], lines
    assert not (source / "x.webp").exists()


def test_out_onto_the_continued_video_is_refused(capsys, source, tripwire):
    before = (source / "src.mp4").read_bytes()
    code, lines = run(capsys, source, "--extend", str(source / "src.mp4"), out="src.mp4")
    assert code == 2 and "is the video being continued" in lines[-1]
    assert (source / "src.mp4").read_bytes() == before


def test_unreadable_video_is_one_line(capsys, source, tripwire):
    (source / "bad.mp4").write_bytes(b"not a video at all")
    code, lines = run(capsys, source, "--extend", str(source / "bad.mp4"))
    assert code == 2 and "not a readable video" in lines[-1]


def test_extension_keeps_the_video_and_records_the_chain(capsys, source):
    frames, _ = read_video(source / "src")
    code, _ = run(capsys, source, "--extend", str(source / "src"), "--frames", "13", out="long")
    assert code == 0
    out, info = read_video(source / "long")
    assert out.shape[0] == 9 + 13 - 5 and np.array_equal(out[:9], frames)  # PNG frames: bit for bit
    meta = read_metadata(source / "long")["extension"]
    assert meta["overlap"] == 5 and meta["continues"]["file"] == "src" and meta["continues"]["frames"] == 9
    assert meta["continues"]["settings"]["generator"].startswith("ComfyUI-WanCore")  # the source's own settings
    code, _ = run(capsys, source, "--extend", str(source / "src.mp4"), "--frames", "13", out="long.mp4")
    assert code == 0
    src, _ = read_video(source / "src.mp4")
    out, info = read_video(source / "long.mp4")
    assert out.shape[0] == 17 and info.fps == 8 and (info.width, info.height) == (32, 32)  # the video's own settings
    assert np.abs(out[:9].astype(float) - src.astype(float)).mean() < 3  # within the codec (x264 crf 18)


def test_chained_clips_from_text_with_prompt_parts(capsys, tmp_path):
    code = main(["generate", "--preset", "tiny-random", "--out", str(tmp_path / "c"), "--steps", "2", "--clips", "3",
                 "--frames", "9", "--prompt", "a cat | a dog"])
    err = capsys.readouterr().err
    assert code == 0
    out, _ = read_video(tmp_path / "c")
    assert out.shape[0] == 9 + 2 * 4  # 3 latent frames a clip, 2 of them the anchor and the motion latent
    said = [m for m in ("clip 1/3: 'a cat'", "clip 2/3: 'a dog'", "clip 3/3: 'a dog'") if m in err]
    assert len(said) == 3, err


def test_chained_clips_under_context_windows(capsys, tmp_path):
    """Each clip sampled in windows: the head goes in as known frames (a clean head cannot keep its positions in
    a window that starts later), and the chain still adds frames - overlap per clip."""
    code = main(["generate", "--preset", "tiny-random", "--prompt", "a cat", "--out", str(tmp_path / "w"),
                 "--steps", "2", "--clips", "2", "--frames", "17", "--context-frames", "9",
                 "--context-overlap", "4"])
    assert code == 0, capsys.readouterr().err
    out, _ = read_video(tmp_path / "w")
    assert out.shape[0] == 17 + 17 - 5
