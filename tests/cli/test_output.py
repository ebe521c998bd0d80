"""CLI polish: a fast ``--help`` with defaults, one list of output formats, the final "wrote ..." line, a decode
bar with its total, and the prompt, seed and settings stored in every kind of output file."""
from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
import torch

from wan_core.cli import main
from wan_core.cli.parser import SOLVERS, build_parser
from wan_core.cli.video_io import OUTPUT_FORMATS, read_metadata, write_video


def test_help_is_fast_and_does_not_import_torch():
    code = ("import sys, time; t = time.perf_counter(); from wan_core.cli.parser import build_parser; "
            "h = build_parser()._subparsers._group_actions[0].choices['generate'].format_help(); "
            "print('torch' in sys.modules, time.perf_counter() - t)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    imported, seconds = res.stdout.split()
    assert imported == "False", "building the parser imported torch"
    assert float(seconds) < 1.0
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "wan_core", "generate", "--help"], capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 0 and time.perf_counter() - t0 < 3.0  # loose: the interpreter starts too
    text = " ".join(res.stdout.split())  # argparse wraps lines
    assert "(default 5.0; demo 6.0)" in text and "(default: unipc)" in text and "(default 16; demo 8)" in text


def test_one_list_of_output_formats_and_solvers():
    from wan_core.sampling import SOLVER_NAMES

    help_text = " ".join(build_parser()._subparsers._group_actions[0].choices["generate"].format_help().split())
    assert all(ext in help_text for ext in OUTPUT_FORMATS)
    assert SOLVERS == tuple(SOLVER_NAMES)


def _video(frames: int = 3, h: int = 32, w: int = 48) -> torch.Tensor:
    return torch.rand(3, frames, h, w, generator=torch.Generator().manual_seed(0)) * 2 - 1


META = {"prompt": "a fox in the snow, café", "seed": 18446744073709551615, "steps": 4, "guidance": 5.0}


@pytest.mark.parametrize("ext", OUTPUT_FORMATS)
def test_metadata_round_trips_in_every_format(tmp_path, ext):
    if ext in (".mp4", ".mkv", ".mov", ".webm"):
        pytest.importorskip("av")
    path = write_video(_video(), tmp_path / f"x{ext}", fps=8, metadata=META)
    assert read_metadata(path) == META


def test_frames_folder_carries_metadata_in_each_png_and_replaces_earlier_frames(tmp_path):
    from PIL import Image

    out = tmp_path / "frames"
    write_video(_video(5), out, metadata={"prompt": "first"})
    write_video(_video(3), out, metadata=META)
    pngs = sorted(out.glob("*.png"))
    assert [p.name for p in pngs] == ["frame_00000.png", "frame_00001.png", "frame_00002.png"]
    for p in pngs:
        with Image.open(p) as im:
            assert read_metadata(p) == META and im.text["Software"] == "ComfyUI-WanCore"
    assert read_metadata(out) == META


@pytest.mark.parametrize("fps", [0, -1, 2.5])
def test_write_video_refuses_a_bad_fps_before_writing(tmp_path, fps):
    with pytest.raises(ValueError, match="fps="):
        write_video(_video(), tmp_path / "x.gif", fps=fps)
    assert not (tmp_path / "x.gif").exists()


def test_fast_gif_keeps_a_duration_gif_can_store(tmp_path):
    from PIL import Image

    write_video(_video(), tmp_path / "x.gif", fps=120)
    with Image.open(tmp_path / "x.gif") as im:
        assert im.info["duration"] >= 10


def test_generate_final_line_decode_total_and_metadata(tmp_path, capsys):
    av = pytest.importorskip("av")
    out = tmp_path / "x.mp4"
    code = main(["generate", "--preset", "tiny-random", "--prompt", "a fox é", "--seed", "7", "--out", str(out),
                     "--frames", "5", "--width", "32", "--height", "32", "--steps", "1", "--guidance", "1"])
    err = capsys.readouterr().err
    assert code == 0, err
    lines = [line for line in re.split(r"[\r\n]+", err) if line.strip()]
    assert re.fullmatch(rf"wrote {re.escape(str(out))} \(5 frames, 32x32, 16 fps\) in \d+\.\d s", lines[-1]), lines[-1]
    # the decode bar knew its total when it first drew (not "decoding: 0chunk [...]")
    assert re.search(r"decoding: +0%\|[^|]*\| 0/[1-9]\d*", err), err
    meta = read_metadata(out)
    assert meta["prompt"] == "a fox é" and meta["seed"] == 7 and meta["steps"] == 1 and meta["fps"] == 16
    assert meta["width"] == 32 and meta["models"] == "tiny-random"
    with av.open(str(out)) as container:
        assert len(list(container.decode(video=0))) == 5


@pytest.mark.parametrize("ext", [".gif", ".webp", ".mp4"])
def test_existing_file_not_written_here_is_refused_unless_overwrite(tmp_path, ext):
    if ext == ".mp4":
        pytest.importorskip("av")
    mine = tmp_path / f"mine{ext}"
    mine.write_bytes(b"the user's own file")
    with pytest.raises(ValueError, match=rf"mine\{ext}: exists and was not written by WanCore.*--overwrite"):
        write_video(_video(), mine, metadata=META)
    assert mine.read_bytes() == b"the user's own file"
    write_video(_video(), mine, metadata=META, overwrite=True)
    assert read_metadata(mine) == META
    write_video(_video(), mine, metadata={"prompt": "again"})  # its own output: a rerun replaces it
    assert read_metadata(mine) == {"prompt": "again"}


def test_link_at_the_output_path_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "x.gif"
    link.symlink_to(tmp_path / "elsewhere" / "target.gif")  # dangling: writing would create the target
    with pytest.raises(ValueError, match="exists and was not written by WanCore"):
        write_video(_video(), link)
    assert not (tmp_path / "elsewhere" / "target.gif").exists()


def test_nul_in_output_path_is_refused_before_writing(tmp_path):
    with pytest.raises(ValueError, match="NUL byte"):
        write_video(_video(), str(tmp_path / "real.gif") + "\0.gif")
    assert list(tmp_path.iterdir()) == []


def test_cli_refuses_to_overwrite_a_users_file_with_exit_2(tmp_path, capsys):
    mine = tmp_path / "x.gif"
    mine.write_bytes(b"keep me")
    args = ["generate", "--preset", "tiny-random", "--prompt", "a fox", "--out", str(mine), "--frames", "5",
            "--width", "32", "--height", "32", "--steps", "1", "--guidance", "1"]
    assert main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err[-1].startswith("error: --out") and "not written by WanCore" in err[-1]
    assert mine.read_bytes() == b"keep me"
    assert main([*args, "--overwrite"]) == 0
    assert read_metadata(mine)["prompt"] == "a fox"


def test_read_metadata_returns_a_dict_or_none(tmp_path):
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    for name, text in (("list", "[1, 2]"), ("number", "1e400"), ("deep", "[" * 200000 + "]" * 200000),
                       ("broken", "{")):
        info = PngInfo()
        info.add_text("wancore", text)
        Image.new("RGB", (2, 2)).save(tmp_path / f"{name}.png", pnginfo=info)
        assert read_metadata(tmp_path / f"{name}.png") is None, name


def test_read_metadata_of_a_bomb_png_is_a_value_error(tmp_path):
    from ..i2v.test_load_image import bomb_png

    with pytest.raises(ValueError, match="bomb.png: image too large"):
        read_metadata(bomb_png(tmp_path / "bomb.png"))
