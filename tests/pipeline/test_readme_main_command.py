"""The README's main command, run verbatim (plus ``--steps``, to keep the suite short): the built-in demo model
makes the video, says so, and writes what the command promises."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def quick_start_commands() -> list[str]:
    """The command lines of the README's "Quick start" bash block."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README's Quick start has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_is_install_then_generate():
    install, generate = quick_start_commands()
    assert "pip install" in install and "whl/cpu" in install  # a machine without a GPU gets the CPU torch
    assert generate.startswith("python -m wan_core generate ") and "--dit" not in generate


def test_readme_main_command_runs_the_demo_model(tmp_path):
    av = pytest.importorskip("av")
    generate = quick_start_commands()[1]
    argv = shlex.split(generate)
    assert argv[:3] == ["python", "-m", "wan_core"]
    env = {k: v for k, v in os.environ.items() if k != "WANCORE_MODELS_DIR"}
    res = subprocess.run([sys.executable, *argv[1:], "--steps", "4"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "using the built-in demo model" in res.stderr
    out = tmp_path / argv[argv.index("--out") + 1]
    with av.open(str(out)) as container:
        stream = container.streams.video[0]
        frames = [f for f in container.decode(stream)]
        assert (stream.average_rate, stream.width, stream.height) == (8, 64, 64)
    assert len(frames) == 17
    assert re.search(r"wrote .*demo\.mp4 \(17 frames, 64x64, 8 fps\) in [\d.]+ s", res.stderr)
