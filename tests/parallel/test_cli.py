"""``wan_core generate --ulysses/--ring/--cfg-parallel``: usage errors at once, and a torchrun run (slow suite)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wan_core.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_degrees_without_torchrun_are_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    code = main(["generate", "--preset", "tiny-random", "--prompt", "a fox", "--ulysses", "2",
                 "--out", str(tmp_path / "a.mp4")])
    err = capsys.readouterr().err
    assert code != 0 and "torchrun --nproc-per-node 2" in err and not (tmp_path / "a.mp4").exists()


def test_degrees_must_match_torchrun_processes(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    code = main(["generate", "--preset", "tiny-random", "--prompt", "a", "--ulysses", "2", "--cfg-parallel",
                 "--ring", "2", "--out", str(tmp_path / "a.mp4")])
    err = capsys.readouterr().err
    assert code != 0 and "8 processes but 4 torchrun processes" in err
    assert "ulysses=1 ring=2, ulysses=2 ring=1" in err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun") is None and not (Path(sys.executable).parent / "torchrun").exists(),
                    reason="torchrun not installed")
def test_torchrun_two_ranks_only_rank0_writes(tmp_path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    out = tmp_path / "video.mp4"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    cmd = [torchrun, "--nproc-per-node", "2", "-m", "wan_core", "generate", "--preset", "tiny-random",
           "--ring", "2", "--device", "cpu", "--prompt", "a fox", "--out", str(out)]
    run = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert out.exists() and run.stderr.count("wrote ") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["video.mp4"]


@pytest.mark.parametrize("extra, world, message", [
    ([], "2", "--window-parallel 2 spreads context windows over ranks: it needs --context-frames"),
    (["--context-frames", "17", "--frames", "33"], "1", "need 2 processes: run torchrun --nproc-per-node 2"),
    (["--context-frames", "17", "--frames", "33", "--fsdp"], "2", "--window-parallel and --fsdp do not combine"),
    (["--context-frames", "17", "--frames", "17"], "2", "the video has 1 context window per step"),
    (["--context-frames", "17", "--frames", "33", "--ulysses", "2"], "2",
     "ulysses 2 x ring 1 x cfg 1 x windows 2 = 4 processes but 2 torchrun processes; for 2 torchrun processes "
     "with cfg 1 and windows 2: ulysses=1 ring=1"),
])
def test_window_parallel_usage_errors_before_any_model_loads(tmp_path, capsys, monkeypatch, extra, world, message):
    monkeypatch.setenv("WORLD_SIZE", world)
    code = main(["generate", "--preset", "tiny-random", "--prompt", "a", "--window-parallel", "2", *extra,
                 "--out", str(tmp_path / "a.mp4")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "a.mp4").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun") is None and not (Path(sys.executable).parent / "torchrun").exists(),
                    reason="torchrun not installed")
def test_torchrun_window_parallel_writes_the_single_process_frames(tmp_path):
    from PIL import Image

    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    common = ["generate", "--preset", "tiny-random", "--device", "cpu", "--prompt", "a fox", "--frames", "33",
              "--context-frames", "17", "--tiling", "off", "--seed", "4"]
    runs = {"par": [torchrun, "--nproc-per-node", "2", "-m", "wan_core", *common, "--window-parallel", "2"],
            "seq": [sys.executable, "-m", "wan_core", *common]}
    for name, cmd in runs.items():
        run = subprocess.run([*cmd, "--out", str(tmp_path / name) + "/"], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stderr.count("wrote ") == 1
    par, seq = (sorted((tmp_path / n).glob("*.png")) for n in ("par", "seq"))
    assert len(par) == len(seq) == 33
    for a, b in zip(par, seq):  # 3 windows over 2 ranks: the same latents, so the same 8-bit frames
        assert Image.open(a).tobytes() == Image.open(b).tobytes(), a.name
